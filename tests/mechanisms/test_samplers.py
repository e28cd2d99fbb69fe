from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from dpstream.mechanisms.samplers import (bernoulli_exp, discrete_laplace, discrete_laplace_cdf,
                                          discrete_laplace_pmf, fraction_at_least, fraction_at_most)

from .stats import chi_square_pvalue

N = 60_000


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0, 13.25])
def test_discrete_laplace_matches_its_pmf(rng, scale):
    z = discrete_laplace(rng.stream("t", "dlap", int(scale * 100)), scale, N)
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi_square_pvalue(z, support, discrete_laplace_pmf(support, scale)) > 1e-4


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_the_same_fit_test_rejects_a_scale_off_by_30_percent(rng, scale):
    """Power check: the test above would notice a sampler with the wrong scale."""
    z = discrete_laplace(rng.stream("t", "dlap-power", int(scale)), scale * 1.3, N)
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi_square_pvalue(z, support, discrete_laplace_pmf(support, scale)) < 1e-6


@pytest.mark.parametrize("num,den", [(0, 1), (1, 3), (1, 1), (3, 2), (7, 2), (1, 1_000_000)])
def test_bernoulli_exp_succeeds_with_probability_exp_minus_gamma(rng, num, den):
    b = bernoulli_exp(rng.stream("t", "bexp", (num, den)), np.full(N, num), den)
    assert binomtest(int(b.sum()), N, float(np.exp(-num / den))).pvalue > 1e-4


def test_cdf_is_the_cumulative_sum_of_the_pmf():
    n = np.arange(-50, 51)
    cum = np.cumsum(discrete_laplace_pmf(np.arange(-5000, 51), 3.0))[-101:]
    assert np.allclose(discrete_laplace_cdf(n, 3.0), cum, rtol=1e-10, atol=1e-14)


def test_rational_rounding_never_reduces_noise_or_raises_epsilon():
    assert fraction_at_least(4 / 3) >= Fraction(4, 3)
    assert fraction_at_most(0.1) <= Fraction(1, 10)


@settings(max_examples=25, deadline=None)
@given(scale=st.floats(0.2, 50), size=st.integers(1, 300), counter=st.integers(0, 2**32))
def test_samplers_are_deterministic_given_the_stream(rng, scale, size, counter):
    a = discrete_laplace(rng.stream("t", "det", counter), scale, size)
    b = discrete_laplace(rng.stream("t", "det", counter), scale, size)
    assert np.array_equal(a, b) and a.dtype == np.int64


@pytest.mark.parametrize("scale", [1.0, 37.5])
def test_small_batch_path_matches_the_pmf(rng, scale):
    """Batches of <= 32 draws take the pure-Python path: same distribution."""
    z = np.concatenate([discrete_laplace(rng.stream("t", "small", (int(scale), i)), scale, 16)
                        for i in range(2500)])
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi_square_pvalue(z, support, discrete_laplace_pmf(support, scale)) > 1e-4
    power = np.concatenate([discrete_laplace(rng.stream("t", "small-p", i), scale * 1.3, 16)
                            for i in range(2500)])
    assert chi_square_pvalue(power, support, discrete_laplace_pmf(support, scale)) < 1e-6


def test_scales_beyond_the_samplers_range_are_refused_and_huge_bounds_still_terminate(rng):
    from dpstream.mechanisms.above_threshold import above_threshold_scales
    from dpstream.mechanisms.exponential import exact_epsilon
    from dpstream.mechanisms.errors import ParameterError
    from dpstream.mechanisms.samplers import MAX_SCALE, _below_scalar
    for size in (5, 500):                       # the pure-Python and the row path
        with pytest.raises(ParameterError, match="scale"):
            discrete_laplace(rng.stream("t", "big", size), MAX_SCALE * 2, size)
        assert discrete_laplace(rng.stream("t", "big", size), MAX_SCALE, size).size == size
    with pytest.raises(ParameterError, match="epsilon"):
        above_threshold_scales(1e-300)
    with pytest.raises(ParameterError, match="grid"):
        exact_epsilon(1e-9)
    stream = rng.stream("t", "huge-bound", 0)   # one 64-bit word cannot cover 2^70
    draws = [_below_scalar(stream, 2**70) for _ in range(200)]
    assert all(0 <= v < 2**70 for v in draws) and max(draws) > 2**66
