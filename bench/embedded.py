"""The runtimes without a network, side by side with the batch kernel: ``dpstream run``'s
embedded runtime and ``dpstream replay``, in batches (as they run now) and one record at
a time (as they ran before 2026-12-01's second session: each input sequenced and applied
alone), beside the learner's own batch kernel on the same rows.

    python bench/embedded.py [--repeats 3]

Stream: the shipped ``examples/`` files (a continual-Winnow model; 20,000 examples and
2,000 queries), the same inputs ``dpstream run --models examples/card-fraud.model.json
--examples ... --queries ...`` reads, raw records featurised by the model's declaration.
The first row is that command as a user runs it, start to end (a subprocess: interpreter
start-up and imports, the files read and checked, the data owner's report, the export
written); the others time the processing inside it. Printed: events/s of each path (the fastest of
--repeats runs; a noisy 2-core machine: quote the ratios). The Kafka worker's rate on the
same kind is bench/throughput.py's.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpstream.agents.kinds import kind  # noqa: E402
from dpstream.agents.kinds.continual_winnow import parameters  # noqa: E402
from dpstream.agents.processor import Processor  # noqa: E402
from dpstream.agents.records import RawRecord  # noqa: E402
from dpstream.learners.continual_winnow import ContinualWinnow  # noqa: E402
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402
from dpstream.schemas import ModelConfig  # noqa: E402
from dpstream.streams.tools.embedded import EmbeddedRuntime  # noqa: E402
from dpstream.streams.tools.replay import replay  # noqa: E402

RNG = KeyedRandomness(bytes(range(32)))
RNG_HEX = bytes(range(32)).hex()
EXAMPLES = ROOT / "examples"


def inputs() -> list[tuple[str, bytes]]:
    lines = lambda name: [l for l in (EXAMPLES / name).read_bytes().splitlines() if l.strip()]  # noqa: E731
    model = json.dumps(json.loads((EXAMPLES / "card-fraud.model.json").read_text())).encode()
    return ([("models", model)] + [("examples", l) for l in lines("card-fraud.examples.jsonl")]
            + [("queries", l) for l in lines("card-fraud.queries.jsonl")])


def run_batched(items) -> tuple[float, EmbeddedRuntime]:
    rt = EmbeddedRuntime(RNG)
    t0 = time.perf_counter()
    asyncio.run(rt.feed_all(items))
    return time.perf_counter() - t0, rt


def run_one_at_a_time(items) -> float:
    rt = EmbeddedRuntime(RNG)

    async def go():
        for topic, payload in items:
            await rt.feed(topic, payload)
    t0 = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0


def replay_one_at_a_time(log) -> float:
    async def go():
        processor = Processor(RNG, {}, _discard)
        for r in log:
            await processor.handle_batch([RawRecord("model-events", 0, r["offset"],
                                                    r["value"]["event"]["model_id"].encode(), b"",
                                                    body=r["value"])])
    t0 = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - t0


async def _discard(topic, key, value):
    return None


def kernel(items) -> float:
    """The learner alone on the same rows: ``learn_many`` over the examples in one call,
    ``predict_many`` over the queries."""
    config = ModelConfig.model_validate_json(items[0][1])
    model = ContinualWinnow(params=parameters(config), rng=RNG, model_id=config.model_id)
    row = lambda p: kind(config.kind).featurise(config, p["features"])["active"]  # noqa: E731
    ex = [json.loads(p) for t, p in items if t == "examples"]
    qu = [json.loads(p) for t, p in items if t == "queries"]
    X, Q = [row(e) for e in ex], [row(q) for q in qu]        # the records are raw: rows first
    t0 = time.perf_counter()
    model.learn_many(X, [e["y"] for e in ex])
    model.predict_many(Q)
    return time.perf_counter() - t0


def whole_command(out: Path) -> float:
    """``dpstream run`` on the same files as a user runs it: interpreter start, imports,
    reading and checking the files, the data owner's report, the export written."""
    env = {**os.environ, "DPSTREAM_SECRET_KEY": RNG_HEX}
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "dpstream"), "run", "--quiet",
                    "--models", str(EXAMPLES / "card-fraud.model.json"),
                    "--examples", str(EXAMPLES / "card-fraud.examples.jsonl"),
                    "--queries", str(EXAMPLES / "card-fraud.queries.jsonl"), "--out", str(out)],
                   env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    items = inputs()
    n = len(items)
    batched, rt = min((run_batched(items) for _ in range(args.repeats)), key=lambda r: r[0])
    one = min(run_one_at_a_time(items) for _ in range(args.repeats))
    t_replay = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        report = asyncio.run(replay(RNG, rt.log, rt.outputs))
        t_replay.append(time.perf_counter() - t0)
        assert report.ok
    replay_one = min(replay_one_at_a_time(rt.log) for _ in range(args.repeats))
    k = min(kernel(items) for _ in range(args.repeats))
    with tempfile.TemporaryDirectory() as tmp:
        command = min(whole_command(Path(tmp) / f"out{i}") for i in range(args.repeats))
    rows = [("dpstream run, the whole command (start-up, files read and checked, export written)",
             command),("embedded runtime (dpstream run), batches of 500", batched),
            ("embedded runtime, one record at a time (before)", one),
            ("replay (dpstream replay), batches of 500, with the comparison", min(t_replay)),
            ("replay, one log record at a time (before), without the comparison", replay_one),
            ("continual Winnow batch kernel alone (learn_many + predict_many)", k)]
    print(f"{n:,} inputs from examples/ (continual Winnow), fastest of {args.repeats} runs")
    print("| path | seconds | events/s | vs one at a time |")
    print("|---|---|---|---|")
    for name, secs in rows:
        base = one if "replay" not in name else replay_one
        print(f"| {name} | {secs:.2f} | {n / secs:,.0f} | {base / secs:.1f}x |")


if __name__ == "__main__":
    main()
