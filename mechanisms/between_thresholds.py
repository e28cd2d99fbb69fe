"""BetweenThresholds (Bun, Steinke, Ullman 2016, "Make up your mind"), the gate of
seed 001's Algorithm 2 (its Lemmas 1 and 2), on integer vote counts.

Mechanism, with thresholds A < B in counts and noise scale b:
per query, v = count + DLap(b) with fresh noise; output L if v < A, R if v > B,
otherwise TOP, and halt. Only L / R / TOP leave the mechanism.

Calibration (design.md section 4; the commonly quoted 6/(eps n) scale is NOT used:
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

from .errors import MechanismHalted, ParameterError, ThresholdsTooClose
from .noise_tape import NoiseTape
from .randomness import KeyedRandomness
from .samplers import fraction_at_least

L, R, TOP = "L", "R", "TOP"
MIN_GAP_IN_SCALES = 3.0  # design.md: beyond a gap of 3b the bound hardly improves


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
    lo = np.ceil(lower - c)            # v < A  <=>  Z <= ceil(A - c) - 1
    hi = np.floor(upper - c)           # v > B  <=>  Z >= floor(B - c) + 1
    log_l = log_dlap_cdf(lo - 1, scale)
    log_r = log_dlap_sf(hi + 1, scale)
    # P(TOP) = 1 - P(L) - P(R), computed as the mass of [lo, hi] without cancellation.
    p = math.exp(-1.0 / scale)
    l1p = math.log1p(p)
    with np.errstate(divide="ignore"):
        right = np.log(np.maximum(np.exp(lo * -1.0 / scale - l1p)
                                  - np.exp((hi + 1) * -1.0 / scale - l1p), 0.0))   # lo >= 1
        left = np.log(np.maximum(np.exp(-hi * -1.0 / scale - l1p)
                                 - np.exp((-lo + 1) * -1.0 / scale - l1p), 0.0))  # hi <= -1
        mid = np.log(np.maximum(-np.expm1(np.logaddexp(log_dlap_cdf(lo - 1, scale),
                                                       log_dlap_sf(hi + 1, scale))), 0.0))
    log_t = np.where(lo >= 1, right, np.where(hi <= -1, left, mid))
    return log_l, log_r, log_t


@lru_cache(maxsize=256)
def _privacy_profile(scale: float, lower: float, upper: float) -> tuple[float, float]:
    # Counts within 40b of a threshold; deeper inside the gap both P(L) and P(R) are
    # below e^-40 and the constraint is slack, so a wide gap is covered by two windows.
    span = int(math.ceil(40 * scale)) + 2
    lo_win = np.arange(math.floor(lower) - span, math.ceil(lower) + span + 1)
    hi_win = np.arange(math.floor(upper) - span, math.ceil(upper) + span + 1)
    windows = [np.unique(np.concatenate([lo_win, hi_win]))] if hi_win[0] <= lo_win[-1] + 1 \
        else [lo_win, hi_win]
    psi_inv_min, eps_top, edge_worst = np.inf, 0.0, False
    for counts in windows:
        ll, lr, lt = outcome_log_probs(counts, scale, lower, upper)
        psi_inv = np.full(counts.size - 1, np.inf)
        for shift in (+1, -1):
            a = slice(0, -1) if shift == +1 else slice(1, None)
            b = slice(1, None) if shift == +1 else slice(0, -1)
            l_l, l_r, l_t = ll[a] - ll[b], lr[a] - lr[b], lt[a] - lt[b]
            finite_top = np.isfinite(l_t)
            if finite_top.any():
                eps_top = max(eps_top, float(l_t[finite_top].max()))
            psi_inv = np.minimum(psi_inv, _largest_u(ll[a], lr[a], l_l, l_r))
        worst = int(np.argmin(psi_inv))
        if psi_inv[worst] < psi_inv_min:
            psi_inv_min = float(psi_inv[worst])
            edge_worst = (counts[worst] == counts[0] and counts[0] < lower) or \
                (worst == psi_inv.size - 1 and counts[-1] > upper)
    if edge_worst and np.isfinite(psi_inv_min):
        raise ArithmeticError("BetweenThresholds psi supremum at the grid edge; widen the grid")
    return 1.0 / psi_inv_min, eps_top


def _largest_u(log_pl, log_pr, l_l, l_r) -> np.ndarray:
    """Per lane, the largest u with P_L e^{u l_L} + P_R e^{u l_R} <= 1 (the left side is
    convex in u and below 1 at u = 0, so the feasible u form an interval [0, u*])."""
    def g(u):
        with np.errstate(over="ignore", invalid="ignore"):
            return np.expm1(log_pl + u * l_l) + np.exp(log_pr + u * l_r)

    hi = np.full(log_pl.shape, 1.0)
    unbounded = np.zeros(log_pl.shape, dtype=bool)
    for _ in range(200):                     # grow the bracket
        grow = (g(hi) <= 0) & ~unbounded
        if not grow.any():
            break
        hi = np.where(grow, hi * 2, hi)
        unbounded |= hi > 1e12
    lo = np.zeros(log_pl.shape)
    for _ in range(100):
        mid = (lo + hi) / 2
        ok = g(mid) <= 0
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(unbounded, np.inf, lo)


def between_thresholds_privacy(scale: float, lower: float, upper: float) -> tuple[float, float]:
    """(psi, eps_top) of one instance with noise scale b and thresholds (A, B) in counts."""
    if not scale > 0:
        raise ParameterError("scale", scale, "> 0")
    if not upper > lower:
        raise ParameterError("upper", upper, f"> lower = {lower}")
    return _privacy_profile(float(scale), float(lower), float(upper))


@dataclass(frozen=True)
class BetweenThresholdsCalibration:
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


def smallest_fitting_scale(fits, lo: float, hi: float, *, steps: int) -> Fraction:
    """Bisection on [lo, hi] for the smallest noise scale b with fits(b) (monotone in b,
    fits(hi) true), rounded up to 1/64 of a count and re-checked after rounding."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    scale = fraction_at_least(hi, 64)
    if not fits(float(scale)):
        scale += Fraction(1, 64)
    return scale


