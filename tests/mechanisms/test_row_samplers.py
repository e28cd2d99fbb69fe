"""The row samplers (mechanisms/row_samplers.py): the vectorised path decides each attempt
exactly as the scalar definition does, and the draws follow their pmfs even when most
attempts run past their row and continue on fresh words."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.mechanisms import row_samplers as R
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.samplers import discrete_gaussian_pmf, discrete_laplace_pmf

from .stats import chi_square_pvalue

# rows far shorter than the default: most attempts leave their row and go on in Python
SHORT = [(1, 1, 1), (2, 1, 2), (3, 2, 1)]


class _Exhausted:
    """A stream that must not be read: an attempt the vectorised path decided needs no
    word beyond its row."""

    def bytes(self, n):
        raise AssertionError("an attempt decided from its row read a fresh word")


def _rows(rng, layout, m, counter):
    stream = rng.stream("t", "rows", counter)
    return (stream.uint64(m * layout.row64).reshape(m, layout.row64),
            stream.uint32(m * layout.row32).reshape(m, layout.row32))


def _check_rows(rng, layout, s, t, sigma2, counter, m=3000):
    w64, w32 = _rows(rng, layout, m, counter)
    z, ok, python = R._vector(layout, w64, w32, s, t, sigma2)
    for i in np.flatnonzero(~python):
        value = R._attempt(layout, R._Words(w64[i].tolist(), w32[i].tolist(), _Exhausted()), s, t, sigma2)
        assert (value is not None) == ok[i] and (value is None or value == z[i]), i
    return python.mean()


@settings(max_examples=30, deadline=None)
@given(s=st.integers(1, 2**21), t=st.integers(1, 2**40), counter=st.integers(0, 2**32),
       short=st.sampled_from([None, *SHORT]))
def test_vectorised_laplace_attempts_equal_the_scalar_definition(rng, s, t, counter, short):
    g = math.gcd(s, t)
    layout = R._DLAP if short is None else R._Layout(*short, gaussian=False)
    _check_rows(rng, layout, s // g, t // g, 0, counter)


@settings(max_examples=30, deadline=None)
@given(sigma2=st.integers(1, 10**8), counter=st.integers(0, 2**32),
       short=st.sampled_from([None, *SHORT]))
def test_vectorised_gaussian_attempts_equal_the_scalar_definition(rng, sigma2, counter, short):
    layout = R._DGAUSS if short is None else R._Layout(*short, gaussian=True)
    _check_rows(rng, layout, 1, math.isqrt(sigma2) + 1, sigma2, counter)


def test_short_rows_leave_most_attempts_to_python_and_default_rows_almost_none(rng):
    """The equality tests above cover both paths only if both are taken."""
    assert _check_rows(rng, R._Layout(1, 1, 1, gaussian=True), 1, 11, 100, 1) > 0.3
    assert _check_rows(rng, R._DGAUSS, 1, 11, 100, 2, m=20_000) < 0.005


def test_one_word_mod_8_factorial_gives_the_exact_stopping_index_of_a_gamma_1_loop():
    """CKS Alg. 1 at gamma = 1 stops at K* = k with probability 1/(k-1)! - 1/k!: over the
    8! words exactly 8!/(k-1)! - 8!/k! must map to k (k = 2..8), u = 0 alone to "later",
    and a trial wins iff K* is odd."""
    f = math.factorial
    for k in range(2, 9):
        assert int((R._KSTAR == k).sum()) == f(8) // f(k - 1) - f(8) // f(k), k
    assert list(np.flatnonzero(R._KSTAR > 8)) == [0]
    assert np.array_equal(R._WINS[1:], R._KSTAR[1:] % 2 == 1) and not R._WINS[0]


def test_a_word_in_the_rejection_zone_is_replaced_not_reduced(rng):
    """t = 3: the largest 64-bit word (2^64 - 1 = 0 mod 3, beyond 2^64 - (2^64 mod 3))
    must be drawn again, not taken as U = 0."""
    w64, w32 = _rows(rng, R._DLAP, 4, 7)
    w64[:, 0] = np.uint64(2**64 - 1)
    _, _, python = R._vector(R._DLAP, w64, w32, 1, 3, 0)
    assert python.all()
    stream = _Recording(rng.stream("t", "fresh", 0))
    R._attempt(R._DLAP, R._Words(w64[0].tolist(), w32[0].tolist(), stream), 1, 3)
    assert stream.reads and stream.reads[0] == 8


class _Recording:
    def __init__(self, stream):
        self.stream, self.reads = stream, []

    def bytes(self, n):
        self.reads.append(n)
        return self.stream.bytes(n)


@pytest.mark.parametrize("short", SHORT)
@pytest.mark.parametrize("s,t", [(1, 1), (2, 1), (1, 4), (3, 7)])
def test_laplace_draws_match_the_pmf_when_attempts_continue_in_python(rng, short, s, t):
    z = R.discrete_laplace_rows(rng.stream("t", "fit", (s, t) + short), s, t, 60_000,
                                layout=R._Layout(*short, gaussian=False))
    scale = t / s
    support = np.arange(-int(40 * scale) - 5, int(40 * scale) + 6)
    assert chi_square_pvalue(z, support, discrete_laplace_pmf(support, scale)) > 1e-4


@pytest.mark.parametrize("short", [None, *SHORT])
@pytest.mark.parametrize("sigma2", [1, 4, 100, 2000])
def test_gaussian_draws_match_the_pmf_and_the_test_flags_a_wrong_variance(rng, short, sigma2):
    layout = R._DGAUSS if short is None else R._Layout(*short, gaussian=True)
    z = R.discrete_gaussian_rows(rng.stream("t", "gfit", (sigma2, *(short or ()))), sigma2, 60_000,
                                 layout=layout)
    support = np.arange(-int(12 * math.sqrt(sigma2)) - 2, int(12 * math.sqrt(sigma2)) + 3)
    assert chi_square_pvalue(z, support, discrete_gaussian_pmf(support, sigma2)) > 1e-4
    wrong = discrete_gaussian_pmf(support, sigma2 * 1.3)
    assert chi_square_pvalue(z, support, wrong / wrong.sum()) < 1e-6


def test_draws_are_a_pure_function_of_the_stream(rng):
    a = R.discrete_gaussian_rows(rng.stream("t", "det", 1), 50, 5000)
    b = R.discrete_gaussian_rows(rng.stream("t", "det", 1), 50, 5000)
    c = R.discrete_laplace_rows(rng.stream("t", "det", 2), 1, 9, 5000)
    assert np.array_equal(a, b) and a.size == c.size == 5000
    assert np.array_equal(c, R.discrete_laplace_rows(rng.stream("t", "det", 2), 1, 9, 5000))
    assert R.discrete_gaussian_rows(rng.stream("t", "det", 3), 50, 0).size == 0


def test_parameters_outside_the_words_range_are_refused(rng):
    with pytest.raises(ParameterError, match="scale"):
        R.discrete_laplace_rows(rng.stream("t", "p", 0), 1, 2**60, 10)
    with pytest.raises(ParameterError, match="lowest terms"):
        R.discrete_laplace_rows(rng.stream("t", "p", 0), 2, 4, 10)
    with pytest.raises(ParameterError, match="sigma2"):
        R.discrete_gaussian_rows(rng.stream("t", "p", 0), 10**9, 10)
