"""One privacy budget per predictor epoch: BetweenThresholds instances as rounds of one
process, each hard query (TOP) charged a constant. Our extension of the
supermartingale bound of mechanisms/between_thresholds.py (which covers one instance); the seed composes instances by
Theorem 3 instead (``mechanisms.params.predictor_instance_budget``, kept selectable).

Setting. BetweenThresholds has no threshold noise: every query of every instance is an
independent draw v = count + DLap(b) against the fixed thresholds (A, B), so an epoch of
the predictor (seed 001 Algorithm 2) is a single sequence of rounds with outcomes L, R or
TOP, at most v_max of them TOP, with adaptively chosen counts. For a count c, a neighbour
shift s in {-1, +1} and an outcome o, write P_o = P_c(o) and l_o = ln(P_c(o) / P_{c+s}(o)).

Claim. Let psi > 0 and c_top >= 0 be such that, for every c and s,

    P_L e^{l_L / psi} + P_R e^{l_R / psi} + P_TOP e^{(l_TOP - c_top) / psi} <= 1.     (*)

Then an epoch with at most v_max TOPs is (psi ln(1/delta) + v_max c_top, delta)-DP for
adaptively chosen queries, for every delta in (0, 1).

Proof. Let Lambda_t be the privacy loss of the first t outcomes (the sum of l_o over
them, counts chosen adaptively from the past) and n_t the number of TOPs among them. By
(*) the factor exp((l_o - c_top [o = TOP]) / psi) has conditional mean at most 1 whatever
count the adversary picks, so M_t = exp((Lambda_t - c_top n_t) / psi) is a non-negative
supermartingale with M_0 = 1. Ville's inequality gives P(sup_t (Lambda_t - c_top n_t)
>= x) <= e^{-x/psi}; since n_t <= v_max and c_top >= 0 (so c_top n_t <= v_max c_top: the
step needs the sign), P(sup_t Lambda_t >= x + v_max c_top) <= e^{-x/psi}.
Take x = psi ln(1/delta): outside an event of probability delta the loss of the whole
transcript stays below eps = psi ln(1/delta) + v_max c_top, which gives (eps, delta)-DP
(the standard privacy-loss tail bound). []

Computing it. For each psi, the smallest c_top meeting (*) is the maximum over c and s of
l_TOP + psi ln(P_TOP / (1 - P_L e^{l_L/psi} - P_R e^{l_R/psi})), taken on the integer
grid of counts within 40 b of either threshold, with 1 - (...) evaluated as
P_TOP + P_R (1 - e^{u l_R}) - P_L expm1(u l_L) (u = 1/psi) so that far counts, where every
term is tiny, keep their precision; the code checks that the maximum is not at the grid
edge (far counts tend to a limit from below). psi must exceed the single-instance psi*
(the denominator must stay positive); eps is minimised over psi by a log-spaced search
refined by golden section on the lanes within 8 counts of a threshold (where the maximum
sits: ``_grid``), and the c_top returned for the chosen psi is the maximum over every lane, so the
search's shortcut can cost tightness, never validity. A c_top below 0 would also meet (*)
at 0 (raising c_top only lowers the left side), so the code uses max(c_top, 0): the
claim's precondition holds by construction (``top_charge``). Exact checks:
tests/mechanisms/test_bt_epoch.py (the exact
divergence of constant-count adversaries over a whole epoch, with restarts after TOP).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from .between_thresholds import (MIN_GAP_IN_SCALES, NEAR_IN_SCALES, between_thresholds_privacy,
                                 neighbour_lanes, smallest_fitting_scale)
from .errors import ParameterError, ScaleAboveLimit, ThresholdsTooClose


SEARCH_REACH = 8    # counts from a threshold whose lanes the psi search reads (``_grid``)


@lru_cache(maxsize=2)
def _grid(scale: float, lower: float, upper: float):
    """The lanes of between_thresholds.neighbour_lanes with P_L, P_R, P_TOP precomputed
    (without the counts), the same for the lanes the psi search reads, and the counts.

    The search reads the lanes within SEARCH_REACH counts of a threshold (within
    between_thresholds.near_thresholds's 2 b + 2 when that is narrower). The lane of the
    largest c_top sat within 1 count of a threshold for every psi from 1.0005 to 30 psi*,
    k from 104 to 16,384 and b from 1 to 2,000 (swept for issue 43), so the search sees
    the values it saw over 2 b + 2 counts, at a cost that does not grow with b (it reads
    them some sixty times per scale: at b = 2,000 that was 90% of a registration's
    work). Either way the charge returned is the maximum over every lane
    (``top_charge``): the band can cost tightness, never validity.
    Two grids are kept: each holds ~8 arrays of up to 2 (gap + 160 b) floats."""
    log_pl, log_pr, log_pt, l_l, l_r, l_t, counts = neighbour_lanes(scale, lower, upper)
    lanes = (np.exp(log_pl), np.exp(log_pr), np.exp(log_pt), log_pt, l_l, l_r, l_t)
    reach = min(SEARCH_REACH, NEAR_IN_SCALES * scale + 2)
    mask = (np.abs(counts - lower) <= reach) | (np.abs(counts - upper) <= reach)
    return lanes, tuple(x[mask] for x in lanes), counts


def _top_lanes(psi: float, p_l, p_r, p_t, log_pt, l_l, l_r, l_t) -> np.ndarray | None:
    """Per lane, the smallest c_top meeting (*) at this psi (None if psi <= psi*)."""
    u = 1.0 / psi
    with np.errstate(over="ignore", invalid="ignore"):
        slack = p_t - p_r * np.expm1(u * l_r) - p_l * np.expm1(u * l_l)
        if np.any(~(slack > 0)):             # a NaN slack counts as none: fail closed
            return None
        values = l_t + psi * (log_pt - np.log(slack))
    return np.where(np.isnan(values), np.inf, values)   # never a NaN argmax: fail closed


def top_charge(scale: float, lower: float, upper: float, psi: float, *, near: bool = False) -> float:
    """The smallest c_top meeting (*) for this psi (inf if psi is below psi*), over every
    lane, or (``near=True``, for searching psi only) over the lanes near a threshold."""
    every, near_lanes, counts = _grid(float(scale), float(lower), float(upper))
    values = _top_lanes(psi, *(near_lanes if near else every))
    if values is None:
        return math.inf
    worst = int(np.argmax(values))
    if not near and counts[worst] in (counts.min(), counts.max()):
        raise ArithmeticError("epoch top charge maximal at the grid edge; widen the grid")
    return max(0.0, float(values[worst]))          # the claim needs c_top >= 0 (module docstring)


@lru_cache(maxsize=512)
def epoch_epsilon(scale: float, lower: float, upper: float, v_max: int,
                  delta: float) -> tuple[float, float, float]:
    """(eps, psi, c_top): the smallest eps = psi ln(1/delta) + v_max c_top(psi) over psi.
    psi is searched on the lanes near the thresholds; the returned c_top (and so eps) is
    the maximum over every lane at that psi, so any psi found gives a valid bound."""
    if v_max < 1:
        raise ParameterError("v_max", v_max, ">= 1")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    psi_star, _ = between_thresholds_privacy(scale, lower, upper)
    if not math.isfinite(psi_star):          # no psi certified at this scale: it does not fit
        return math.inf, math.inf, math.inf
    log_inv = math.log(1.0 / delta)

    def eps(psi: float) -> float:
        return psi * log_inv + v_max * top_charge(scale, lower, upper, psi, near=True)

    grid = psi_star * np.exp(np.linspace(math.log(1.0005), math.log(30.0), 16))
    values = [eps(p) for p in grid]
    i = int(np.argmin(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(20):                       # golden section on the bracket around the best
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if eps(a) <= eps(b):
            hi = b
        else:
            lo = a
    psi = (lo + hi) / 2
    psi = min((eps(psi), psi), (values[i], float(grid[i])))[1]
    c_top = top_charge(scale, lower, upper, psi)
    return psi * log_inv + v_max * c_top, psi, c_top


@dataclass(frozen=True)
class EpochCalibration:
    """A BetweenThresholds noise scale whose whole epoch (up to v_max TOPs) is
    (epsilon, delta)-DP, with the psi and c_top that certify it."""
    scale: Fraction
    lower: float
    upper: float
    v_max: int
    epsilon: float
    delta: float
    psi: float
    c_top: float

    def accuracy(self, T: int, beta: float) -> float:
        """With probability 1 - beta all of T noise values stay below b ln(T/beta) counts
        (the discrete Laplace tail, as ``BetweenThresholdsCalibration.accuracy``)."""
        return float(self.scale) * math.log(T / beta)


@lru_cache(maxsize=256)
def calibrate_epoch(*, epsilon: float, delta: float, lower: float, upper: float,
                    v_max: int, min_gap: float = MIN_GAP_IN_SCALES,
                    max_scale: float = math.inf) -> EpochCalibration:
    """The smallest noise scale b (to 1/64 of a count) whose epoch guarantee fits
    (epsilon, delta); :class:`ThresholdsTooClose` when the gap is below ``min_gap`` b
    (3 by default, as the single-instance calibration).

    ``min_gap`` is an accuracy floor, not a privacy condition: the claim (*) and its
    proof hold for every gap (psi, c_top and so eps are computed for the gap as it is,
    and a narrow gap simply costs a larger b psi). What the floor buys is room for
    unanimous votes: a count of 0 or k sits 1.5 gap from the nearer threshold, so a
    unanimous vote comes out TOP with probability about e^{-1.5 min_gap}/2 and on the
    wrong side with about e^{-2.5 min_gap}/2 (0.6% and 0.03% at 3; 2.5% and 0.3% at 2).
    The predictor's sizing chooses it (learners/predictor.py, ``GAP_SCALES``).

    ``max_scale``: no scale above it is tried (:class:`ScaleAboveLimit` when the budget
    needs more). The work of a calibration grows with the scale (``neighbour_lanes``:
    lanes over 40 b around each threshold), so this is how a caller bounds it."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError("epsilon", epsilon, "a finite number > 0")
    if not 0 < delta < 1:       # before: delta = 0 divided by zero below (issue 43)
        raise ParameterError("delta", delta, "in (0, 1): BetweenThresholds is (epsilon, delta)-DP "
                             "with delta > 0")
    if not upper > lower:
        raise ParameterError("upper", upper, f"> lower = {lower}")
    if not (min_gap > 0 and math.isfinite(min_gap)):
        raise ParameterError("min_gap", min_gap, "a finite number of noise scales > 0")

    def eps_of(b: float) -> float:
        return epoch_epsilon(b, lower, upper, v_max, delta)[0]

    b_max = min((upper - lower) / min_gap, max_scale)
    # b psi ~ 2 and b c_top ~ 1.5 once the gap is wide
    scale = smallest_fitting_scale(eps_of, epsilon, b_max=b_max,
                                   start=(2.0 * math.log(1 / delta) + 1.5 * v_max) / epsilon)
    if scale is None and max_scale < (upper - lower) / min_gap:
        raise ScaleAboveLimit(
            f"an epoch of up to v_max={v_max} hard queries at (eps={epsilon}, delta={delta}) "
            f"needs a noise scale above max_scale={max_scale:g} counts")
    if scale is None:
        need = math.ceil(4 * min_gap * (1.5 * math.log(1 / delta) + 2.6 * v_max) / epsilon)
        raise ThresholdsTooClose(
            f"thresholds ({lower}, {upper}) leave a gap of {upper - lower:.4g} counts, but an epoch "
            f"of up to v_max={v_max} hard queries at (eps={epsilon}, delta={delta}) needs a noise "
            f"scale above {b_max:.4g} = gap/{min_gap:g}: with votes of k hypotheses at "
            f"(3k/8, 5k/8) that means k >= about {need}")
    eps, psi, c_top = epoch_epsilon(float(scale), lower, upper, v_max, delta)
    return EpochCalibration(scale, lower, upper, v_max, eps, delta, psi, c_top)
