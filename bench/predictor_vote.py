"""Where the private predictor loses accuracy on real data: its vote without noise
(issue 45, fourth round).

    python bench/predictor_vote.py [--sets segment yeast ...]

On the streams of bench/predictor_real.py (the same split and the same automatic sizing
at epsilon 4, delta 1e-6), the k blocks of m labelled examples each fit a base learner,
and every query is labelled by the blocks' plain majority, with no noise and no budget:
an upper bound on what the vote's own answers can reach. Printed per set and base
learner: that accuracy, the share of queries on which at least 70% of the blocks agree
(``decisive``: roughly where BetweenThresholds answers without a hard query), and the
accuracy there. Base learners: one nearest neighbour per block (``NearestNeighbours``),
L2 logistic regression per block (``LogisticRegressions``' fit), and per-block selection
of the two by leave-one-out accuracy on the block (ties: nearest).

Read beside bench/predictor_real.py: where the noiseless vote is close to the
predictor's vote accuracy but the predictor's overall accuracy is lower, the loss is
the student's (after the hard queries are spent), not the vote's.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets as D  # noqa: E402  (bench/datasets.py)
from predictor_real import split  # noqa: E402

from dpstream.learners.generators import L2, fit_logistic  # noqa: E402
from dpstream.learners.predictor import size_predictor  # noqa: E402

DECISIVE = 0.7


def logistic_label(theta, X) -> np.ndarray:
    return np.where(X @ theta[:-1] - theta[-1] >= 0, 1, -1)


def leave_one_out(X, y) -> tuple[int, int]:
    """(nearest, logistic) leave-one-out hits on one block."""
    hits = np.zeros(2, dtype=int)
    for i in range(len(y)):
        rest = np.arange(len(y)) != i
        d = ((X[rest] - X[i]) ** 2).sum(axis=1)
        hits[0] += y[rest][np.argmin(d)] == y[i]
        hits[1] += logistic_label(fit_logistic(X[rest], y[rest], l2=L2), X[i:i + 1])[0] == y[i]
    return int(hits[0]), int(hits[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--sets", nargs="*", default=list(D.NAMES))
    args = ap.parse_args()
    print(f"noiseless vote (epsilon 4 sizing): accuracy / decisive share (>= {DECISIVE:.0%} of blocks agree) "
          "/ accuracy when decisive")
    for name in args.sets:
        X, y, Q, qy = split(D.load(name))
        try:
            k, m, _ = size_predictor(epsilon=4.0, delta=1e-6, examples=len(y))
        except Exception as err:                # noqa: BLE001 - too few examples: say so
            print(f"| {name} | infeasible: {str(err)[:80]} |")
            continue
        Xb, yb = X[:k * m].reshape(k, m, -1), y[:k * m].reshape(k, m)
        thetas = np.array([fit_logistic(Xb[i], yb[i], l2=L2) for i in range(k)])
        loo = np.array([leave_one_out(Xb[i], yb[i]) for i in range(k)])
        d2 = ((Xb[None] - Q[:, None, None, :]) ** 2).sum(axis=-1)              # query, block, example
        nearest = yb[np.arange(k)[None, :], d2.argmin(axis=-1)]
        logistic = np.where(np.einsum("qd,kd->qk", Q, thetas[:, :-1]) - thetas[:, -1] >= 0, 1, -1)
        chosen = np.where((loo[:, 0] >= loo[:, 1])[None, :], nearest, logistic)
        cells = []
        for label, votes in (("nearest", nearest), ("logistic", logistic), ("per-block choice", chosen)):
            share = (votes == 1).mean(axis=1)
            answer = np.where(share >= 0.5, 1, -1)
            decisive = np.maximum(share, 1 - share) >= DECISIVE
            right = answer == qy
            cells.append(f"{label}: {right.mean():.1%} / {decisive.mean():.0%} / "
                         f"{right[decisive].mean() if decisive.any() else float('nan'):.1%}")
        star = "*" if name in D.IMBALANCED else ""
        print(f"| {name}{star} | k x m = {k} x {m} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
