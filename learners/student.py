"""The private predictor's student: a model trained on the labels the predictor released,
which answers once the epoch's hard queries are spent and, before that, labels the hard
queries themselves (issue 45).

Construction (PATE's student, Papernot et al. 2017, 2018: a public model trained on the
teachers' privately aggregated labels of public queries): the training set is the
transcript of released answers, (x_j, Label_j) for the queries the BetweenThresholds
vote answered (L or R; the labels of hard queries are left out: a coin flip, or this
student's own guess, carries no information about the data), at most STUDENT_MAX of
them per epoch, in arrival order. The student is fitted on the first n answers, at the
public times n = 8, 16, 32, ... (``REFIT_FROM``, doubling) and once more when the budget
runs out, and is one of
* L2-regularised logistic regression (``generators.fit_logistic``) at a prior of L2_GRID,
* the majority label of the k nearest released answers (Euclidean, k in K_GRID),
* label spreading (Zhou, Bousquet, Lal, Weston, Schoelkopf 2004, "Learning with local and
  global consistency", Algorithm 1 with the iteration of their eq. 1, alpha SPREAD_ALPHA)
  over a graph of the SPREAD_K nearest neighbours joining the n answers and the queries
  this epoch has seen (at most SEEN_MAX, the first ones), offered once the budget is
  spent (the fits that then answer) and while n <= SEEN_MAX (a graph of at most 4,096
  points: about 4 s to build in 256 dimensions on this machine, under load); a new
  query gets the sign of the summed scores of its SPREAD_K nearest graph points (the
  inductive extension of Delalleau, Bengio, Le Roux 2005), and where that sum is
  exactly 0 (no released answer reaches that part of the graph: an attacker's pass
  made 8 identical queries in an empty corner answer +1 by the sign rule) the nearest
  released answer's label,
whichever has the best 5-fold cross-validated accuracy on the same n answers (the
folds are the arrival order's residues mod 5: deterministic, a function of the
transcript only; label spreading is scored on a held-out answer's own graph point
with that fold's labels removed). Ties go to the earlier candidate of ``candidates``:
label spreading first where offered, then the nearest answer, then more neighbours,
then logistic regression from the weakest prior to the
strongest, whose limit, the majority label, comes last, so that a constant answer wins
only where nothing beats it. With a few dozen answers every candidate often ties; the
first round's order (strongest prior first) then answered a constant: on digits one key
in ten fell to 49% (the majority's 52%), and over ten keys this order gave 78.5% (sd
6.8) against 75.7% (sd 11.2), the other sets within 0.1 point (bench/predictor_real.py
streams). Why chosen, and why both: the transcript may be 8 answers or 5,000,
in 3 dimensions or 100, mostly of one class, from a boundary that is a halfspace or
not. On the query streams of bench/predictor_real.py, with their true labels, the
nearest answers reach 91% on digits from 50 labels where logistic regression reaches
76%, and 76% against 56% on bananas (not linearly separable), while logistic
regression is ahead on segment from 25 labels (92% against 89%): one fixed model class
loses on some stream. Label spreading (issue 45, sixth round) uses the queries' features
beyond the answered ones: where the data lie on a low-dimensional manifold the
unanswered queries carry its shape (digits: 78.5% -> 83.3% over 10 keys, the other
sets within 0.5 points, docs/models.md). Offered before the budget is spent too, where
the student labels only hard queries, it cost digits_zero 0.5 points (its rare class
smeared over the seen queries before the vote's answers covered it), so it is not.
Once the budget is spent the student is refitted as the queries seen reach 8, 16, 32,
... up to SEEN_MAX (public times: the query count); the answers no longer change then,
so the other candidates' cross-validated counts are kept (``fit_student``'s ``scores``)
and only spreading is scored again. Distances are elementwise (``squared_distances``):
the same bits on every CPU, so a replay elsewhere finds the same neighbours.

Privacy: the transcript is exactly what the predictor published, and the seed's
guarantee (seed 001, Sec. 2: "the transcript of outputs ((x_1, Label_1), ..., (x_T,
Label_T)) is (eps, delta)-DP with respect to the sample S") covers it. The student, its
refit times and every answer it gives are functions of that transcript and of the
queries alone, so post-processing: no charge. What it does not protect: the queries. The seed's model
lets an adversary choose them, and the guarantee is about the labelled examples, not
the queries; a student learns from the queries' features, so one querier's queries
shape the answers every other querier then gets (a querier who floods one region of
the space decides what the student learns there). That is why it is a registration
option (``student``), off by default.

A fitted student is a plain record: ``{"model": "logistic", "theta": [a..., w], "n": n,
"seen": u}``, ``{"model": "nearest", "k": k, "n": n, "seen": u}`` or the same with
``"spread"``, fitted on the first n kept answers and the first u seen queries (the last
two read them again to answer: the predictor stores both in its state, and
``StudentModel`` rebuilds the answering model from them).

>>> import numpy as np
>>> X = np.array([[-1.0], [-0.8], [-0.5], [-0.3], [0.3], [0.5], [0.8], [1.0]] * 2)
>>> y = [-1, -1, -1, -1, 1, 1, 1, 1] * 2
>>> student = fit_student(X, y)
>>> [student_label(student, x, X, y) for x in ([-0.9], [0.7])]
[-1, 1]
"""
from __future__ import annotations

