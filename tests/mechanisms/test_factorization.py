"""The matrix-factorization mechanisms (mechanisms/factorization.py): the factorizations
are what they claim (checked against materialised matrices), the streaming noise is
B Z, BLT beats the tree at equal rho, and the Gaussian calibration's exact divergence
stays within the accountant's delta."""
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import norm

from dpstream.mechanisms.accounting import zcdp_epsilon, zcdp_rho
from dpstream.mechanisms.factorization import (BLT, BLTFactorization, BLTNoise, SqrtToeplitz,
                                               TreeFactorization, TreeNoiseF, gaussian, max_error,
                                               mean_error, normal_from_words, optimal_blt, rational_blt,
                                               factorization, tree_levels)
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(b"factorization-tests-key-00000000")


def toeplitz(coefs: np.ndarray) -> np.ndarray:
    n = coefs.size
    i, j = np.indices((n, n))
    return np.where(i >= j, coefs[np.clip(i - j, 0, n - 1)], 0.0)


@pytest.mark.parametrize("n", [1, 2, 7, 64, 300])
def test_a_blt_is_a_factorization_of_the_prefix_sums_with_the_errors_it_reports(n):
    p = optimal_blt(n)
    f = BLTFactorization(p)
    C_inv = toeplitz(p.inverse_coefficients(n))
    C = np.linalg.inv(C_inv)
    A = np.tril(np.ones((n, n)))
    B = A @ C_inv
    assert np.allclose(B @ C, A)
    assert f.sensitivity_squared(n) == pytest.approx(max((C ** 2).sum(axis=0)), rel=1e-9)
    assert np.allclose(f.prefix_variance(n), (B ** 2).sum(axis=1))


def test_the_square_root_factorization_squares_to_the_prefix_sums():
    n = 50
    C = toeplitz(SqrtToeplitz.coefficients(n))
    assert np.allclose(C @ C, np.tril(np.ones((n, n))))


def test_the_streaming_noise_is_b_times_the_keyed_gaussians():
    """BLTNoise's prefix noise after each block equals (A C^{-1} Z)_t for the same keyed z;
    the tree's equals the sum of its decomposition's node noises."""
    n, dim, sigma = 40, 3, 1.7
    p = optimal_blt(n)
    stream = BLTNoise(RNG, "m", "test", 0, sigma, dim, p)
    Z = np.stack([sigma * gaussian(RNG, "m", "test", (0, t), dim) for t in range(1, n + 1)])
    B = np.tril(np.ones((n, n))) @ toeplitz(p.inverse_coefficients(n))
    state = None
    for t in range(1, n + 1):
        total, state = stream.prefix(t, state)
        assert np.allclose(total, (B @ Z)[t - 1])
    tree = TreeNoiseF(RNG, "m", "test", 0, sigma, dim)
    node = {t: sigma * gaussian(RNG, "m", "test", (0, t), dim) for t in range(1, n + 1)}
    for t in (1, 6, 13, 32, 40):
        parts = [(t >> l) << l for l in range(t.bit_length()) if (t >> l) & 1]
        assert np.allclose(tree.prefix(t)[0], sum(node[s] for s in parts))


@pytest.mark.parametrize("n", [100, 1_000, 10_000, 100_000])
def test_blt_has_lower_prefix_error_than_the_tree_at_equal_rho(n):
    """Max and mean squared prefix error per unit of sens^2 / (2 rho): the BLT within 10%
    of the square-root factorization (near optimal), and several times below the tree."""
    blt, tree, sqrt = BLTFactorization(optimal_blt(n)), TreeFactorization(), SqrtToeplitz()
    assert max_error(blt, n) <= 1.1 * max_error(sqrt, n)
    assert max_error(tree, n) >= 5 * max_error(blt, n)
    assert mean_error(tree, n) >= 3 * mean_error(blt, n)
    assert max_error(BLTFactorization(rational_blt(4)), n) >= 0.99 * max_error(blt, n)


def test_the_tree_factorization_counts_levels_and_decompositions():
    assert TreeFactorization().sensitivity_squared(16) == tree_levels(16) == 5
    assert TreeFactorization().prefix_variance(8).tolist() == [1, 1, 2, 1, 2, 2, 3, 1]


def gaussian_delta(epsilon: float, a: float) -> float:
    """Exact hockey-stick divergence of N(0, 1) against N(a, 1) at epsilon (Balle and Wang
    2018, Theorem 8): the privacy profile of a Gaussian mechanism whose worst shift is a
    noise standard deviations."""
    return float(norm.cdf(-epsilon / a + a / 2) - math.exp(epsilon) * norm.cdf(-epsilon / a - a / 2))


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0, 10.0])
@pytest.mark.parametrize("n", [4, 100, 5_000])
def test_the_worst_neighbours_exact_divergence_stays_within_the_claim(epsilon, n):
    """The release C g + Z of neighbouring streams differs by one block's shift of norm
    sens along the column C e_j: the outputs are Gaussians a = sens ||C e_1|| / sigma
    apart at worst, whose exact divergence at the claimed epsilon must not exceed delta.
    Calibrating for half the sensitivity (add/remove instead of replace-one) must exceed it."""
    delta, sens = 1e-6, 0.5
    f = BLTFactorization(optimal_blt(n))
    norm2 = f.sensitivity_squared(n)
    rho = zcdp_rho(epsilon, delta)
    sigma = sens * math.sqrt(norm2) / math.sqrt(2 * rho)
    assert zcdp_epsilon(sens * sens * norm2 / (2 * sigma * sigma), delta) <= epsilon
    assert gaussian_delta(epsilon, sens * math.sqrt(norm2) / sigma) <= delta
    half = sigma / 2
    assert gaussian_delta(epsilon, sens * math.sqrt(norm2) / half) > 10 * delta


