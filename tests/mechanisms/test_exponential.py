import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.exact import exponential_mechanism_probabilities
from dpstream.mechanisms.exponential import exponential_mechanism

from .stats import chi_square_pvalue


@settings(max_examples=200, deadline=None)
@given(scores=st.lists(st.integers(-50, 50), min_size=1, max_size=12),
       shifts=st.lists(st.sampled_from([-1, 0, 1]), min_size=12, max_size=12),
       eps=st.floats(0.05, 4.0))
def test_exponential_mechanism_probability_ratio_is_at_most_e_eps_on_neighbours(scores, shifts, eps):
    s = np.array(scores)
    s2 = s + np.array(shifts[: s.size])          # sensitivity-1 neighbour
    p, q = exponential_mechanism_probabilities(s, eps), exponential_mechanism_probabilities(s2, eps)
    assert np.all(np.log(p) - np.log(q) <= eps + 1e-9)


def test_sampler_matches_the_exact_probabilities(rng):
    scores = np.array([0, -1, -2, -3, -5, -8, 2])
    draws = exponential_mechanism(rng.stream("t", "em", 0), scores, 1.0, size=60_000)
    probs = exponential_mechanism_probabilities(scores, 1.0)
    assert chi_square_pvalue(draws, np.arange(scores.size), probs) > 1e-4


def test_higher_score_is_more_likely_not_less(rng):
    """Seed 000 writes exp(-eps q/2); the mechanism must favour high quality."""
    draws = exponential_mechanism(rng.stream("t", "em", 1), np.array([10, 0]), 1.0, size=2000)
    assert (draws == 0).mean() > 0.95


def test_scores_thousands_apart_do_not_underflow_to_all_zero_weights(rng):
    scores = np.array([-100_000, -5_000, -100_000, -5_000])
    draws = exponential_mechanism(rng.stream("t", "em", 2), scores, 2.0, size=4000)
    assert set(np.unique(draws)) == {1, 3}
    assert abs((draws == 1).mean() - 0.5) < 0.05


def test_single_draw_is_deterministic_given_the_stream(rng):
    scores = np.arange(100) % 7
    a = [exponential_mechanism(rng.stream("t", "em-det", i), scores, 0.5) for i in range(20)]
    b = [exponential_mechanism(rng.stream("t", "em-det", i), scores, 0.5) for i in range(20)]
    assert a == b and len(set(a)) > 1


@pytest.mark.parametrize("kwargs", [dict(scores=[], epsilon=1.0), dict(scores=[1, 2], epsilon=0.0),
                                    dict(scores=[0.5, 1], epsilon=1.0)])
def test_bad_arguments_raise_parameter_errors(rng, kwargs):
    with pytest.raises(ParameterError):
        exponential_mechanism(rng.stream("t", "em", 3), **kwargs)


def test_accuracy_guarantee_of_the_seed_holds(rng):
    """Seed 000 Prelim.: score >= max - (2/eps)(ln|H| + tau) with prob >= 1 - e^-tau."""
    scores = -np.arange(1000)
    eps, tau = 0.5, 3.0
    draws = exponential_mechanism(rng.stream("t", "em", 4), scores, eps, size=5000)
    bad = (scores[draws] < -(2 / eps) * (math.log(1000) + tau)).mean()
    assert bad <= math.exp(-tau)