import numpy as np

from .generators import L2, fit_logistic
from .linalg import dot

STUDENT_MAX = 5_000        # released answers kept per epoch to train the student on
SEEN_MAX = 2_048           # queries kept per epoch as the unlabelled points of label spreading
K_GRID = (1, 3, 5, 9, 15)  # nearest answers (odd: no tied vote)
SPREAD_K, SPREAD_ALPHA, SPREAD_ITERS = 7, 0.5, 60   # label spreading's graph, weight, iterations
L2_GRID = (0.01, 0.1, L2, 1.0, 10.0, 100.0, 1e6)   # logistic priors, weakest first; 1e6: the majority
FOLDS = 5
REFIT_FROM = 8             # the first fit, at 8 answers; then at 16, 32, ...


def candidates(spread: bool = False) -> list[tuple[str, float]]:
    """The student's model classes in tie-break order (module docstring)."""
    return ([("spread", SPREAD_K)] if spread else []) + [("nearest", k) for k in K_GRID] \
        + [("logistic", l2) for l2 in L2_GRID]


def refit_due(kept: int) -> bool:
    """Whether the student is refitted when the kept answers reach ``kept``: REFIT_FROM and
    every doubling after it (public: a function of the transcript's length)."""
    return kept >= REFIT_FROM and kept & (kept - 1) == 0


def fit_student(X, y, seen=(), scores: dict | None = None) -> dict:
    """The student of released answers (query features X, released labels y) and the
    queries seen (``seen``, unlabelled): the candidate with the best cross-validated
    accuracy (module docstring); with fewer than 2 FOLDS answers or one class, logistic
    regression at L2 (its intercept then says the one class). ``scores``: a dict the
    cross-validated counts of the candidates other than spreading are kept in, keyed by
    the number of answers, and read from when the same answers are refitted with more
    queries seen (after exhaustion the answers no longer change: 35 logistic fits saved
    per refit)."""
    y = np.asarray(y, dtype=float)
    X = np.asarray(X, dtype=float).reshape(len(y), -1)
    U = np.asarray(seen, dtype=float).reshape(-1, X.shape[1])
    model, param = choose(X, y, U, scores)
    if model == "logistic":
        return {"model": model, "theta": fit_logistic(X, y, l2=param).tolist(), "n": len(y),
                "seen": len(U)}
    return {"model": model, "k": int(param), "n": len(y), "seen": len(U)}


