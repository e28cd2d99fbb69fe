"""The private predictor on real data, beside what a user would pick instead.

    python bench/predictor_real.py [--eps 1 4 10] [--k 1000] [--v-max 8] [--queries 15000]

Data: River's bundled UCI Shuttle (49,097 rows, 9 sensor readings, 7% anomalies),
standardised, split by a keyed shuffle into labelled examples and 15,000 queries.
Learners at the same (epsilon, delta = 1e-6): the private predictor (seed 001 framework,
oblivious halfspace generator, k blocks) with per-epoch accounting and with the seed's
per-instance composition; a train-once DP logistic regression (diffprivlib, trained on
the same examples; its data_norm is set from the data, which a deployment would fix from
public knowledge); the majority class. Reported: queries answered, accuracy on the
answered ones and on all (unanswered count as wrong), hard queries, epsilon charged.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from common import DATA_KEY

from dpstream.learners.generators import Halfspaces
from dpstream.learners.predictor import ANSWERED, HARD, PredictorConfig, PrivatePredictor
from dpstream.mechanisms.accounting import Ledger
from dpstream.mechanisms.errors import ThresholdsTooClose
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(b"bench-predictor-real-key-0000000")


def shuttle(n_queries: int):
    from river import datasets
    data = list(datasets.Shuttle())
    names = sorted(data[0][0])
    X = np.array([[x[n] for n in names] for x, _ in data], dtype=float)
    y = np.array([1 if t else -1 for _, t in data])
    X = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1)
    perm = np.argsort(DATA_KEY.stream("bench", "shuttle-split", 0).uniform(len(y)))
    X, y = X[perm], y[perm]
    return X[n_queries:], y[n_queries:], X[:n_queries], y[:n_queries]


def predictor(X, y, Q, qy, eps, k, v_max, accounting, hard_weight):
    config = PredictorConfig(k=k, epsilon=eps, delta=1e-6, v_max=v_max, accounting=accounting)
    gen = Halfspaces(X.shape[1], hard_weight=hard_weight)
    t0 = time.perf_counter()
    try:
        model = PrivatePredictor(config=config, generator=gen, rng=RNG,
                                 model_id=f"shuttle-{eps}-{accounting}-{hard_weight}")
    except ThresholdsTooClose as err:
        return {"note": str(err)[:90]}
    calib = time.perf_counter() - t0
    model.start_epoch(X, y)
    fit = time.perf_counter() - t0 - calib
    answers = [model.answer(q) for q in Q]
    labels = np.array([a.label if a.label is not None else 0 for a in answers])
    answered = np.array([a.status == ANSWERED for a in answers])
    return {"answered": int(answered.sum()),
            "acc answered": float((labels[answered] == qy[answered]).mean()) if answered.any() else float("nan"),
            "acc all": float((labels == qy).mean()),
            "hard": int(sum(a.status == HARD for a in answers)),
            "eps": Ledger(model.state.ledger).totals().epsilon,
            "b": float(model.calibration.scale), "calib s": calib, "fit s": fit}


def dp_logistic(X, y, Q, qy, eps):
    from diffprivlib.models import LogisticRegression
    norm = float(np.linalg.norm(X, axis=1).max())
    clf = LogisticRegression(epsilon=eps, data_norm=norm, random_state=0).fit(X, y)
    return {"answered": len(qy), "acc answered": float((clf.predict(Q) == qy).mean()),
            "acc all": float((clf.predict(Q) == qy).mean()), "hard": 0, "eps": eps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0, 4.0, 10.0])
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--v-max", type=int, default=8)
    ap.add_argument("--queries", type=int, default=15_000)
    ap.add_argument("--hard-weights", type=float, nargs="+", default=[1e4, 1.0])
    args = ap.parse_args()
    X, y, Q, qy = shuttle(args.queries)
    majority = max((qy == 1).mean(), (qy == -1).mean())
    print(f"UCI Shuttle: {len(y):,} labelled examples, {len(qy):,} queries; majority class "
          f"accuracy {majority:.4f}; k = {args.k} blocks of {len(y) // args.k}, v_max = {args.v_max}")
    print(f"{'learner':44s} {'eps':>5s} {'answered':>9s} {'acc ans.':>8s} {'acc all':>8s} "
          f"{'hard':>5s} {'b':>6s} {'calib s':>7s} {'fit s':>6s}")
    for eps in args.eps:
        rows = []
        for accounting in ("epoch", "instance"):
            for w in args.hard_weights:
                rows.append((f"private predictor ({accounting}, hard weight {w:g})",
                             predictor(X, y, Q, qy, eps, args.k, args.v_max, accounting, w)))
        rows.append(("DP logistic regression (diffprivlib)", dp_logistic(X, y, Q, qy, eps)))
        for name, r in rows:
            if "note" in r:
                print(f"{name:44s} {eps:5g}  infeasible: {r['note']}")
                continue
            print(f"{name:44s} {eps:5g} {r['answered']:9,d} {r['acc answered']:8.4f} {r['acc all']:8.4f} "
                  f"{r['hard']:5d} {r.get('b', float('nan')):6.1f} {r.get('calib s', 0):7.2f} {r.get('fit s', 0):6.1f}")


if __name__ == "__main__":
    main()
