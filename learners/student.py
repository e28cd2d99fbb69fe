"""The private predictor's student: a model trained on the labels the predictor released,
which answers once the epoch's hard queries are spent (issue 45).

Construction (PATE's student, Papernot et al. 2017, 2018: a public model trained on the
teachers' privately aggregated labels of public queries): the training set is the
transcript of released answers, (x_j, Label_j) for the queries the BetweenThresholds
vote answered (L or R; the coin-flipped labels of hard queries are left out: they carry
no information about the data), at most STUDENT_MAX of them per epoch, in arrival
order. The student is L2-regularised logistic regression on it
(``generators.fit_logistic``), fitted once, when the epoch's budget runs out, its
regularisation chosen by 5-fold cross-validation on the same transcript (the folds are
the arrival order's residues mod 5: deterministic, and a function of the transcript
only). Why chosen: the transcript may be 50 answers or 5,000, in 3 dimensions or 100,
and mostly of one class; one fixed prior over- or under-fits most of those.

Privacy: the transcript is exactly what the predictor published, and the seed's
guarantee (seed 001, Sec. 2: "the transcript of outputs ((x_1, Label_1), ..., (x_T,
Label_T)) is (eps, delta)-DP with respect to the sample S") covers it. The student and
every answer it gives are functions of that transcript alone, so post-processing: no
charge. What it does not protect: the queries. The seed's model lets an adversary choose
them, and the guarantee is about the labelled examples, not the queries; a student
learns from the queries' features, so one querier's queries shape the answers every
other querier then gets (a querier who floods one region of the space decides what the
student learns there). That is why it is a registration option (``student``), off by
default.

>>> import numpy as np
>>> X = np.array([[-1.0], [-0.5], [0.5], [1.0]])
>>> theta = fit_student(X, [-1, -1, 1, 1])
>>> [student_label(theta, x) for x in ([-0.8], [0.9])]
[-1, 1]
"""
from __future__ import annotations

import numpy as np

from .generators import L2, fit_logistic

STUDENT_MAX = 5_000        # released answers kept per epoch to train the student on
L2_GRID = (0.01, 0.1, L2, 1.0, 10.0, 100.0, 1e6)   # the student's priors; 1e6: its labels' majority
FOLDS = 5


def fit_student(X, y) -> np.ndarray:
    """(a, w) from released answers only: query features X and released labels y, at the
    prior of L2_GRID with the best cross-validated accuracy (ties: the stronger prior);
    with fewer than 2 FOLDS answers or one class, at L2."""
    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float).reshape(len(y), -1)
    return fit_logistic(X, y, l2=choose_l2(X, y))


def choose_l2(X: np.ndarray, y: np.ndarray) -> float:
    if len(y) < 2 * FOLDS or np.all(y == y[0]):
        return L2
    fold = np.arange(len(y)) % FOLDS
    best = (-1.0, 0.0)
    for l2 in L2_GRID:
        right = 0
        for f in range(FOLDS):
            theta = fit_logistic(X[fold != f], y[fold != f], l2=l2)
            right += int(np.sum(np.where(X[fold == f] @ theta[:-1] >= theta[-1], 1, -1) == y[fold == f]))
        best = max(best, (right / len(y), l2))
    return best[1]


def student_label(theta, x) -> int:
    """+1 iff <a, x> >= w."""
    theta = np.asarray(theta, dtype=float)
    return 1 if float(np.asarray(x, dtype=float) @ theta[:-1]) >= theta[-1] else -1
