"""Continual-release Winnow against what a user would pick instead, side by side in one run.

    python bench/continual_winnow.py [--T 1000000] [--dims 1000] [--eps 0.5 1 2 4 10]
                                     [--big-d 100000 --big-eps 1 4] [--skip-synthetic]

Streams:
* synthetic: the realizable sparse disjunction of bench/dp_winnow.py (label +1 iff one of
  10 relevant features is active; 20 active features per row, a constant one included);
* real: River's bundled UCI Shuttle data (49,097 rows, 7% anomalies), one-hot binned.

Learners on the same events: continual-release Winnow at each epsilon (delta = 1e-6,
replace-one, one epoch over the whole stream, block 100 or --big-block at large d), the
seed's DP-Winnow at the practical setting of bench/dp_winnow.py with the epsilon it
guarantees, non-private Winnow, River's Perceptron, and the majority class (online).
Mistakes are counted in-process: cumulative and over the last tenth. Times cover the
learners' calls; machine noise applies, compare ratios from the same run.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import DATA_KEY, disjunction_rows, shuttle_rows, timed

from dpstream.learners.continual_winnow import ContinualWinnow, continual_winnow_parameters
from dpstream.learners.dp_winnow import DPWinnow
from dpstream.learners.inputs import BinaryInput
from dpstream.learners.winnow import Winnow
from dpstream.mechanisms.params import dp_winnow_practical_parameters
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(b"bench-continual-winnow-key-00000")
CHUNK = 10_000


def tally(preds, labels):
    wrong = np.asarray(preds) != np.asarray(labels)
    tail = len(labels) - len(labels) // 10
    return int(wrong.sum()), int(wrong[tail:].sum())


def continual(rows, labels, d, eps, block, max_active):
    T = len(labels) // block * block
    p = continual_winnow_parameters(epsilon=eps, delta=1e-6, d=d, max_active=max_active - 1,
                                    horizon=T, block=block)
    m = ContinualWinnow(params=p, rng=RNG, model_id=f"cw-{d}-{eps}")

    def go():
        out = []
        for lo in range(0, T, CHUNK):
            hi = min(T, lo + CHUNK)
            out += [s.prediction for s in m.learn_many(list(rows[lo:hi]), labels[lo:hi])]
        return out
    preds, secs = timed(go)
    return preds, secs, p, labels[:T]


def nonprivate_winnow(rows, labels, d, eta):
    w = Winnow(d=d, eta=eta)
    return timed(lambda: [w.learn_one(BinaryInput(d, active=np.unique(r)), int(y))
                          for r, y in zip(rows, labels)])


def seed_dp_winnow(rows, labels, d):
    params = dp_winnow_practical_parameters(eps_hat=1.0, eta=0.05, m=5000, K=2000, L=3.0, delta=1e-6)
    m = DPWinnow(params=params, d=d, rng=RNG, model_id=f"seed-{d}")
    preds, secs = timed(lambda: [m.learn_one(np.unique(r).tolist(), int(y)).prediction
                                 for r, y in zip(rows, labels)])
    return preds, secs, params.epsilon


def river_perceptron(rows, labels):
    from river import linear_model
    model = linear_model.Perceptron()

    def go():
        out = []
        for r, y in zip(rows, labels):
            x = {int(j): 1.0 for j in r}
            out.append(1 if model.predict_one(x) is True else -1)
            model.learn_one(x, bool(y == 1))
        return out
    return timed(go)


def majority(labels):
    pos = neg = 0
    out = []
    for y in labels:
        out.append(1 if pos > neg else -1)
        pos, neg = pos + (y == 1), neg + (y == -1)
    return out


def report(title, rows, labels, d, max_active, eps_list, block, baselines=True):
    n = len(labels)
    print(f"\n{title}: T = {n:,}, d = {d:,}, active <= {max_active - 1} (+ bias), block {block}")
    print(f"{'learner':34s} {'eps':>9s} {'events/s':>10s} {'mistakes':>9s} {'cum %':>7s} {'last 10% %':>10s}")
    lines = []
    for eps in eps_list:
        preds, secs, p, lab = continual(rows, labels, d, eps, block, max_active)
        m, last = tally(preds, lab)
        lines.append(("continual Winnow (tree, DGauss)", f"{p.epsilon:.3g}", len(lab) / secs, m, len(lab), last))
    if baselines:
        preds, secs, eps_seed = seed_dp_winnow(rows, labels, d)
        m, last = tally(preds, labels)
        lines.append(("seed DP-Winnow (practical)", f"{eps_seed:.3g}", n / secs, m, n, last))
        preds, secs = nonprivate_winnow(rows, labels, d, eta=0.5)
        m, last = tally(preds, labels)
        lines.append(("Winnow (non-private)", "inf", n / secs, m, n, last))
        preds, secs = river_perceptron(rows, labels)
        m, last = tally(preds, labels)
        lines.append(("River Perceptron (non-private)", "inf", n / secs, m, n, last))
    m, last = tally(majority(labels), labels)
    lines.append(("majority class (online)", "-", float("nan"), m, n, last))
    for name, eps, rate, m, total, last in lines:
        print(f"{name:34s} {eps:>9s} {rate:10,.0f} {m:9,d} {100 * m / total:7.3f} {100 * last / (total // 10):10.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=1_000_000)
    ap.add_argument("--dims", type=int, nargs="*", default=[1000])
    ap.add_argument("--eps", type=float, nargs="+", default=[0.5, 1, 2, 4, 10])
    ap.add_argument("--big-d", type=int, nargs="*", default=[100_000])
    ap.add_argument("--big-eps", type=float, nargs="+", default=[1, 4])
    ap.add_argument("--big-block", type=int, default=1000)
    ap.add_argument("--skip-synthetic", action="store_true")
    args = ap.parse_args()
    if not args.skip_synthetic:
        for d in args.dims:
            rows, labels = disjunction_rows(d, 10, 20, args.T, seed=d)
            report("sparse disjunction", rows, labels, d, 21, args.eps, 100)
        for d in args.big_d:
            rows, labels = disjunction_rows(d, 10, 20, args.T, seed=d)
            report("sparse disjunction (large d)", rows, labels, d, 21, args.big_eps, args.big_block,
                   baselines=False)
    rows, labels, d = shuttle_rows()
    order = DATA_KEY.stream("bench", "shuttle-order", 0).below(np.arange(len(labels), 0, -1))
    perm = np.arange(len(labels))
    for i, j in enumerate(order):                       # a keyed shuffle: i.i.d. arrival order
        a = len(labels) - 1 - i
        perm[a], perm[j] = perm[j], perm[a]
    report("UCI Shuttle (River, real)", rows[perm], labels[perm], d, 10, args.eps, 100)


if __name__ == "__main__":
    main()
