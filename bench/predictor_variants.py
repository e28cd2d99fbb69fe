"""Changes to the private predictor that were tried and not kept (issue 45, fifth round),
each beside the predictor as it is, over more keys than the other benches use.

    python bench/predictor_variants.py [--keys 10] [--sets segment digits ...]

The streams, split and learners are bench/predictor_real.py's (epsilon 4, delta 1e-6,
nearest-neighbour blocks with the student); the sets are the six with at least 1,000
labelled examples and the three held-out tasks of bench/datasets.py. Per set, the
accuracy on all queries, mean over ``--keys`` keys (keys 0 to 2 are the other
benches'), for:

* ``as is``: learners.predictor.size_predictor's sizing, and the student as it is (since
  the sixth round it chooses label spreading over the queries seen by cross-validation,
  learners/student.py);
* ``cap 16``: the same sizing with the cap ladder topped at 16 hard queries, not 64;
* ``blocks at gap 2``: the sizing's cap, but k = k_min(cap), the fewest blocks whose
  vote gap holds 2 noise scales, so the blocks are as large as the examples allow (the
  sizing grows blocks past 10 examples only at the top of the ladder);
* ``checked``: a vote's label replaced by the unanimous label of the 9 nearest answers
  the student was fitted on, when those say the other label (a post-processing step
  against noise that flips a unanimous vote), the replaced label kept for the student;
* ``screened``: once 32 answers are kept, a query whose 9 nearest kept answers agree is
  answered by them without the vote (saving the hard queries that noise makes of
  unanimous votes);
* ``spread`` (the fifth round's trial that led to the sixth round's student): after the
  budget runs out, the student replaced by label spreading (Zhou et
  al. 2004; scikit-learn's ``LabelSpreading``, 7 nearest neighbours, alpha 0.5) over
  the released answers and the queries seen so far (at most 2,048), refitted each time
  the queries seen double.

All are post-processing of the released transcript (or a sizing), so none changes the
privacy guarantee; they are judged on accuracy alone, and kept only if they help on
every set, held-out ones included.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets as D  # noqa: E402  (bench/datasets.py)
from predictor_real import split  # noqa: E402

from dpstream.learners import predictor as P  # noqa: E402
from dpstream.learners.generators import NearestNeighbours  # noqa: E402
from dpstream.learners.predictor import (ANSWERED, STUDENT, Answer, PredictorConfig,  # noqa: E402
                                         PrivatePredictor, size_predictor, smallest_k)
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402

SETS = ("segment", "shuttle", "bananas", "digits", "yeast", "digits_zero", *D.HELD_OUT)
NEIGHBOURS = 9
SPREAD_CAP = 2_048


def sizing(n: int, variant: str) -> tuple[int, int, int]:
    if variant == "cap 16":
        ladder = P.V_MAX_LADDER
        try:
            P.V_MAX_LADDER = tuple(v for v in ladder if v <= 16)
            return size_predictor.__wrapped__(epsilon=4.0, delta=1e-6, examples=n)
        finally:
            P.V_MAX_LADDER = ladder
    k, m, v = size_predictor(epsilon=4.0, delta=1e-6, examples=n)
    if variant == "blocks at gap 2":
        k = smallest_k(epsilon=4.0, delta=1e-6, v_max=v)
        m = n // k
    return k, m, v


class Checked(PrivatePredictor):
    """``checked``: the vote's label against the student's fitted answers (module docstring)."""

    def answer(self, x):
        kept = self.state.kept
        a = super().answer(x)
        s = self.state
        if a.status != ANSWERED or s.student is None or s.student["n"] < NEIGHBOURS:
            return a
        n = s.student["n"]
        rows, ys = np.asarray(self.kept_x[:n]), np.asarray(self.kept_y[:n])
        near = ys[np.argsort(np.sum((rows - x) ** 2, axis=1), kind="stable")[:NEIGHBOURS]]
        if not np.all(near == -a.label):
            return a
        if s.kept > kept:                     # the published (replaced) label is the transcript's
            self.kept_y[-1] = -a.label
        return Answer(-a.label, a.status, a.version, a.outcome)


def run(X, y, Q, seed: int, variant: str) -> np.ndarray:
    k, _, v = sizing(len(y), variant)
    cls = Checked if variant == "checked" else PrivatePredictor
    model = cls(config=PredictorConfig(k=k, epsilon=4.0, delta=1e-6, v_max=v),
                generator=NearestNeighbours(X.shape[1]), rng=KeyedRandomness(bytes([seed + 1]) * 32),
                model_id="bench-nearest", student=True)
    model.start_epoch(X, y)
    labels, status = np.zeros(len(Q), dtype=int), [None] * len(Q)
    for i, x in enumerate(Q):
        s = model.state
        if variant == "screened" and not s.exhausted and s.kept >= 32:
            rows = np.asarray(model.kept_x)
            near = np.asarray(model.kept_y)[np.argsort(np.sum((rows - x) ** 2, axis=1), kind="stable")[:NEIGHBOURS]]
            if abs(int(near.sum())) == NEIGHBOURS:
                labels[i] = near[0]
                continue
        a = model.answer(x)
        labels[i], status[i] = a.label or 0, a.status
    if variant == "spread":
        labels = spread(model, Q, labels, status)
    return labels


def spread(model, Q, labels, status) -> np.ndarray:
    from sklearn.semi_supervised import LabelSpreading
    after = [i for i, s in enumerate(status) if s == STUDENT]
    if not after:
        return labels
    KX, Ky = np.asarray(model.kept_x), np.asarray(model.kept_y)
    t, end = after[0], len(Q)
    while t < end:
        seen = Q[max(0, t - SPREAD_CAP):t]
        rows = np.vstack([KX, seen])
        target = np.full(len(rows), -1)
        target[:len(Ky)] = (Ky == 1).astype(int)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = LabelSpreading(kernel="knn", n_neighbors=min(7, len(rows) - 1), alpha=0.5,
                                 max_iter=100).fit(rows, target)
        upto = min(end, max(2 * t, t + 1))
        labels[t:upto] = np.where(fit.predict(Q[t:upto]) == 1, 1, -1)
        t = upto
    return labels


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--sets", nargs="*", default=list(SETS))
    ap.add_argument("--variants", nargs="*",
                    default=["as is", "cap 16", "blocks at gap 2", "checked", "screened", "spread"])
    args = ap.parse_args()
    print(f"accuracy on all queries, epsilon 4, delta 1e-6, mean of {args.keys} keys (keys 0-2 in brackets); "
          "* held out")
    print("| set | majority | " + " | ".join(args.variants) + " |")
    print("|---|---|" + "---|" * len(args.variants))
    for name in args.sets:
        X, y, Q, qy = split(D.load(name))
        majority = float(np.mean(qy == (1 if (y == 1).mean() > 0.5 else -1)))
        cells = []
        for variant in args.variants:
            acc = [float(np.mean(run(X, y, Q, s, variant) == qy)) for s in range(args.keys)]
            cells.append(f"{np.mean(acc):.1%} ({np.mean(acc[:3]):.1%})")
        star = "*" if name in D.HELD_OUT else ""
        print(f"| {name}{star} | {majority:.1%} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
