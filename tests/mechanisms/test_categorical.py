from fractions import Fraction

import numpy as np
import pytest

from dpstream.mechanisms.categorical import _boundaries, _resolve_tie, sample_groups
from dpstream.mechanisms.errors import ParameterError

from .stats import chi_square_pvalue


def test_group_sampler_matches_the_exact_weights(rng):
    counts = [1, 5, 99_994, 0, 3]
    gammas = [Fraction(0), Fraction(1, 2), Fraction(10), Fraction(0), Fraction(-1, 3)]
    w = np.array(counts) * np.exp(-np.array([float(g) for g in gammas]))
    draws = sample_groups(rng.stream("t", "cat", 0), counts, gammas, 100_000)
    assert chi_square_pvalue(draws, np.arange(5), w / w.sum()) > 1e-4
    assert not (draws == 3).any()


def test_concentrated_weights_are_sampled_without_rejection_blowup(rng):
    """A multiplicative-weights shape: one heavy coordinate, a huge light bulk."""
    counts, gammas = [1, 10**6], [Fraction(0), Fraction(40)]
    draws = sample_groups(rng.stream("t", "cat", 1), counts, gammas, 10_000)
    assert (draws == 0).mean() > 0.99


def test_a_uniform_landing_exactly_on_a_boundary_is_resolved_with_more_bits(rng):
    counts, gammas = [1, 1], [Fraction(0), Fraction(0)]
    b = _boundaries(counts, gammas, 64)[0]
    assert b == 2**63
    # the infinite-precision uniform starting with these 64 bits is >= 1/2: group 1
    assert {_resolve_tie(rng.stream("t", "tie", i), counts, gammas, b) for i in range(20)} == {1}
    assert {_resolve_tie(rng.stream("t", "tie", i), counts, gammas, b - 1) for i in range(20)} == {0}


def test_invalid_weights_raise():
    with pytest.raises(ParameterError):
        sample_groups(None, [0, 0], [Fraction(0), Fraction(0)], 3)
