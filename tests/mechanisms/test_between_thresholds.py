import math

import numpy as np
import pytest

from dpstream.mechanisms.between_thresholds import (L, R, TOP, BetweenThresholds, BetweenThresholdsState,
                                                    between_thresholds_privacy,
                                                    calibrate_between_thresholds, outcome_log_probs)
from dpstream.mechanisms.errors import MechanismHalted, ThresholdsTooClose
from dpstream.mechanisms.exact import between_thresholds_worst_constant_delta

from .stats import chi_square_pvalue

LOWER, UPPER = 0.0, 205.3      # the quoted calibration's gap at (1, 1e-6), in counts


def test_quoted_scale_6_fails_the_exact_check_at_claimed_1_and_1e_minus_6():
    """docs/privacy.md, "BetweenThresholds": noise 6 (counts) does not give (1, 1e-6)."""
    delta, _, _ = between_thresholds_worst_constant_delta(
        scale=6.0, lower=LOWER, upper=UPPER, rounds=200, epsilon=1.0, counts=range(-30, 10))
    assert delta > 1e-6 * 100


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-6), (0.5, 1e-5)])
def test_calibrated_instance_exact_divergence_never_exceeds_the_accountants_delta(eps, delta):
    cal = calibrate_between_thresholds(epsilon=eps, delta=delta, lower=LOWER, upper=UPPER)
    b = float(cal.scale)
    counts = range(int(LOWER - 4 * b), int(UPPER + 4 * b), 3)     # sweeps across both thresholds
    worst, c, s = between_thresholds_worst_constant_delta(
        scale=b, lower=LOWER, upper=UPPER, rounds=200, epsilon=eps, counts=counts)
    assert worst <= cal.delta(eps) <= delta


def test_calibration_is_within_2x_of_the_exact_constant_adversary_requirement():
    cal = calibrate_between_thresholds(epsilon=1.0, delta=1e-6, lower=LOWER, upper=UPPER)
    b = float(cal.scale)
    tight, _, _ = between_thresholds_worst_constant_delta(
        scale=b / 2, lower=LOWER, upper=UPPER, rounds=200, epsilon=1.0, counts=range(-30, 10))
    assert tight > 1e-6      # half our scale is not enough even against constant queries


@pytest.mark.parametrize("gap,lo,hi", [(3, 1.4, 1.7), (8, 1.4, 1.6), (0.5, 2.0, 2.3)])
def test_psi_times_scale_matches_the_design_numbers(gap, lo, hi):
    b = 10.0
    psi, eps_top = between_thresholds_privacy(b, 0.0, gap * b)
    assert lo <= b * psi <= hi
    assert eps_top <= 1 / b + 1e-12


def test_thresholds_too_close_for_the_budget_raise_with_the_needed_k():
    with pytest.raises(ThresholdsTooClose, match="k >="):
        calibrate_between_thresholds(epsilon=1.0, delta=1e-6, lower=30, upper=50)


def test_instance_outcomes_follow_the_exact_probabilities(rng):
    cal = calibrate_between_thresholds(epsilon=2.0, delta=1e-3, lower=20, upper=60)
    first = []
    for i in range(3000):
        bt = BetweenThresholds(calibration=cal, rng=rng, model_id="bt", state=BetweenThresholdsState(i))
        first.append({L: 0, R: 1, TOP: 2}[bt.query(25)])
    ll, lr, lt = outcome_log_probs(np.array([25]), float(cal.scale), 20, 60)
    probs = np.exp([ll[0], lr[0], lt[0]])
    assert math.isclose(probs.sum(), 1.0, rel_tol=1e-9)
    assert chi_square_pvalue(np.array(first), np.arange(3), probs) > 1e-4


def test_instance_halts_on_top_and_replays_identically(rng):
    cal = calibrate_between_thresholds(epsilon=2.0, delta=1e-3, lower=20, upper=60)

    def run():
        bt = BetweenThresholds(calibration=cal, rng=rng, model_id="h", state=BetweenThresholdsState(3))
        out = []
        while not out or out[-1] != TOP:
            out.append(bt.query(40))
        with pytest.raises(MechanismHalted):
            bt.query(40)
        return out

    assert run() == run()


def test_a_scale_far_below_one_count_certifies_no_finite_psi_and_huge_budgets_calibrate():
    """Before: at noise 0.029 counts (where epsilon 1000 starts its search) every lane's
    slack 1 - P_L - P_R is below 1e-15, no u = 1/psi above the search's floor is feasible,
    and _common_u looped forever: a predictor registration at epsilon 1000 froze the worker
    and `models register`. Now that scale certifies psi = inf (it does not fit), and the
    calibration moves on to a scale whose certified guarantee fits the budget."""
    psi, _ = between_thresholds_privacy(0.029131021115928548, 37.5, 62.5)
    assert psi == math.inf
    for eps in (1e3, 1e6):
        cal = calibrate_between_thresholds(epsilon=eps, delta=1e-6, lower=37.5, upper=62.5)
        psi, eps_top = between_thresholds_privacy(float(cal.scale), 37.5, 62.5)
        assert math.isfinite(psi) and eps_top + psi * math.log(1e6) <= eps


@pytest.mark.parametrize("scale", [1e-5, 1e-3, 0.03])
def test_lanes_hold_no_nan_where_an_outcome_underflows_at_both_counts(scale):
    """Before: at noise far below one count P(TOP) underflows to 0 at neighbouring counts
    and l_TOP = -inf - -inf was NaN: a NaN lane never looks violated and np.argmax takes
    it as the largest top charge (float(nan) then became a charge of 0). Now such a lane's
    ratio is 0 (its term P e^{u l} is 0 either way)."""
    from dpstream.mechanisms.between_thresholds import neighbour_lanes
    lanes = neighbour_lanes(scale, 37.5, 62.5)
    assert not any(np.isnan(column).any() for column in lanes)
