"""Featurising raw records for continual Winnow: binning choices side by side on real data.

    python bench/featurising.py [--eps 1 4] [--seeds 3] [--bins 4 8 16]

Per real stream (bench/datasets.py; declarations from each set's public 10% by
``learners.features.suggest_fields``), continual Winnow's prequential online error,
cumulative / last tenth, for numeric fields cut into equal-width or quantile bins (4, 8,
16), at each epsilon (delta = 1e-6, block 100), beside the majority class. The
"Featurising your data" table of docs/model-kinds.md is this script's output; ``suggest_fields``' defaults
(equal width, 8 bins) come from it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets as D  # noqa: E402  (bench/datasets.py)

from dpstream.learners.continual_winnow import ContinualWinnow, continual_winnow_parameters  # noqa: E402
from dpstream.learners.features import Featuriser, suggest_fields  # noqa: E402
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402


def continual_error(stream: D.Stream, binning: str, bins: int, eps: float, seeds: int):
    f = Featuriser(suggest_fields(stream.public, bins=bins, binning=binning))
    actives = [f.active(r) for r in stream.records]
    y = stream.labels
    block = 100
    p = continual_winnow_parameters(epsilon=eps, delta=1e-6, d=f.binary_dimension,
                                    max_active=f.active_count, horizon=-(-len(y) // block) * block,
                                    block=block)
    out = []
    for seed in range(seeds):
        model = ContinualWinnow(params=p, rng=KeyedRandomness(bytes([seed + 11]) * 32), model_id="bench")
        wrong = np.array([s.prediction != t for s, t in zip(model.learn_many(actives, y), y)])
        tenth = max(1, len(y) // 10)
        out.append((wrong.mean(), wrong[-tenth:].mean()))
    return tuple(np.mean(out, axis=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eps", type=float, nargs="*", default=[1.0, 4.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--bins", type=int, nargs="*", default=[4, 8, 16])
    ap.add_argument("--sets", nargs="*", default=list(D.NAMES))
    args = ap.parse_args()
    choices = [(b, n) for b in ("equal_width", "quantile") for n in args.bins]
    for eps in args.eps:
        print(f"\ncontinual Winnow, epsilon = {eps:g}: online error, cumulative / last tenth "
              f"(mean of {args.seeds} keys)")
        print("| set | majority | " + " | ".join(f"{b.replace('_', '-')} {n}" for b, n in choices) + " |")
        print("|---|---|" + "---|" * len(choices))
        for name in args.sets:
            s = D.load(name)
            maj = s.majority_online
            cells = [continual_error(s, b, n, eps, args.seeds) for b, n in choices]
            best = min(c[0] for c in cells)
            print(f"| {name} | {maj.mean():.1%} | " + " | ".join(
                (f"**{c[0]:.1%}**" if c[0] == best else f"{c[0]:.1%}") + f" / {c[1]:.1%}" for c in cells)
                + " |", flush=True)


if __name__ == "__main__":
    main()