def test_the_gaussian_transform_is_finite_and_symmetric_on_the_extreme_words():
    """Issue 42 item 5. Before, the top 53-bit word gave u = (2^53 - 1 + 1/2) / 2^53, which
    float64 rounds to 1, and z = +inf (probability 2^-53 a draw; DP-FTRL carried the inf
    into every later epoch). Now every word's uniform is exactly (k + 1/2) / 2^53, never
    0 or 1, and the draws are exactly symmetric: word k and word 2^53 - 1 - k give z, -z."""
    top = (1 << 53) - 1
    half = 1 << 52
    k = np.array([0, 1, 2, half - 2, half - 1, half, half + 1, top - 2, top - 1, top], dtype=np.uint64)
    z = normal_from_words(k)
    assert np.isfinite(z).all() and np.abs(z).max() < 8.3
    assert (z == -normal_from_words(np.uint64(top) - k)).all()            # exact symmetry
    assert (np.diff(z) > 0).all()                                          # monotone in k
    assert z[0] == ndtri(2.0 ** -54) and z[-1] == -ndtri(2.0 ** -54)
    # the uniforms the transform takes: (j + 1/2) / 2^53 for j = k or 2^53 - 1 - k < 2^52,
    # exactly representable, so strictly inside (0, 1/2]: no word maps to 0 or 1
    for j in (0, half - 1):
        u = (float(j) + 0.5) / float(1 << 53)
        assert Fraction(u) == Fraction(2 * j + 1, 1 << 54) and 0 < u < 0.5
    old = ndtri((k.astype(np.float64) + 0.5) / float(1 << 53))               # the old transform
    assert old[-1] == np.inf and (old[:5] == z[:5]).all()      # lower half: unchanged floats


def test_keyed_gaussians_are_standard_normal_and_finite():
    z = gaussian(RNG, "m", "test", (0, 1), 200_000)
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01


@pytest.mark.parametrize("n", [2, 3, 300, 4096, 65_536])
def test_the_closed_form_sensitivity_is_the_explicit_column_norm(n):
    """Issue 42 item 6: ||C e_1||^2 in closed form equals the sum over C's first column,
    computed here step by step from the BLT recursion (x_t = [t = 0] - omega . buf;
    buf <- theta buf + x_t)."""
    p = optimal_blt(n)
    theta, omega = np.asarray(p.theta), np.asarray(p.omega)
    buf, x = np.zeros(theta.size), np.empty(n)
    for t in range(n):
        x[t] = (t == 0) - omega @ buf
        buf = theta * buf + x[t]
    assert BLTFactorization(p).sensitivity_squared(n) == pytest.approx(float(x @ x), rel=1e-9)


def test_past_the_table_the_closed_form_is_the_sum_of_the_column_in_chunks():
    """n = 10^6 blocks (past the 2^17 the BLT table covers): the closed form against the
    column's powers of eigenvalues summed a chunk at a time (what the code did at once)."""
    n, p = 1_000_000, optimal_blt(1_000_000)
    theta, omega = np.asarray(p.theta), np.asarray(p.omega)
    M = np.diag(theta) - np.outer(np.ones_like(theta), omega)
    lam, V = np.linalg.eig(M)
    a = (-omega @ V) * np.linalg.solve(V, np.ones_like(theta))
    total = 1.0
    for start in range(0, n - 1, 1 << 16):
        t = np.arange(start, min(n - 1, start + (1 << 16)))
        x = ((lam[None, :] ** t[:, None]) @ a).real
        total += float(x @ x)
    assert BLTFactorization(p).sensitivity_squared(n) == pytest.approx(total, rel=1e-9)


def test_the_sensitivity_takes_constant_memory_in_the_number_of_blocks():
    """Before: 1.3 GB at 2 x 10^7 blocks (a dp_ftrl registration of horizon 10^9), 40 GB at
    10^9 (block 1), both computed on the worker's event loop at registration."""
    import tracemalloc
    f = BLTFactorization(optimal_blt(1 << 17))
    f.sensitivity_squared(10)                          # warm
    tracemalloc.start()
    try:
        values = [f.sensitivity_squared(n) for n in (10**6, 2 * 10**7, 10**9)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000 and all(math.isfinite(v) for v in values)
    assert values[0] == pytest.approx(values[2], rel=1e-9)     # the decays have converged


@pytest.mark.parametrize("n", [1, 7, 100, 5000, 200_000])
def test_one_prefix_variance_is_the_arrays_entry_in_constant_memory(n):
    """Before (issue 43), DP-FTRL's prior read ``prefix_variance(blocks)``: 8 bytes a
    block, a MemoryError at a 10^9-block model's first example."""
    for f in (factorization(BLT, n), TreeFactorization()):
        v = f.prefix_variance(n)
        for t in sorted({1, 2, n // 2, n} - {0}):
            if t <= n:
                assert f.prefix_variance_at(t) == pytest.approx(v[t - 1], rel=1e-10)
    assert factorization(BLT, 10 ** 9).prefix_variance_at(10 ** 9) > 0
