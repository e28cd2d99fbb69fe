"""DP-Winnow throughput and mistakes, side by side in one run.

    python bench/dp_winnow.py [--T 1000000] [--dims 1000 100000]

Stream: a realizable sparse disjunction (label +1 iff one of 10 relevant features is
active), 20 active features per row including a constant feature; margin rho =
1/(2*10 - 1). Learners on the same events: DP-Winnow with Theorem 11 parameters, DP-Winnow
with a practical setting (its guaranteed eps printed), non-private Winnow, and River's
linear_model.Perceptron (learn_one/predict_one). Times cover the learners' calls only.
Machine noise applies: compare ratios measured in the same run.
"""
from __future__ import annotations

import argparse

import numpy as np
from common import disjunction_rows, timed

from dpstream.learners.dp_winnow import DPWinnow
from dpstream.learners.inputs import BinaryInput
from dpstream.learners.winnow import Winnow
from dpstream.mechanisms.params import (dp_winnow_practical_parameters, dp_winnow_theory_parameters,
                                        winnow_update_bound)
from dpstream.mechanisms.randomness import KeyedRandomness

RELEVANT, ACTIVE = 10, 20


def run_ours(model, inputs, labels):
    mistakes = 0
    if isinstance(model, DPWinnow):
        for x, y in zip(inputs, labels):
            mistakes += model.learn_one(x.active.tolist(), y).prediction != y
    else:
        for x, y in zip(inputs, labels):
            mistakes += model.learn_one(x, y) != y
    return mistakes


def run_river(model, rows, labels):
    mistakes = 0
    for row, y in zip(rows, labels):
        x = {int(j): 1.0 for j in row}
        mistakes += (model.predict_one(x) is True) != (y == 1)
        model.learn_one(x, bool(y == 1))
    return mistakes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=1_000_000)
    ap.add_argument("--dims", type=int, nargs="+", default=[1000, 100_000])
    args = ap.parse_args()
    from river import linear_model

    rho = 1.0 / (2 * RELEVANT - 1)
    rng = KeyedRandomness(b"bench-dp-winnow-key-000000000000")
    for d in args.dims:
        rows, labels = disjunction_rows(d, RELEVANT, ACTIVE, args.T, seed=d)
        inputs = [BinaryInput(d, active=np.sort(r)) for r in rows]
        theory = dp_winnow_theory_parameters(epsilon=0.99, delta=1e-6, rho=rho, T=args.T,
                                             beta=0.01, d=d)
        practical = dp_winnow_practical_parameters(eps_hat=1.0, eta=0.05, m=5000, K=2000, L=3.0,
                                                   delta=1e-6, rho=rho, T=args.T, beta=0.01)
        eta_np = rho
        runs = {
            "DP-Winnow (Theorem 11)": DPWinnow(params=theory, d=d, rng=rng, model_id=f"th{d}"),
            "DP-Winnow (practical)": DPWinnow(params=practical, d=d, rng=rng, model_id=f"pr{d}"),
            "Winnow (non-private)": Winnow(d=d, eta=eta_np),
        }
        print(f"\nd = {d:,}, T = {args.T:,}, rho = {rho:.4f}, active = {ACTIVE}")
        results = {}
        for name, model in runs.items():
            mistakes, secs = timed(lambda: run_ours(model, inputs, labels))
            results[name] = (mistakes, secs)
        mistakes, secs = timed(lambda: run_river(linear_model.Perceptron(), rows, labels))
        results["River Perceptron"] = (mistakes, secs)
        base = results["Winnow (non-private)"][1]
        river = results["River Perceptron"][1]
        print(f"{'learner':26s} {'events/s':>12s} {'vs Winnow':>10s} {'vs River':>9s} {'mistakes':>10s}")
        for name, (m, secs) in results.items():
            print(f"{name:26s} {args.T / secs:12,.0f} {base / secs:9.2f}x {river / secs:8.2f}x {m:10,d}")
        th = runs["DP-Winnow (Theorem 11)"]
        print(f"Theorem 11: eps^={theory.eps_hat:.3g}, eta={theory.eta:.3g}, m={theory.m:,}, "
              f"K={theory.K:.3g}, L={theory.L:.3g}; guarantee eps={theory.epsilon:.3f}, "
              f"updates made {th.state.k}")
        print(f"Theorem 12 mistake bound 16 ln(2T^2/beta)/eps^ * K = "
              f"{16 * np.log(2 * args.T**2 / 0.01) / theory.eps_hat * theory.K:.3g}")
        pr = runs["DP-Winnow (practical)"]
        print(f"practical: eps^=1, eta=0.05, m=5000, K=2000, L=3 -> guaranteed eps={practical.epsilon:.4g} "
              f"(delta=1e-6); updates {pr.state.k}, ledger eps spent {pr.ledger.totals().epsilon:.4g}")
        print(f"Winnow mistake bound (Lemma 9, c=0, eta=rho): {winnow_update_bound(d, eta_np, rho, 0.0):,.0f}")


if __name__ == "__main__":
    main()
