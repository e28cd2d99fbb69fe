"""The private predictor on real data, beside what a user would pick instead (issue 45).

    python bench/predictor_real.py [--eps 4] [--seeds 3] [--sets phishing ...]
                                   [--generators logistic halfspace] [--v-max 8 16]
                                   [--hard-weight 0] [--gap 2]

Data: the nine sets of bench/datasets.py (River and scikit-learn, offline; four
imbalanced), featurised by the declaration their public 10% suggests (dense rows in
[-1, 1]^d, as a registration with declared features gives the predictor), the stream
then cut in order: the last third (at most 3,000) are queries, the rest labelled
examples. Learners at the same (epsilon, delta = 1e-6):

* the private predictor (seed 001 framework, per-epoch accounting), one epoch on all the
  labelled examples, k, m and v_max sized automatically (learners.predictor.size_predictor),
  with logistic blocks (the issue-45 base learner) and with the LP halfspaces of before,
  each with its student (learners/student.py) and without;
* diffprivlib's LogisticRegression trained once on the labelled examples (data_norm =
  sqrt(d), the public bound of declared rows), its accuracy on the queries;
* the majority class of the labelled examples (non-private), its accuracy on the queries.

Reported per learner (mean over --seeds keys): the share of queries answered (a label
given: by the vote, by a hard query's coin, or by the student), the accuracy on the
answered ones, and, for the predictor, the accuracy of the vote's answers and of the
student's separately, hard queries, k x m and v_max. Then issue 45's checks on every set
with at least 1,000 labelled examples: answered >= 50%, accuracy on answered >= the
majority class's and within 3 points of diffprivlib's.

``--v-max 8 16 32``: instead of the automatic sizing, each cap as a user registers it
(``v_max``; k and m then by ``size_predictor(v_max=...)``), one row per set and cap:
the trade between the hard queries' count and the vote's noise (issue 45, third round).
``--hard-weight 0``: hard queries left out of the blocks' fits (logistic blocks: issue
45, seventh round); ``--gap 2.5``: a wider gap in noise scales, for the sizing and the
config (fewer answers on the wrong side, a lower cap).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import datasets as D  # noqa: E402  (bench/datasets.py)
from common import balanced_error  # noqa: E402

from dpstream.learners.features import Featuriser, suggest_fields  # noqa: E402
from dpstream.learners.generators import (Halfspaces, LogisticRegressions,  # noqa: E402
                                          NearestNeighbours)
from dpstream.learners.predictor import (ANSWERED, GAP_SCALES, HARD, STUDENT,  # noqa: E402
                                         PredictorConfig, PrivatePredictor, size_predictor)
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402

MAX_QUERIES = 3_000


def split(s: D.Stream):
    f = Featuriser(suggest_fields(s.public))
    X = np.array([f.dense(r) for r in s.records])
    q = min(MAX_QUERIES, len(s.labels) // 3)
    return X[:-q], s.labels[:-q], X[-q:], s.labels[-q:]


def predictor(X, y, Q, qy, eps, seed, generator, v_max=None, hard_weight=None,
              gap=GAP_SCALES) -> dict:
    """One epoch with its student; without the student the same run answers the same up
    to exhaustion and nothing after it (the ``bare`` entries). ``v_max``: a registered
    cap (None: the automatic sizing); ``hard_weight``: the registration's
    ``hard_query_weight`` (None: the generator's default, agents/kinds/predictor.py,
    but 1 for halfspaces, as this bench has always run them);
    ``gap``: the noise scales of the vote's gap, for the sizing and the config."""
    k, m, v_max = size_predictor(epsilon=eps, delta=1e-6, examples=len(y), v_max=v_max, gap=gap)
    w = {} if hard_weight is None else {"hard_weight": hard_weight}
    gen = {"logistic": lambda d: LogisticRegressions(d, **w),
           "nearest": lambda d: NearestNeighbours(d, **w),
           "halfspace": lambda d: Halfspaces(d, **({"hard_weight": 1.0} | w))}[generator](X.shape[1])
    model = PrivatePredictor(config=PredictorConfig(k=k, epsilon=eps, delta=1e-6, v_max=v_max, gap=gap),
                             generator=gen, rng=KeyedRandomness(bytes([seed + 1]) * 32),
                             model_id=f"bench-{generator}", student=True)
    t0 = time.perf_counter()
    model.start_epoch(X, y)
    answers = [model.answer(x) for x in Q]
    secs = time.perf_counter() - t0
    labels = np.array([0 if a.label is None else a.label for a in answers])
    status = np.array([a.status for a in answers])
    given = labels != 0

    def acc(mask):
        return float(np.mean(labels[mask] == qy[mask])) if mask.any() else float("nan")
    bare = given & (status != STUDENT)
    return {"answered": float(given.mean()), "acc": acc(given),
            "balanced": balanced_error(labels[given], qy[given]), "vote": acc(status == ANSWERED),
            "bare answered": float(bare.mean()), "bare acc": acc(bare),
            "vote share": float(np.mean(status == ANSWERED)), "student": acc(status == STUDENT),
            "student share": float(np.mean(status == STUDENT)), "hard": float(np.sum(status == HARD)),
            "k": k, "m": m, "v_max": v_max, "secs": secs}


