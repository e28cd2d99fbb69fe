import itertools
import math

import numpy as np
import pytest

from dpstream.mechanisms.above_threshold import AboveThreshold, AboveThresholdState, above_threshold_alpha
from dpstream.mechanisms.errors import MechanismHalted, ParameterError
from dpstream.mechanisms.exact import above_threshold_fire_distribution

from .stats import chi_square_pvalue

QUERY_SETS = [(0, 0, 0, 0), (3, 1, 4, 1), (5, 5, 5, 5), (0, 2, 4, 6), (8, 0, 8, 0)]


def log_ratio(p, p2) -> float:
    both_zero = (p == 0) & (p2 == 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(np.log(p) - np.log(p2))
    return float(np.max(np.where(both_zero, 0.0, r)))


def worst_log_ratio(eps, threshold=4, **scales):
    worst = 0.0
    for q in QUERY_SETS:
        p = above_threshold_fire_distribution(q, threshold, eps, **scales)
        for shift in itertools.product((-1, 0, 1), repeat=len(q)):
            p2 = above_threshold_fire_distribution(np.add(q, shift), threshold, eps, **scales)
            worst = max(worst, log_ratio(p, p2))
    return worst


def worst_constant_adversary_log_ratio(eps, rounds=60, threshold=0, **scales):
    """Same count for every round, neighbour shifts it by one (docs/privacy.md, "AboveThreshold")."""
    worst = 0.0
    for c in range(-12, 13):
        p = above_threshold_fire_distribution([c] * rounds, threshold, eps, **scales)
        p2 = above_threshold_fire_distribution([c + 1] * rounds, threshold, eps, **scales)
        worst = max(worst, log_ratio(p, p2))
    return worst


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_exact_output_distribution_ratio_is_at_most_e_eps_on_all_neighbours(eps):
    """Enumerates every sensitivity-1 shift of each query vector (3^4 neighbours)."""
    assert worst_log_ratio(eps) <= eps + 1e-9


def test_exact_constant_adversary_over_60_rounds_stays_below_eps():
    assert worst_constant_adversary_log_ratio(1.0) <= 1.0 + 1e-9


def test_exact_check_catches_the_variant_without_threshold_noise():
    assert worst_constant_adversary_log_ratio(1.0, threshold_scale=0.0) > 5.0


def test_exact_check_catches_the_variant_without_query_noise():
    assert worst_log_ratio(1.0, query_scale=0.0) == math.inf


def test_instance_fire_positions_follow_the_exact_distribution(rng):
    q, threshold, eps = (0, 2, 4, 6, 8), 5, 1.0
    firsts = []
    for i in range(2500):
        at = AboveThreshold(epsilon=eps, threshold=threshold, beta=0.1, rng=rng, model_id="dist",
                            state=AboveThresholdState(instance=i))
        firsts.append(next((j for j, v in enumerate(q) if at.step(v)), len(q)))
    probs = above_threshold_fire_distribution(q, threshold, eps)
    assert chi_square_pvalue(np.array(firsts), np.arange(len(q) + 1), probs) > 1e-4


def test_instance_halts_after_it_fires(rng):
    at = AboveThreshold(epsilon=1.0, threshold=0, beta=0.1, rng=rng, model_id="halt",
                        state=AboveThresholdState(instance=0))
    while not at.step(100):
        pass
    with pytest.raises(MechanismHalted):
        at.step(100)


def test_restored_state_continues_with_the_same_noise(rng):
    queries = list(range(0, 60, 2))

    def build(state):
        return AboveThreshold(epsilon=0.5, threshold=40, beta=0.1, rng=rng, model_id="r",
                              state=state)

    def run(split):
        at = build(AboveThresholdState(instance=7))
        out = []
        for j, v in enumerate(queries):
            if j == split:   # rebuild from the plain record, as a restarted worker does
                at = build(AboveThresholdState(**vars(at.state)))
            if at.state.fired:
                break
            out.append(at.step(v))
        return out

    assert run(split=-1) == run(split=10)
    assert True in run(split=-1)          # the run reaches a fire, so the noise mattered


def test_seed_interface_add_query_then_test(rng):
    at = AboveThreshold(epsilon=1.0, threshold=1e9, beta=0.1, rng=rng, model_id="i",
                        state=AboveThresholdState(instance=0))
    at.add_query(3)
    assert at.test_above_threshold() is False
    with pytest.raises(MechanismHalted):
        at.test_above_threshold()


def test_accuracy_bound_formula():
    assert above_threshold_alpha(100, 0.05, 0.5) == pytest.approx(8 * (math.log(100) + math.log(40)) / 0.5)


@pytest.mark.parametrize("kwargs", [dict(epsilon=0), dict(beta=1.0), dict(threshold=float("nan"))])
def test_bad_parameters_raise(rng, kwargs):
    args = dict(epsilon=1.0, threshold=1.0, beta=0.1) | kwargs
    with pytest.raises(ParameterError):
        AboveThreshold(rng=rng, model_id="b", state=AboveThresholdState(instance=0), **args)


@pytest.mark.parametrize("threshold", [0, 6, 40])
def test_quiet_asks_exactly_the_queries_that_step_answers_below(rng, threshold):
    """The batch path (``quiet``) must be ``step`` on each query until the first that
    fires, with the same noise: the same count, the same state, and that query fires
    when ``step`` asks it next."""
    qs = np.arange(0, 400) // 7                     # a slowly growing count, as mistakes are
    for instance in range(40):
        one = AboveThreshold(epsilon=0.5, threshold=threshold, beta=0.1, rng=rng, model_id="quiet",
                             state=AboveThresholdState(instance=instance))
        fired_at = next((j for j, q in enumerate(qs) if one.step(int(q))), len(qs))
        many = AboveThreshold(epsilon=0.5, threshold=threshold, beta=0.1, rng=rng, model_id="quiet",
                              state=AboveThresholdState(instance=instance))
        asked = many.quiet(qs[:5]) if fired_at >= 5 else None
        start = 5 if asked is not None else 0
        assert asked in (None, 5)
        asked = start + many.quiet(qs[start:])      # resumes where the first call stopped
        assert asked == fired_at
        if fired_at < len(qs):
            assert many.step(int(qs[fired_at])) is True
        assert vars(many.state) == vars(one.state)


def test_noise_tape_ranges_equal_its_values_one_by_one(rng):
    from fractions import Fraction
    from dpstream.mechanisms.noise_tape import NoiseTape
    tape = NoiseTape(rng, "tape", "test", 3, Fraction(5, 2), block=64)
    values = [tape[t] for t in range(400)]
    for start, stop in [(0, 0), (0, 16), (5, 50), (15, 17), (40, 400), (111, 112)]:
        assert NoiseTape(rng, "tape", "test", 3, Fraction(5, 2), block=64).values(start, stop).tolist() \
            == values[start:stop]
