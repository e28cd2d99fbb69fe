"""BetweenThresholds (Bun, Steinke, Ullman 2016, "Make up your mind"), the gate of
seed 001's Algorithm 2 (its Lemmas 1 and 2), on integer vote counts.

Mechanism, with thresholds A < B in counts and noise scale b:
per query, v = count + DLap(b) with fresh noise; output L if v < A, R if v > B,
otherwise TOP, and halt. Only L / R / TOP leave the mechanism.

Calibration (docs/privacy.md, "BetweenThresholds"; the commonly quoted 6/(eps n) scale is NOT used:
an exact computation shows it gives eps ~ 2.8 at claimed (1, 1e-6)). For a count c
and a neighbour shift s in {-1, +1}, let l_o = ln(P_c(o) / P_{c+s}(o)). Let

* psi = the smallest number with P_c(L) e^{l_L/psi} + P_c(R) e^{l_R/psi} <= 1 for
  every c and s, and
* eps_top = max over c, s of l_TOP (at most 1/b).

Proof sketch (adaptive queries): the privacy loss over the L/R rounds, Lambda_t,
makes exp(Lambda_t / psi) a supermartingale (each round multiplies it by a factor
whose conditional mean is the left side above, restricted to not halting), so by
Ville's inequality P(sup_t Lambda_t >= x) <= e^{-x/psi}. The TOP round adds at most
eps_top and halts. So the total loss exceeds eps = x + eps_top with probability at
most delta = exp(-(eps - eps_top)/psi), which is (eps, delta)-DP.

psi is computed numerically on the integer grid of counts around the thresholds in
log space (log1p/expm1, no cancellation); the supremum sits next to the thresholds
and the code checks that it is not at the edge of the grid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .errors import MechanismHalted, ParameterError, ScaleAboveLimit, ThresholdsTooClose
from .noise_tape import NoiseTape
from .randomness import KeyedRandomness
from .samplers import fraction_at_least

L, R, TOP = "L", "R", "TOP"
MIN_GAP_IN_SCALES = 3.0  # beyond a gap of 3b the bound hardly improves (docs/privacy.md)


def log_dlap_cdf(n: np.ndarray, scale: float) -> np.ndarray:
    """ln P(Z <= n) for DLap(scale) and integer n (exact formula, stable)."""
    n = np.asarray(n, dtype=np.float64)
    lp, l1p = -1.0 / scale, math.log1p(math.exp(-1.0 / scale))
    neg = -n * lp - l1p                                        # n < 0: p^-n / (1+p)
    pos = np.log1p(-np.exp((np.maximum(n, 0.0) + 1) * lp - l1p))  # 1 - p^(n+1)/(1+p)
    return np.where(n < 0, neg, pos)


def log_dlap_sf(n: np.ndarray, scale: float) -> np.ndarray:
    """ln P(Z >= n) = ln P(Z <= -n) by symmetry."""
    return log_dlap_cdf(-np.asarray(n, dtype=np.float64), scale)


def outcome_log_probs(counts: np.ndarray, scale: float, lower: float, upper: float):
    """(ln P(L), ln P(R), ln P(TOP)) for each integer count."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _outcome_log_probs(np.asarray(counts, dtype=np.float64), scale, lower, upper)


def _outcome_log_probs(c, scale, lower, upper):
    """v = c + Z, Z ~ DLap(scale). With lo = ceil(A - c) and hi = floor(B - c):
    L iff Z <= lo - 1, R iff Z >= hi + 1, TOP iff lo <= Z <= hi. For n >= 1,
    P(Z >= n) = P(Z <= -n) = p^n / (1 + p) with p = e^(-1/scale) (``tail``). TOP's mass
    is a difference of two such tails when [lo, hi] lies on one side of 0 (above: lo >= 1;
    below, by symmetry: hi <= -1), and 1 - P(L) - P(R) only when it contains 0, where
    P(TOP) is large and the subtraction loses nothing."""
    lo = np.ceil(lower - c)
    hi = np.floor(upper - c)
    log_l = log_dlap_cdf(lo - 1, scale)
    log_r = log_dlap_sf(hi + 1, scale)
    l1p = math.log1p(math.exp(-1.0 / scale))

    def tail(n):                       # P(Z >= n) for n >= 1
        return np.exp(-n / scale - l1p)

    with np.errstate(divide="ignore"):
        above = np.log(np.maximum(tail(lo) - tail(hi + 1), 0.0))
        below = np.log(np.maximum(tail(-hi) - tail(1 - lo), 0.0))
        across = np.log(np.maximum(-np.expm1(np.logaddexp(log_l, log_r)), 0.0))
    log_t = np.where(lo >= 1, above, np.where(hi <= -1, below, across))
    return log_l, log_r, log_t


