"""DP-GreedyCover fit time and accuracy, side by side with Rivest's greedy, one run.

    python bench/greedy_cover.py [--ns 100000 1000000] [--d 1000]

Features: the d literals and their negations (|F| = 2d = 2,000 by default), rows
bit-packed. Target: a planted 1-decision list of 12 rules with several alternations.
Accuracy on 20,000 fresh rows at eps in {0.5, 1, 4} (delta = 1e-6, the set-cover
analysis of mechanisms.params.greedy_cover_round_epsilon). Machine noise applies.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import DATA_KEY, timed

from dpstream.learners.decision_list import TRUE, DecisionList, FeatureFamily
from dpstream.learners.decision_list_classifier import round_epsilon
from dpstream.learners.greedy_cover import dp_greedy_cover, rivest_greedy
from dpstream.mechanisms.randomness import KeyedRandomness


def planted(family: FeatureFamily) -> DecisionList:
    d = family.d
    rules = [(3, 1), (d + 10, 0), (25, 1), (d + 40, 1), (7, 0), (99 % d, 1), (d + 5, 0),
             (60 % d, 0), (d + 77 % d, 1), (12, 0), (d + 31, 1), (500 % d, 0)]
    return DecisionList(family, tuple(rules) + ((TRUE, 1),), 1)


def sample(family: FeatureFamily, target: DecisionList, n: int, seed: int, chunk: int = 50_000):
    s = DATA_KEY.stream("bench", f"greedy-{family.d}", seed)
    packed, labels = [], []
    for a in range(0, n, chunk):
        rows = min(chunk, n - a)
        X = s.bits(rows * family.d).reshape(rows, family.d)
        labels.append(target.predict(X))
        packed.append(family.evaluate_packed(X))
    return np.concatenate(packed), np.concatenate(labels)


def accuracy(dl: DecisionList, family, target, n=20_000) -> float:
    s = DATA_KEY.stream("bench", "greedy-test", 0)
    X = s.bits(n * family.d).reshape(n, family.d)
    return float((dl.predict(X) == target.predict(X)).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ns", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--d", type=int, default=1000)
    args = ap.parse_args()
    family = FeatureFamily(args.d)
    target = planted(family)
    rng = KeyedRandomness(b"bench-greedy-key-000000000000000")
    for n in args.ns:
        packed, y = sample(family, target, n, seed=n)
        print(f"\nn = {n:,}, |F| = {len(family):,} (+ constant rule), packed rows {packed.nbytes / 2**20:.0f} MiB")
        riv, t_riv = timed(lambda: rivest_greedy(family, y=y, packed=packed))
        print(f"{'learner':30s} {'fit s':>8s} {'vs Rivest':>10s} {'rules':>6s} {'accuracy':>9s}")
        print(f"{'Rivest greedy (non-private)':30s} {t_riv:8.2f} {1.0:9.2f}x {len(riv.rules):6d} "
              f"{accuracy(riv, family, target):9.4f}")
        for eps in (0.5, 1.0, 4.0):
            e_r = round_epsilon("set_cover", eps, 1e-6, len(family))
            dl, t = timed(lambda: dp_greedy_cover(family, y=y, packed=packed, epsilon_round=e_r,
                                                  stream=rng.stream("bench", "greedy", (n, int(eps * 10)))))
            print(f"{f'DP-GreedyCover eps={eps:g}':30s} {t:8.2f} {t / t_riv:9.2f}x {len(dl.rules):6d} "
                  f"{accuracy(dl, family, target):9.4f}   (round eps {e_r:.4f}; basic would give "
                  f"{round_epsilon('basic', eps, 1e-6, len(family)):.2e})")


if __name__ == "__main__":
    main()