def choose(X: np.ndarray, y: np.ndarray, U: np.ndarray | None = None,
           scores: dict | None = None) -> tuple[str, float]:
    if len(y) < 2 * FOLDS or np.all(y == y[0]):
        return "logistic", L2
    fold = np.arange(len(y)) % FOLDS
    right = None if scores is None else scores.get(len(y))
    if right is None:
        right = {c: 0 for c in candidates()}
        for f in range(FOLDS):
            train, test = fold != f, fold == f
            # one neighbour order per fold for every k (before: one distance matrix per
            # candidate, 25 a fit: ~50 s at 4,096 answers in 256 dimensions, an attacker's pass)
            order = np.argsort(squared_distances(X[test], X[train]), axis=1, kind="stable")
            for c in right:
                pred = _vote(order, y[train], int(c[1])) if c[0] == "nearest" else \
                    _predict(c, X[train], y[train], X[test])
                right[c] += int(np.sum(pred == y[test]))
        if scores is not None:
            scores.clear()
            scores[len(y)] = right
    right = dict(right)
    spread = U is not None and len(U) > 0 and len(y) <= SEEN_MAX
    if spread:
        graph = Graph(np.vstack([X, U]), SPREAD_K)
        right[("spread", SPREAD_K)] = 0
        for f in range(FOLDS):
            train, test = fold != f, fold == f
            sums = graph.spread(np.where(train, y, 0.0))[:len(y)][test]
            nearest = nearest_labels(X[train], y[train], X[test], 1)
            right[("spread", SPREAD_K)] += int(np.sum(_signs(sums, nearest) == y[test]))
    best = max(right.values())
    return next(c for c in candidates(spread) if right[c] == best)