NEAR_IN_SCALES = 2.0     # lanes searched first: counts within 2b (+2) of a threshold


WINDOW_IN_SCALES = 40.0


def threshold_windows(scale: float, lower: float, upper: float,
                      span_in_scales: float = WINDOW_IN_SCALES) -> list[np.ndarray]:
    """Counts within 40b of a threshold: one window, or two for a wide gap. Deeper inside
    the gap both P(L) and P(R) are below e^-40 and the constraints are slack. (A narrower
    span only serves first guesses, never a certified value.)"""
    span = int(math.ceil(span_in_scales * scale)) + 2
    lo_win = np.arange(math.floor(lower) - span, math.ceil(lower) + span + 1)
    hi_win = np.arange(math.floor(upper) - span, math.ceil(upper) + span + 1)
    if hi_win[0] <= lo_win[-1] + 1:
        return [np.arange(lo_win[0], hi_win[-1] + 1)]
    return [lo_win, hi_win]


@lru_cache(maxsize=2)
def neighbour_lanes(scale: float, lower: float, upper: float, span_in_scales: float = WINDOW_IN_SCALES):
    """One lane per (count c, shift s in {+1, -1}) on the threshold windows, as arrays
    (log P_L, log P_R, log P_TOP, l_L, l_R, l_TOP, c) with l_o = ln(P_c(o) / P_{c+s}(o)).
    There are at most 2 (gap + 160 b + 10) of them (``threshold_windows``): the work and
    memory of a calibration grow with b. The last two grids are cached (read-only arrays):
    the single-instance profile and the epoch charge of one scale share them, and a cache
    of more would hold hundreds of MB at large scales."""
    parts = []
    for counts in threshold_windows(scale, lower, upper, span_in_scales):
        ll, lr, lt = outcome_log_probs(counts, scale, lower, upper)
        for shift in (+1, -1):
            a = slice(0, -1) if shift == +1 else slice(1, None)
            b = slice(1, None) if shift == +1 else slice(0, -1)
            parts.append((ll[a], lr[a], lt[a], _log_ratio(ll[a], ll[b]), _log_ratio(lr[a], lr[b]),
                          _log_ratio(lt[a], lt[b]), counts[a]))
    lanes = tuple(np.concatenate(column) for column in zip(*parts))
    for column in lanes:
        column.flags.writeable = False           # shared by the cache's callers
    return lanes


