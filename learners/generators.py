"""Hypothesis generators for the private predictor (seed 001 Sec. 4 and 5).

A generator G(block, HardQuery) returns a hypothesis consistent with every hard query
that has the least error on the block (the seed's G_oblivious), or, for the adaptive
halfspace generator, a deep point on the intersection of the hard queries'
hyperplanes (G_halfspace). Hypotheses of all k blocks are stacked so that voting is
one vectorised call: ``votes(H, x)`` returns each block's label in {-1, +1}.

Exactness: the finite-class, threshold and interval generators are exact ERM under
the hard constraints. Conjunctions, disjunctions and decision lists use greedy ERM
(hard queries as must-satisfy examples); halfspaces solve an LP with HiGHS
(scipy.optimize.linprog). The adaptive halfspace generator departs from the seed's
cdepth maximiser, which is not efficiently computable: it minimises the block's total
hinge slack on the affine subspace {<a, x_h> = w for every hard query x_h}, which
keeps the seed's structure (each non-redundant hard query cuts the affine dimension
of the feasible set by one, so at most d + 1 hard queries) but not its depth
guarantee.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from mechanisms.errors import ParameterError

from .decision_list import TRUE, DecisionList, FeatureFamily


class FiniteClass:
    """Explicit class: ``matrix[h, x]`` in {-1, +1} over a finite domain x = 0..N-1."""
    oblivious = True

    def __init__(self, matrix):
        self.matrix = np.asarray(matrix, dtype=np.int8)
        if self.matrix.ndim != 2 or not np.isin(self.matrix, (-1, 1)).all():
            raise ParameterError("matrix", self.matrix.shape, "a 2-d array of +-1")

    def fit(self, X, y, hard_X, hard_y):
        P = self.matrix
        ok = np.all(P[:, np.asarray(hard_X, dtype=int)] == np.asarray(hard_y), axis=1) \
            if len(hard_X) else np.ones(P.shape[0], dtype=bool)
        if not ok.any():
            ok[:] = True        # unrealizable hard set (BetweenThresholds erred): plain ERM
        err = (P[:, np.asarray(X, dtype=int)] != np.asarray(y)).sum(axis=1)
        return int(np.argmin(np.where(ok, err, np.iinfo(np.int64).max)))

    def stack(self, hyps):
        return np.asarray(hyps, dtype=np.int64)

    def votes(self, H, x) -> np.ndarray:
        return self.matrix[H, int(x)]

    def distinct_labelings(self, points) -> int:
        return len({row.tobytes() for row in self.matrix[:, np.asarray(points, dtype=int)]})


class Thresholds:
    """h_t(x) = +1 iff x >= t on the real line; exact constrained ERM."""
    oblivious = True

    def fit(self, X, y, hard_X, hard_y):
        X, y = np.asarray(X, float).ravel(), np.asarray(y)       # a point may come as [x]
        hx, hy = np.asarray(hard_X, float).ravel(), np.asarray(hard_y)
        lo = hx[hy == -1].max() if (hy == -1).any() else -np.inf    # t > lo
        hi = hx[hy == 1].min() if (hy == 1).any() else np.inf       # t <= hi
        cands = np.unique(np.concatenate([X, hx, [hi]]))
        cands = cands[(cands > lo) & (cands <= hi)]
        if cands.size == 0:
            cands = np.array([np.nextafter(lo, np.inf)])
        pred = np.where(X[None, :] >= cands[:, None], 1, -1)
        err = (pred != y[None, :]).sum(axis=1)
        return float(cands[np.argmin(err)])

    def stack(self, hyps):
        return np.asarray(hyps, dtype=float)

    def votes(self, H, x) -> np.ndarray:
        return np.where(float(np.ravel(x)[0]) >= H, 1, -1)


class Intervals:
    """h_{a,b}(x) = +1 iff a <= x <= b (a > b: the empty interval); exact constrained ERM."""
    oblivious = True

    def fit(self, X, y, hard_X, hard_y):
        X, y = np.asarray(X, float).ravel(), np.asarray(y)
        hx, hy = np.asarray(hard_X, float).ravel(), np.asarray(hard_y)
        pts = np.unique(np.concatenate([X, hx]))
        a, b = np.meshgrid(pts, pts, indexing="ij")
        a, b = a.ravel(), b.ravel()
        keep = a <= b
        a, b = np.append(a[keep], 1.0), np.append(b[keep], 0.0)          # plus the empty interval
        inside = lambda v: (v[None, :] >= a[:, None]) & (v[None, :] <= b[:, None])  # noqa: E731
        ok = np.all(np.where(inside(hx), 1, -1) == hy[None, :], axis=1) if hx.size else np.ones(a.size, bool)
        if not ok.any():
            ok[:] = True
        err = (np.where(inside(X), 1, -1) != y[None, :]).sum(axis=1)
        best = np.argmin(np.where(ok, err, np.iinfo(np.int64).max))
        return (float(a[best]), float(b[best]))

    def stack(self, hyps):
        return np.asarray(hyps, dtype=float).reshape(-1, 2)

    def votes(self, H, x) -> np.ndarray:
        x = float(np.ravel(x)[0])
        return np.where((H[:, 0] <= x) & (x <= H[:, 1]), 1, -1)


class MonotoneConjunctions:
    """x in {0,1}^d; h_S(x) = +1 iff x_j = 1 for all j in S. ``disjunction=True`` learns
    monotone disjunctions through De Morgan (complement inputs and labels).

    Greedy ERM with hard queries as must-satisfy examples: S starts as the variables
    that are 1 on every positive (block and hard) example; while a hard negative is
    still satisfied, add the variable that is 0 on it and 1 on the most block
    positives among those allowed by the hard positives.
    """
    oblivious = True

    def __init__(self, d: int, disjunction: bool = False):
        self.d, self.disjunction = d, disjunction

    def _prep(self, X, y):
        X = np.asarray(X, dtype=bool).reshape(-1, self.d)
        y = np.asarray(y)
        return (~X, -y) if self.disjunction else (X, y)

    def fit(self, X, y, hard_X, hard_y):
        X, y = self._prep(X, y)
        hX, hy = self._prep(hard_X, hard_y)
        allowed = hX[hy == 1].all(axis=0) if (hy == 1).any() else np.ones(self.d, bool)
        S = allowed & (X[y == 1].all(axis=0) if (y == 1).any() else np.ones(self.d, bool))
        for neg in hX[hy == -1]:
            if np.all(neg[S]):                       # still true on a hard negative
                choices = allowed & ~neg
                if not choices.any():
                    continue
                support = X[y == 1][:, choices].sum(axis=0) if (y == 1).any() else np.zeros(choices.sum())
                S[np.flatnonzero(choices)[int(np.argmax(support))]] = True
        return S

    def stack(self, hyps):
        return np.asarray(hyps, dtype=bool).reshape(-1, self.d)

    def votes(self, H, x) -> np.ndarray:
        x = np.asarray(x, dtype=bool)
        if self.disjunction:
            x = ~x
        sat = np.all(~H | x[None, :], axis=1)
        out = np.where(sat, 1, -1)
        return -out if self.disjunction else out


class DecisionLists:
    """Greedy decision-list ERM (Rivest-style) with hard queries as must-satisfy rows:
    each step takes the rule with no error on the remaining hard rows that covers the
    most block rows correctly minus wrongly; labels in {-1, +1}."""
    oblivious = True

    def __init__(self, family: FeatureFamily):
        self.family = family

    def fit(self, X, y, hard_X, hard_y):
        F = self.family.evaluate(np.asarray(X, dtype=bool).reshape(-1, self.family.d))
        yb = (np.asarray(y) == 1)
        HF = self.family.evaluate(np.asarray(hard_X, dtype=bool).reshape(-1, self.family.d))
        hb = (np.asarray(hard_y) == 1)
        F = np.concatenate([F, np.ones((F.shape[0], 1), bool)], axis=1)
        HF = np.concatenate([HF, np.ones((HF.shape[0], 1), bool)], axis=1)
        rem, hrem = np.ones(len(yb), bool), np.ones(len(hb), bool)
        avail = np.ones(F.shape[1], bool)
        rules = []
        while True:
            cov, hcov = F & rem[:, None], HF & hrem[:, None]
            best, pick = -np.inf, None
            for b in (0, 1):
                right = (cov & (yb == b)[:, None]).sum(0) - (cov & (yb != b)[:, None]).sum(0)
                hard_ok = ~(hcov & (hb != b)[:, None]).any(0)
                score = np.where(avail & hard_ok, right, -np.inf)
                score[-1] = np.where(avail[-1] & hard_ok[-1], right[-1] - 0.5, -np.inf)  # T last
                j = int(np.argmax(score))
                if score[j] > best:
                    best, pick = score[j], (j, b)
            if pick is None or best == -np.inf:
                pick = (F.shape[1] - 1, 1)
            f, b = pick
            is_true = f == F.shape[1] - 1
            rules.append((TRUE if is_true else f, b))
            if is_true:
                break
            avail[f] = False
            rem &= ~F[:, f]
            hrem &= ~HF[:, f]
        return DecisionList(self.family, tuple(rules), rules[-1][1])

    def stack(self, hyps):
        return list(hyps)

    def votes(self, H, x) -> np.ndarray:
        F = self.family.evaluate(np.asarray(x, dtype=bool).reshape(1, -1))
        return np.array([1 if dl.predict_features(F)[0] == 1 else -1 for dl in H])


class Halfspaces:
    """h_{a,w}(x) = +1 iff <a, x> >= w in R^d (seed 001 Sec. 5.1), by LP (HiGHS).

    Oblivious: min sum of block slacks s.t. y_i(<a,x_i> - w) >= 1 - xi_i, with each
    hard query a labelled constraint y_h(<a,x_h> - w) >= 1 (kept soft with a 10^4
    penalty so an unrealizable hard set cannot make the LP infeasible).
    Adaptive (``adaptive=True``): the hard queries become equalities <a,x_h> = w.
    Box |a_j|, |w| <= 10^3 keeps the LP bounded.
    """

    BOX = 1e3

    def __init__(self, d: int, adaptive: bool = False, hard_weight: float = 1e4):
        """``hard_weight``: a hard query's slack weight against one example's. The seed
        enforces hard queries (1e4, practically hard); on noisy data a coin-flip label then
        overrides the block's data, so weight 1 counts a hard query as one example (our
        departure, measured in bench/predictor_real.py)."""
        self.d, self.adaptive = d, adaptive
        self.oblivious = not adaptive
        self.HARD_PENALTY = hard_weight

    def fit(self, X, y, hard_X, hard_y):
        X = np.asarray(X, float).reshape(-1, self.d)
        y = np.asarray(y, float)
        hX = np.asarray(hard_X, float).reshape(-1, self.d)
        hy = np.asarray(hard_y, float)
        d = self.d
        soft_rows = [(X, y, 1.0)] if self.adaptive else [(X, y, 1.0), (hX, hy, self.HARD_PENALTY)]
        n_slack = sum(r[0].shape[0] for r in soft_rows)
        c = np.concatenate([np.zeros(d + 1), np.concatenate([np.full(r[0].shape[0], r[2])
                                                              for r in soft_rows])])
        # y (<a,x> - w) + xi >= 1   <=>   -y x.a + y w - xi <= -1
        A_ub = np.zeros((n_slack, d + 1 + n_slack))
        row = 0
        for Xr, yr, _ in soft_rows:
            k = Xr.shape[0]
            A_ub[row:row + k, :d] = -yr[:, None] * Xr
            A_ub[row:row + k, d] = yr
            A_ub[row:row + k, d + 1 + row + np.arange(k)] = -np.eye(k)
            row += k
        b_ub = -np.ones(n_slack)
        A_eq = b_eq = None
        if self.adaptive and hX.shape[0]:
            A_eq = np.zeros((hX.shape[0], d + 1 + n_slack))
            A_eq[:, :d], A_eq[:, d] = hX, -1.0
            b_eq = np.zeros(hX.shape[0])
        bounds = [(-self.BOX, self.BOX)] * (d + 1) + [(0, None)] * n_slack
        res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
        if res.status != 0:
            raise RuntimeError(f"halfspace LP failed: {res.message}")
        return res.x[: d + 1]

    def stack(self, hyps):
        return np.asarray(hyps, dtype=float).reshape(-1, self.d + 1)

    def votes(self, H, x) -> np.ndarray:
        x = np.asarray(x, float)
        val = H[:, :-1] @ x - H[:, -1]
        tol = 1e-7 * (np.abs(H[:, :-1]) @ np.abs(x) + np.abs(H[:, -1]) + 1e-12)
        return np.where(val >= -tol, 1, -1)       # on the hyperplane counts as +1