def _signs(sums: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """The sign of label spreading's scores; where no label reached (a score of exactly 0:
    a part of the graph no released answer joins, such as a few identical queries), the
    nearest released answer's label (``fallback``), not a tie-break towards one class."""
    return np.where(sums > 0, 1, np.where(sums < 0, -1, fallback))


class Graph:
    """The symmetrised k-nearest-neighbour graph of points P (Zhou et al. 2004, Sec. 2, with
    kNN affinities: W = A + A^T for A the 0/1 k-nearest relation, S = D^-1/2 W D^-1/2),
    built in blocks of rows (memory O(512 n)); ties of distance go to the earlier point,
    and a point at an infinite distance (``squared_distances``) is joined to nothing."""

    def __init__(self, P: np.ndarray, k: int):
        self.P = np.asarray(P, dtype=float)
        n = len(self.P)
        self.k = k = max(1, min(k, n - 1))
        near = np.empty((n, k), dtype=np.int64)
        finite = np.empty((n, k), dtype=bool)        # an infinitely far "neighbour" is no edge
        for a in range(0, n, 512):
            d2 = squared_distances(self.P[a:a + 512], self.P)
            d2[np.arange(len(d2)), np.arange(a, a + len(d2))] = np.inf     # not its own neighbour
            near[a:a + 512] = np.argsort(d2, axis=1, kind="stable")[:, :k]
            finite[a:a + 512] = np.isfinite(np.take_along_axis(d2, near[a:a + 512], axis=1))
        rows = np.repeat(np.arange(n), k)[finite.ravel()]
        cols = near.ravel()[finite.ravel()]
        self.i = np.concatenate([rows, cols])
        self.j = np.concatenate([cols, rows])
        degree = np.bincount(self.i, minlength=n).astype(float)
        self.w = 1.0 / np.sqrt(degree[self.i] * degree[self.j])   # an edge's ends have degree >= 1

    def spread(self, Y: np.ndarray) -> np.ndarray:
        """F after SPREAD_ITERS steps of F <- alpha S F + (1 - alpha) Y from F = Y (Y: +-1 on
        the labelled points, 0 elsewhere, padded with 0 to every point)."""
        Y = np.concatenate([np.asarray(Y, dtype=float), np.zeros(len(self.P) - len(Y))])
        F = Y.copy()
        for _ in range(SPREAD_ITERS):
            F = SPREAD_ALPHA * np.bincount(self.i, weights=self.w * F[self.j], minlength=len(F)) \
                + (1.0 - SPREAD_ALPHA) * Y
        return F

    def extend(self, F: np.ndarray, Q) -> np.ndarray:
        """Scores of new points Q: the summed F of their k nearest points (their sign is
        the label, ``_signs``)."""
        Q = np.asarray(Q, dtype=float).reshape(-1, self.P.shape[1])
        near = np.argsort(squared_distances(Q, self.P), axis=1, kind="stable")[:, :self.k]
        return F[near].sum(axis=1)


def _predict(candidate, X, y, Q) -> np.ndarray:
    model, param = candidate
    if model == "logistic":
        theta = fit_logistic(X, y, l2=param)
        return np.where(dot(Q, theta[:-1]) >= theta[-1], 1, -1)
    return nearest_labels(X, y, Q, int(param))


DISTANCE_BLOCK = 1 << 17   # distance entries computed at once (1 MiB of float64)


def squared_distances(Q: np.ndarray, X: np.ndarray) -> np.ndarray:
    """|q - x|^2 for every row pair, summed over the columns in order with elementwise
    operations only. Not the expansion |q|^2 - 2 q.x + |x|^2: its matrix product runs in
    whichever BLAS kernel the CPU selects, whose rounding differs, so a replay on another
    machine (or under OPENBLAS_CORETYPE) found other nearest neighbours among equidistant
    points and 4 of 3,000 answers changed (an attacker's pass); elementwise IEEE
    operations in a fixed order give the same bits everywhere, and an exact duplicate
    is at exactly 0. A pair whose distance overflows (rows of 1e300 outside the clamped
    predictor) counts as infinitely far (the graph joins no such pair), without a warning."""
    Q = np.asarray(Q, dtype=float).reshape(len(Q), -1)
    XT = np.ascontiguousarray(np.asarray(X, dtype=float).reshape(len(X), -1).T)
    out = np.empty((len(Q), XT.shape[1]))
    rows = max(1, DISTANCE_BLOCK // max(1, XT.shape[1]))
    with np.errstate(over="ignore", invalid="ignore"):
        for a in range(0, len(Q), rows):
            block = Q[a:a + rows]
            acc = np.zeros((len(block), XT.shape[1]))
            diff = np.empty_like(acc)
            for j in range(XT.shape[0]):
                np.subtract(block[:, j:j + 1], XT[j], out=diff)
                np.multiply(diff, diff, out=diff)
                acc += diff
            out[a:a + rows] = acc
    return np.where(np.isnan(out), np.inf, out)


def nearest_labels(X, y, Q, k: int) -> np.ndarray:
    """The majority label of the k nearest rows of X (ties of distance: the earlier row),
    for every row of Q; k is cut to the rows there are (and kept odd)."""
    X, Q = np.asarray(X, float), np.asarray(Q, float).reshape(-1, X.shape[1])
    return _vote(np.argsort(squared_distances(Q, X), axis=1, kind="stable"), y, k)


def _vote(order: np.ndarray, y, k: int) -> np.ndarray:
    """The majority label of the first k rows of each row of ``order`` (the rows of X by
    distance), k cut to the rows there are and kept odd (``nearest_labels``)."""
    k = min(k, len(y))
    k -= 1 - k % 2
    return np.where(np.asarray(y)[order[:, :k]].sum(axis=1) >= 0, 1, -1)


class StudentModel:
    """A fitted student ready to answer: its record and the rows it reads (the first n kept
    answers; for label spreading also the first u seen queries, its graph and scores,
    built once here)."""

    def __init__(self, student: dict, kept_x, kept_y, seen_x=()):
        self.student = student
        n = student["n"]
        self.X = np.asarray(kept_x[:n], dtype=float).reshape(n, -1)
        self.y = np.asarray(kept_y[:n])
        if student["model"] == "spread":
            U = np.asarray(seen_x[:student["seen"]], dtype=float).reshape(-1, self.X.shape[1])
            self.graph = Graph(np.vstack([self.X, U]), student["k"])
            self.scores = self.graph.spread(self.y)

    def label(self, x) -> int:
        x = np.asarray(x, dtype=float).ravel()
        model = self.student["model"]
        if model == "logistic":
            theta = np.asarray(self.student["theta"], dtype=float)
            return 1 if float(dot(x, theta[:-1])) >= theta[-1] else -1
        if model == "spread":
            total = float(self.graph.extend(self.scores, x)[0])
            if total != 0.0:
                return 1 if total > 0 else -1
            return int(nearest_labels(self.X, self.y, x[None, :], 1)[0])    # ``_signs``' fallback
        return int(nearest_labels(self.X, self.y, x[None, :], self.student["k"])[0])


def student_label(student: dict, x, kept_x, kept_y, seen_x=()) -> int:
    """The student's label for x; ``kept_x``/``kept_y``: the released answers kept this epoch,
    ``seen_x``: the queries seen (``StudentModel`` answers many without rebuilding)."""
    return StudentModel(student, kept_x, kept_y, seen_x).label(x)