def dp_logistic(X, y, Q, qy, eps, seed) -> dict:
    from diffprivlib.models import LogisticRegression
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(epsilon=eps, data_norm=float(np.sqrt(X.shape[1])),
                                 random_state=seed).fit(X, y)
        pred = clf.predict(Q)
        return {"answered": 1.0, "acc": float(np.mean(pred == qy)), "balanced": balanced_error(pred, qy)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[4.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--sets", nargs="*", default=list(D.NAMES))
    ap.add_argument("--generators", nargs="+", default=["nearest"],
                    choices=["nearest", "logistic", "halfspace"])
    ap.add_argument("--v-max", type=int, nargs="*", default=None,
                    help="registered caps on hard queries, one row each, instead of the sizing")
    ap.add_argument("--hard-weight", type=float, default=None,
                    help="a hard query's weight in the blocks' fits, as the registration's "
                         "hard_query_weight (default: each generator's own)")
    ap.add_argument("--gap", type=float, default=GAP_SCALES,
                    help=f"the vote's gap in noise scales, for the sizing and the config (default {GAP_SCALES:g})")
    args = ap.parse_args()
    if not (args.gap > 0 and np.isfinite(args.gap)):
        ap.error("--gap must be a finite number > 0")
    if args.hard_weight is not None and not (args.hard_weight >= 0 and np.isfinite(args.hard_weight)):
        ap.error("--hard-weight must be a finite number >= 0")
    opts = {"hard_weight": args.hard_weight, "gap": args.gap}
    if args.v_max:
        caps(args, opts)
        return
    for eps in args.eps:
        print(f"\nepsilon = {eps:g}, delta = 1e-6 (mean of {args.seeds} keys; * imbalanced): "
              "answered / accuracy on answered / balanced error on answered [vote's answers: share, accuracy | student's: "
              f"share, accuracy | hard queries]; gap {args.gap:g} noise scales, hard query weight "
              f"{'each generator' + chr(39) + 's default' if args.hard_weight is None else format(args.hard_weight, 'g')}")
        checks = []
        for name in args.sets:
            X, y, Q, qy = split(D.load(name))
            maj_label = 1 if (y == 1).mean() > 0.5 else -1
            majority = float(np.mean(qy == maj_label))
            try:
                size_predictor(epsilon=eps, delta=1e-6, examples=len(y), gap=args.gap)
            except Exception as err:              # noqa: BLE001 - too few examples: say so
                print(f"| {name} | {len(y):,} / {len(qy):,} | infeasible: {err} |")
                continue
            dplr = [dp_logistic(X, y, Q, qy, eps, s) for s in range(args.seeds)]
            dplr = {k: float(np.mean([r[k] for r in dplr])) for k in dplr[0]}
            cells, main_row = [], None
            for generator in args.generators:
                runs = [predictor(X, y, Q, qy, eps, s, generator, **opts) for s in range(args.seeds)]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")          # a share that is empty in every run
                    r = {k: float(np.nanmean([x[k] for x in runs])) for k in runs[0]}
                if generator == args.generators[0]:
                    main_row = r
                cells.append(f"{generator}, student: {r['answered']:.0%} / {r['acc']:.1%} / {r['balanced']:.3f} "
                             f"[{r['vote share']:.0%}, {r['vote']:.1%} | {r['student share']:.0%}, "
                             f"{r['student']:.1%} | {r['hard']:.1f}] | without: {r['bare answered']:.0%} / "
                             f"{r['bare acc']:.1%}")
            star = "*" if name in D.IMBALANCED else ""
            print(f"| {name}{star} | {len(y):,} labelled / {len(qy):,} queries | k x m = "
                  f"{main_row['k']:.0f} x {main_row['m']:.0f}, v_max {main_row['v_max']:.0f} | majority "
                  f"{majority:.1%} | diffprivlib LR {dplr['acc']:.1%} / {dplr['balanced']:.3f} | "
                  + " | ".join(cells) + " |",
                  flush=True)
            if len(y) >= 1000:
                checks.append((name, main_row, majority, dplr["acc"]))
        print(f"\nissue 45 at epsilon {eps:g}: the predictor ({args.generators[0]} blocks, with its "
              "student) on every set with >= 1,000 labelled examples")
        for name, r, maj, dplr in checks:
            print(f"  {name}: answered {r['answered']:.1%} >= 50%: {r['answered'] >= 0.5}; accuracy "
                  f"{r['acc']:.2%} >= majority {maj:.2%}: {r['acc'] >= maj}; within 3 points of "
                  f"diffprivlib {dplr:.2%}: {r['acc'] >= dplr - 0.03}")


def caps(args, opts: dict) -> None:
    """Accuracy on answered queries per registered cap (``--v-max``), first generator."""
    gen = args.generators[0]
    for eps in args.eps:
        print(f"\nepsilon = {eps:g}, delta = 1e-6, {gen} blocks with the student, registered v_max "
              f"(mean of {args.seeds} keys): answered / accuracy [vote's share, accuracy | "
              "student's share, accuracy | hard queries] (per key)")
        for name in args.sets:
            X, y, Q, qy = split(D.load(name))
            majority = float(np.mean(qy == (1 if (y == 1).mean() > 0.5 else -1)))
            for v in args.v_max:
                try:
                    runs = [predictor(X, y, Q, qy, eps, s, gen, v_max=v, **opts) for s in range(args.seeds)]
                except Exception as err:            # noqa: BLE001 - too few examples: say so
                    print(f"| {name} | v_max {v} | infeasible: {err} |")
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = {k: float(np.nanmean([x[k] for x in runs])) for k in runs[0]}
                print(f"| {name} | majority {majority:.1%} | v_max {v}, k x m = {r['k']:.0f} x {r['m']:.0f} | "
                      f"{r['answered']:.0%} / {r['acc']:.1%} [{r['vote share']:.0%}, {r['vote']:.1%} | "
                      f"{r['student share']:.0%}, {r['student']:.1%} | {r['hard']:.1f}] | "
                      + ", ".join(f"{x['acc']:.1%}" for x in runs) + " |", flush=True)


if __name__ == "__main__":
    main()