def calibrate_between_thresholds(*, epsilon: float, delta: float, lower: float,
                                 upper: float) -> BetweenThresholdsCalibration:
    """The smallest noise scale b (to 1/64 of a count) with eps_top(b) + psi(b) ln(1/delta)
    <= epsilon; raises :class:`ThresholdsTooClose` when the gap B - A is below 3b."""
    if not epsilon > 0:
        raise ParameterError("epsilon", epsilon, "> 0")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    if not upper > lower:
        raise ParameterError("upper", upper, f"> lower = {lower}")

    def fits(b: float) -> bool:
        psi, eps_top = between_thresholds_privacy(b, lower, upper)
        return eps_top + psi * math.log(1.0 / delta) <= epsilon

    gap = upper - lower
    b_max = gap / MIN_GAP_IN_SCALES          # any usable scale leaves a gap of 3b
    if not fits(b_max):
        raise ThresholdsTooClose(
            f"thresholds ({lower}, {upper}) have gap {gap:.4g} counts but (eps={epsilon}, "
            f"delta={delta}) needs a noise scale above {b_max:.4g} = gap/{MIN_GAP_IN_SCALES:g}; "
            f"with votes of k hypotheses at (3k/8, 5k/8) that means k >= about "
            f"{math.ceil(12 * 1.5 * math.log(1.0 / delta) / epsilon)} (b psi ~ 1.5 for wide gaps)")
    lo, hi = 0.25 / epsilon, min(b_max, 4.0 * (1.0 + math.log(1.0 / delta)) / epsilon)
    while not fits(hi):
        hi = min(2 * hi, b_max)
    scale = smallest_fitting_scale(fits, lo, hi, steps=40)
    psi, eps_top = between_thresholds_privacy(float(scale), lower, upper)
    return BetweenThresholdsCalibration(scale, lower, upper, psi, eps_top)


@dataclass
class BetweenThresholdsState:
    instance: int
    queries: int = 0
    halted: bool = False


class BetweenThresholds:
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