def _log_ratio(log_p: np.ndarray, log_q: np.ndarray) -> np.ndarray:
    """ln(p / q) per lane, and 0 where both probabilities are 0 (underflowed: at a noise
    scale far below one count, TOP or a side has mass below 1e-308 at some counts). The
    lane's term for that outcome, P e^{u l}, is then 0 whatever l is; -inf - -inf would
    make it NaN, which compares false everywhere (a NaN lane never looks violated, and
    np.argmax picks it as the "largest" charge). Issue 43: registrations at epsilon 1e6."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(log_p) & np.isneginf(log_q), 0.0, log_p - log_q)


def near_thresholds(counts: np.ndarray, scale: float, lower: float, upper: float) -> np.ndarray:
    """Mask of the counts within NEAR_IN_SCALES noise scales of a threshold, where the
    extremes of the calibration sit; searches run there first and are then verified
    (or redone) on every lane, so the mask only saves time."""
    reach = NEAR_IN_SCALES * scale + 2     # the binding lanes sit within a count of A or B
    return (np.abs(counts - lower) <= reach) | (np.abs(counts - upper) <= reach)


@lru_cache(maxsize=256)
def _privacy_profile(scale: float, lower: float, upper: float) -> tuple[float, float]:
    log_pl, log_pr, _, l_l, l_r, l_t, counts = neighbour_lanes(scale, lower, upper)
    finite_top = np.isfinite(l_t)
    eps_top = float(l_t[finite_top].max()) if finite_top.any() else 0.0
    lanes = (log_pl, log_pr, l_l, l_r)
    near = near_thresholds(counts, scale, lower, upper)
    u, worst = _common_u(*(x[near] for x in lanes))
    if math.isfinite(u) and _violation(u, *lanes).max() <= 0:
        if worst is not None:                        # feasible on every lane: exact answer
            worst = int(np.flatnonzero(near)[worst])
    else:
        u, worst = _common_u(*lanes)
    if worst is not None and counts[worst] in (counts.min(), counts.max()):
        raise ArithmeticError("BetweenThresholds psi supremum at the grid edge; widen the grid")
    return _psi(u), eps_top


def _psi(u: float) -> float:
    """psi = 1/u, inf for u = 0 (``_common_u``: no finite psi is certified)."""
    return 1.0 / u if u > 0 else math.inf


def _violation(u: float, log_pl, log_pr, l_l, l_r) -> np.ndarray:
    """Per lane, P_L e^{u l_L} + P_R e^{u l_R} - 1 (feasible where <= 0; a NaN, which the
    lanes no longer hold (``_log_ratio``), would count as violated: fail closed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        v = np.expm1(log_pl + u * l_l) + np.exp(log_pr + u * l_r)
    return np.where(np.isnan(v), np.inf, v)


U_FLOOR = 1e-12      # the smallest u (1/psi) _common_u brackets; below it psi is inf
MAX_PASSES = 64      # lanes whose roots _common_u refines before it settles for its bracket


def _common_u(log_pl, log_pr, l_l, l_r) -> tuple[float, int | None]:
    """The largest u with P_L e^{u l_L} + P_R e^{u l_R} <= 1 on every lane (rounded down,
    so it is feasible), and the lane that binds. Each lane's left side is convex in u
    and below 1 at u = 0, so its feasible u form an interval [0, u_i*] and the common
    ones [0, min_i u_i*]. A coarse bisection on the worst violation brackets min_i u_i*
    and names a violated lane; that lane's own root is found to full precision, and if
    another lane is violated there, its root (smaller) is found next, until every lane
    is feasible: a few passes over all lanes instead of fifty.

    u = 0 (psi = inf: no finite psi is certified) when no u above U_FLOOR is feasible: at
    a noise scale far below one count (a huge epsilon asks for one) a lane's slack
    1 - P_L - P_R is below 1e-15 and its root below any float step from 0. Such a psi
    would exceed 1e12, and its eps (psi ln(1/delta)) every budget the schema takes, so
    "does not fit" is the exact answer for the caller; before, the search looped forever
    (issue 43: a predictor registration at epsilon 1000 froze the worker). The passes are
    bounded too: if they do not settle, the bracket's lower end, feasible on every lane
    (``_bisect``'s invariant), is returned (a smaller u, a larger psi: never less private)."""
    lanes = (log_pl, log_pr, l_l, l_r)

    def worst(u: float) -> float:
        return float(_violation(u, *lanes).max())

    lo, hi = 0.0, 1.0
    if worst(hi) <= 0:
        while worst(hi) <= 0:                # grow the bracket
            lo, hi = hi, hi * 4
            if hi > 1e12:
                return math.inf, None
    else:
        while hi > U_FLOOR and worst(hi / 4) > 0:   # or shrink it (u ~ 1/(1.5 b))
            hi /= 4
        lo = hi / 4
        if not worst(lo) <= 0:               # nothing feasible above the floor: psi = inf
            return 0.0, None
    lo = _bisect(worst, lo, hi, 1e-2)        # lo feasible on every lane, hi not
    u, v = hi, _violation(hi, *lanes)
    for _ in range(MAX_PASSES):              # u infeasible on lane j: its root is below
        j = int(np.argmax(v))
        lane = tuple(x[j:j + 1] for x in lanes)
        u = _bisect(lambda t: float(_violation(t, *lane)[0]), lo, u, 1e-15)
        v = _violation(u, *lanes)
        if v.max() <= 0:
            return u, j
    return lo, None


def _bisect(violation, lo: float, hi: float, rel: float) -> float:
    """Largest u found feasible (violation <= 0) between a feasible lo and an infeasible
    hi, to a relative width ``rel``."""
    while hi - lo > rel * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if violation(mid) <= 0 else (lo, mid)
    return lo


def between_thresholds_privacy(scale: float, lower: float, upper: float) -> tuple[float, float]:
    """(psi, eps_top) of one instance with noise scale b and thresholds (A, B) in counts."""
    if not scale > 0:
        raise ParameterError("scale", scale, "> 0")
    if not upper > lower:
        raise ParameterError("upper", upper, f"> lower = {lower}")
    return _privacy_profile(float(scale), float(lower), float(upper))


def _guessed_profile(scale: float, lower: float, upper: float) -> tuple[float, float]:
    """(psi, eps_top) on the lanes near the thresholds only: where the exact values sit,
    at a fraction of the cost, but not certified (it may miss a binding lane). It only
    chooses where ``smallest_fitting_scale`` starts its exact walk."""
    log_pl, log_pr, _, l_l, l_r, l_t, _ = neighbour_lanes(scale, lower, upper, NEAR_IN_SCALES + 1)
    finite_top = np.isfinite(l_t)
    u, _ = _common_u(log_pl, log_pr, l_l, l_r)
    return _psi(u), float(l_t[finite_top].max()) if finite_top.any() else 0.0


@dataclass(frozen=True)
class BetweenThresholdsCalibration:
    """A noise scale with the psi and eps_top that certify it (module docstring: the
    supermartingale bound)."""
    scale: Fraction
    lower: float
    upper: float
    psi: float
    eps_top: float

    def delta(self, epsilon: float) -> float:
        """delta = exp(-(eps - eps_top)/psi) from the supermartingale bound."""
        if epsilon <= self.eps_top:
            return 1.0
        return math.exp(-(epsilon - self.eps_top) / self.psi)

    def epsilon(self, delta: float) -> float:
        return self.eps_top + self.psi * math.log(1.0 / delta)

    def accuracy(self, T: int, beta: float) -> float:
        """With probability 1 - beta, all of T noise values stay below b ln(T/beta) counts
        in absolute value (the discrete Laplace tail P(|Z| >= x) <= 2e^{-x/b}/(1+p))."""
        return float(self.scale) * math.log(T / beta)


def smallest_fitting_scale(eps_of, epsilon: float, *, start: float, b_max: float,
                           guess_of=None) -> Fraction | None:
    """The smallest noise scale b on the 1/64 grid with eps_of(b) <= epsilon (None when
    none up to the gap's limit b_max fits), for a certified epsilon eps_of(b) that falls
    as b grows and is close to proportional to 1/b once the gap is wide (b psi, b eps_top
    and b c_top settle). So a few secant steps b <- b eps(b) / epsilon from ``start``
    land within a fraction of a percent of the answer, and a search on the grid from its
    rounding ends it (``_first_fitting``: a few evaluations, at most 2 log2 of the
    distance in grid steps): about six evaluations instead of a 40-step bisection. Only
    the grid search, on the certified ``eps_of``, decides; the secant steps just choose where
    it starts, so they may use a cheaper estimate ``guess_of`` (default ``eps_of``).
    ``guess_of`` must never exceed ``eps_of`` (a lower bound): then a guess above
    epsilon shows a scale does not fit without the exact evaluation (rounding in the
    last bits can only make the answer one step larger, never unfitting). A scale is
    only returned after ``eps_of`` itself says it fits."""
    guess_of = guess_of or eps_of

    def fits(b: float) -> bool:
        return guess_of(b) <= epsilon and eps_of(b) <= epsilon

    b = min(b_max, start)
    for _ in range(4):
        b = min(b_max, b * guess_of(b) / epsilon)
    if b >= b_max and not fits(b_max):
        return None
    step = Fraction(1, 64)
    scale = fraction_at_least(b, 64)
    if fits(float(scale)):                   # the smallest fitting scale at or below it
        return _first_fitting(fits, step, good=scale, bad=None, end=step)
    top = Fraction(math.floor(Fraction(b_max + 1) * 64), 64)   # the last scale tried
    return _first_fitting(fits, step, good=None, bad=scale, end=top) if scale < top else None


def _first_fitting(fits, step: Fraction, *, good: Fraction | None, bad: Fraction | None,
                   end: Fraction) -> Fraction | None:
    """The smallest scale on the grid of ``step`` that ``fits``, next to a scale known to
    fit (``good``: searched down to ``end``) or known not to (``bad``: searched up to
    ``end``; None if none fits up to it). Galloping (1, 2, 4, ... steps from the known
    scale), then bisecting: O(log n) evaluations of ``fits`` where a walk of one step at a
    time took n (at a noise scale of thousands, the secant's last fraction of a percent
    is hundreds of steps). The answer is the walk's whenever ``fits`` is monotone (more
    noise, less loss: what the secant steps assume too); either way only a scale
    ``fits`` accepted is returned, so privacy never rests on the assumption."""
    n, start = 1, good if good is not None else bad
    while good is None or bad is None:
        if good is not None:                 # going down
            trial = max(start - n * step, end)
            if not fits(float(trial)):
                bad = trial
            elif trial == end:
                return end
            else:
                good = trial
        else:                                # going up
            trial = min(start + n * step, end)
            if fits(float(trial)):
                good = trial
            elif trial == end:
                return None
            else:
                bad = trial
        n *= 2
    while good - bad > step:                 # fits(good), not fits(bad)
        mid = bad + ((good - bad) / step // 2) * step
        good, bad = (mid, bad) if fits(float(mid)) else (good, mid)
    return good


def calibrate_between_thresholds(*, epsilon: float, delta: float, lower: float, upper: float,
                                 max_scale: float = math.inf) -> BetweenThresholdsCalibration:
    """The smallest noise scale b (to 1/64 of a count) with eps_top(b) + psi(b) ln(1/delta)
    <= epsilon; raises :class:`ThresholdsTooClose` when the gap B - A is below 3b, and
    :class:`ScaleAboveLimit` when b would be above ``max_scale`` (a bound on the work,
    which grows with b: ``neighbour_lanes``)."""
    if not epsilon > 0:
        raise ParameterError("epsilon", epsilon, "> 0")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    if not upper > lower:
        raise ParameterError("upper", upper, f"> lower = {lower}")

    def eps_of(b: float, profile=between_thresholds_privacy) -> float:
        psi, eps_top = profile(b, lower, upper)
        return eps_top + psi * math.log(1.0 / delta)

    gap = upper - lower
    b_max = min(gap / MIN_GAP_IN_SCALES, max_scale)   # any usable scale leaves a gap of 3b
    # b psi ~ 1.5 and eps_top <= 1/b for wide gaps (docs/privacy.md, "BetweenThresholds")
    scale = smallest_fitting_scale(eps_of, epsilon, b_max=b_max,
                                   start=(1.5 * math.log(1.0 / delta) + 1.0) / epsilon,
                                   guess_of=lambda b: eps_of(b, _guessed_profile))
    if scale is None and max_scale < gap / MIN_GAP_IN_SCALES:
        raise ScaleAboveLimit(f"(eps={epsilon}, delta={delta}) needs a noise scale above "
                              f"max_scale={max_scale:g} counts")
    if scale is None:
        raise ThresholdsTooClose(
            f"thresholds ({lower}, {upper}) have gap {gap:.4g} counts but (eps={epsilon}, "
            f"delta={delta}) needs a noise scale above {b_max:.4g} = gap/{MIN_GAP_IN_SCALES:g}; "
            f"with votes of k hypotheses at (3k/8, 5k/8) that means k >= about "
            f"{math.ceil(12 * 1.5 * math.log(1.0 / delta) / epsilon)} (b psi ~ 1.5 for wide gaps)")
    psi, eps_top = between_thresholds_privacy(float(scale), lower, upper)
    return BetweenThresholdsCalibration(scale, lower, upper, psi, eps_top)


@dataclass
class BetweenThresholdsState:
    """One instance's counters (its noise is a function of the key and instance)."""
    instance: int
    queries: int = 0
    halted: bool = False


class BetweenThresholds:
    """BetweenThresholds (Bun, Steinke, Ullman 2016; seed 001 Lemmas 1 and 2): L, R or TOP per
    query, halting on TOP."""
    def __init__(self, *, calibration: BetweenThresholdsCalibration, rng: KeyedRandomness,
                 model_id: str, state: BetweenThresholdsState, purpose: str = "between_thresholds"):
        self.calibration, self.state = calibration, state
        self._noise = NoiseTape(rng, model_id, purpose, state.instance, calibration.scale)

    def query(self, count: int) -> str:
        if self.state.halted:
            raise MechanismHalted(
                f"BetweenThresholds instance {self.state.instance} output TOP and halted")
        t = self.state.queries
        self.state.queries = t + 1
        v = int(count) + self._noise[t]
        if v < self.calibration.lower:
            return L
        if v > self.calibration.upper:
            return R
        self.state.halted = True
        return TOP
