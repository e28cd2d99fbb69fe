"""Write a 10^5-event demo stream for the auditor's walk-through (README "Audit"; docs/operations.md).

    python bench/audit_demo.py --out /tmp/audit-demo [--events 100000]

Produces model.json, examples.jsonl and queries.jsonl for the documented card-fraud
stream of streams/cli/demo.py (one query per ten examples).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dpstream.streams.cli.demo import MODELS, fraud_stream  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--events", type=int, default=100_000)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n_examples = args.events * 10 // 11
    (out / "model.json").write_text(json.dumps(MODELS[0]) + "\n")
    with open(out / "examples.jsonl", "w") as ex, open(out / "queries.jsonl", "w") as qs:
        for i, (act, y) in enumerate(fraud_stream(n_examples)):
            ex.write(json.dumps({"model_id": "card-fraud", "active": act, "y": y}) + "\n")
            if i % 10 == 0:
                qs.write(json.dumps({"model_id": "card-fraud", "active": act, "query_id": f"q{i}"}) + "\n")
    print(f"wrote {out}/model.json, examples.jsonl ({n_examples:,}), queries.jsonl")


if __name__ == "__main__":
    main()
