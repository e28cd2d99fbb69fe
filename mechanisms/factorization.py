"""Continual release of prefix sums by matrix factorization: the binary tree and Buffered
Linear Toeplitz (BLT) factorizations, as one interchangeable piece with Gaussian noise.

The problem. A stream of n blocks brings vectors g_1, ..., g_n in R^dim (a block's sum of
clipped gradients, or of Winnow's increments); after block t closes, release an estimate
of the prefix sum S_t = g_1 + ... + g_t. With A the n x n lower-triangular all-ones
matrix, the prefix sums are A g.

The mechanism (Denisov, McMahan, Rush, Smith, Thakurta 2022; Choquette-Choo et al. 2023;
the "matrix mechanism"). Factor A = B C with C lower-triangular and release
B (C g + Z) = A g + B Z, Z i.i.d. N(0, sigma^2) per entry. Only C g + Z touches the data;
B is post-processing. Which factorization is chosen changes only the noise B Z.

Privacy (single participation, replace-one neighbours), the Gaussian mechanism on C g:
neighbouring streams differ in one example, so in one block j, whose vector changes by
Delta with ||Delta||_2 <= sens (2 x clip norm when an example adds one clipped vector:
remove one, add another). Then C g changes by the column C e_j times Delta, of Frobenius
norm ||C e_j||_2 * ||Delta||_2 <= max_j ||C e_j||_2 * sens. The Gaussian mechanism with that
sensitivity is rho-zCDP with rho = (max_j ||C e_j|| * sens)^2 / (2 sigma^2) (Bun and Steinke
2016, Proposition 1.6). The increments may be chosen adaptively (each block's gradients
are taken at a model computed from earlier releases): for lower-triangular C the
adaptive release is exactly as private as the non-adaptive one (Denisov et al. 2022,
Theorem 2.1). zCDP converts to (epsilon, delta) with dp-accounting
(``accounting.zcdp_epsilon``). For the Toeplitz C used here the first column is the
longest, so max_j ||C e_j|| = ||C e_1|| (``sensitivity_squared``).

Error. The noise on the released prefix t is (B Z)_t: per coordinate, variance
sigma^2 * ||B_t||^2. ``prefix_variance`` gives ||B_t||^2 for every t; the max and mean over
t, times the sensitivity, are the standard measures (``max_error``, ``mean_error``) at
equal rho.

The factorizations:
* ``Tree``: the binary tree (Dwork et al. 2010; Chan, Shi, Song 2011): C has one row per
  tree node (a block lies in ``levels`` nodes: ||C e_j||^2 = levels), B sums the
  ``popcount(t)`` nodes of t's binary decomposition.
* ``BLT``: C^{-1} is a lower-triangular Toeplitz matrix with coefficients c_0 = 1,
  c_k = sum_i omega_i theta_i^(k-1) (Dvijotham, McMahan, Pillutla, Steinke, Thakurta 2024;
  McMahan, Xu, Zhang 2024): the noise added to block t, (C^{-1} Z)_t, is computed in
  O(buffers x dim) with one buffer per theta_i (``BLTNoise``), so B Z = A C^{-1} Z is its
  running sum. C = (C^{-1})^{-1} is Toeplitz as well; the norm of its first column, the
  sensitivity, is a sum over powers of the buffers' recursion, summed by doubling
  (``_strategy_norm2``: O(log n)). The parameters are
  optimised here for the number of blocks n (``optimal_blt``: minimise the max error with
  scipy from the rational approximation of sqrt(1 - x) of Dvijotham et al. 2024, Prop. 4.5
  as jax-privacy's ``from_rational_approx_to_sqrt_x`` builds it), because the best BLT
  depends on n.
* ``SqrtToeplitz`` (Fichtenberger, Henzinger, Upadhyay 2023): C = C^... = the square root of
  A, coefficients f_0 = 1, f_k = (1 - 1/(2k)) f_{k-1}; near optimal, but its noise takes
  O(t x dim) per block; kept for the error comparison (bench/blt_table.py), which is
  what BLT approximates with a few buffers.

Noise is continuous Gaussian (``gaussian``), drawn from the keyed stream: documented
float caveat. The privacy proof is for real-valued Gaussian noise; the float64
implementation of N(0, 1) (inverse CDF of a 53-bit keyed uniform) is an approximation of
it. Floating-point attacks on DP (Mironov 2012 for the Laplace mechanism; Jin et al. 2022
for Gaussian samplers) need the noisy floats themselves; dpstream never publishes them:
only labels (signs of inner products with the released model) and version counters leave
the process. The binary tree of continual Winnow keeps its exact integer noise
(mechanisms/continual.py).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from .errors import ParameterError
from .randomness import KeyedRandomness

TREE, BLT = "tree", "blt"


_HALF = 1 << 52


def gaussian(rng: KeyedRandomness, model_id: str, purpose: str, counter, size: int) -> np.ndarray:
    """``size`` standard normal floats from the keyed stream (model, purpose, counter).

    Each is Phi^-1(u) of the uniform u = (k + 1/2) / 2^53 of a 53-bit word k: u lies in
    [2^-54, 1 - 2^-54], never 0 or 1, so |z| < 8.3 and z is finite. (k + 1/2) is a
    float64 only for k < 2^52 (it needs 54 bits above): beyond, float64 rounded it to an
    even integer, and the top word gave u = 1 and z = +inf (probability 2^-53 a draw).
    So the upper half uses the symmetry Phi^-1(u) = -Phi^-1(1 - u), whose
    1 - u = (2^53 - 1 - k + 1/2) / 2^53 is exact: every word gets its own u, and the
    draws are exactly symmetric. (Words below 2^52 give the same floats as before.)"""
    k = rng.stream(model_id, purpose, counter).uint64(size) >> np.uint64(11)
    return normal_from_words(k)


def normal_from_words(k: np.ndarray) -> np.ndarray:
    """Phi^-1((k + 1/2) / 2^53) for 53-bit words k (uint64 below 2^53), exactly as
    ``gaussian`` defines it."""
    upper = k >= np.uint64(_HALF)
    j = np.where(upper, np.uint64(2 * _HALF - 1) - k, k)          # j < 2^52: j + 1/2 exact
    z = ndtri((j.astype(np.float64) + 0.5) / float(2 * _HALF))
    return np.where(upper, -z, z)


# ------------------------------------------------------------------ the binary tree
def tree_levels(n: int) -> int:
    """Nodes a block lies in: ceil(log2 n) + 1."""
    if n < 1:
        raise ParameterError("n", n, ">= 1")
    return (n - 1).bit_length() + 1


@dataclass(frozen=True)
class TreeFactorization:
    name = TREE

    def sensitivity_squared(self, n: int) -> float:
        return float(tree_levels(n))

    def prefix_variance(self, n: int) -> np.ndarray:
        """||B_t||^2 for t = 1..n: the nodes in t's binary decomposition."""
        t = np.arange(1, n + 1)
        return np.array([bin(int(v)).count("1") for v in t], dtype=float)

    @staticmethod
    def prefix_variance_at(t: int) -> float:
        """||B_t||^2 for one t >= 1 (``prefix_variance(n)[t - 1]``), in O(1) memory."""
        return float(bin(int(t)).count("1"))


# ------------------------------------------------------------------ BLT
@dataclass(frozen=True)
class BLTParams:
    """C^{-1} = lower-triangular Toeplitz with c_0 = 1, c_k = sum_i omega_i theta_i^(k-1)."""
    theta: tuple[float, ...]
    omega: tuple[float, ...]

    def inverse_coefficients(self, n: int) -> np.ndarray:
        """c_0, ..., c_{n-1} of C^{-1}."""
        th, om = np.asarray(self.theta), np.asarray(self.omega)
        k = np.arange(n - 1)[:, None]
        return np.concatenate([[1.0], (om * th ** k).sum(axis=1)])


def _strategy_norm2(p: BLTParams, n: int) -> float:
    """||C e_1||^2 = sum_{t < n} x_t^2 for the first column x of C = (C^{-1})^{-1}, in
    O(b^3 log n) time and O(b^2) memory for b buffers (a registration may ask for 10^9
    blocks; the column itself, which this computed first, took 1.3 GB at 2 x 10^7 blocks).

    x solves C^{-1} x = e_1. With the BLT buffers (x_t = [t = 0] - omega . buf;
    buf <- theta * buf + x_t) the buffers after step 0 are s_1 = 1 and then
    s_{t+1} = M s_t with M = diag(theta) - 1 omega^T, so x_t = -omega^T M^(t-1) 1 for
    t >= 1, and sum_{t=1}^{n-1} x_t^2 = omega^T S omega with
    S = sum_{k < n-1} M^k 1 1^T (M^k)^T, summed by doubling: the sum over 2c powers is
    the sum over c plus M^c (that sum) (M^c)^T, and the binary digits of n - 1 pick the
    blocks. Every product is ``np.einsum`` (learners/linalg.py's reason): the same bits on
    every CPU. Before, S came from M's eigen-decomposition (LAPACK), whose last bits
    depend on the BLAS kernel the CPU selects: sigma and eta differed in their last bits,
    so every noise value did, and a DP-FTRL run on one machine failed ``replay`` on
    another (found with OPENBLAS_CORETYPE; tests/mechanisms/test_factorization.py runs the
    kernels). Agrees with the explicit sum to ~1e-13 relative on the tabulated BLTs
    (the same test file). inf for an unstable C (|lam| > 1 and n so large that the sum
    overflows)."""
    th, om = np.asarray(p.theta, dtype=float), np.asarray(p.omega, dtype=float)
    M = np.diag(th) - np.outer(np.ones_like(th), om)
    u = np.ones_like(th)

    def mul(A, B):
        return np.einsum("ij,jk->ik", A, B)

    with np.errstate(all="ignore"):
        S_acc, P_acc = np.zeros_like(M), np.eye(len(th))     # the powers summed so far, M^(their count)
        S_pow, P_pow = np.outer(u, u), M                      # a block of 2^j powers, M^(2^j)
        left = n - 1
        while left:
            if left & 1:
                S_acc = S_acc + mul(mul(P_acc, S_pow), P_acc.T)
                P_acc = mul(P_acc, P_pow)
            left >>= 1
            if left:
                S_pow = S_pow + mul(mul(P_pow, S_pow), P_pow.T)
                P_pow = mul(P_pow, P_pow)
        value = 1.0 + float(np.einsum("i,ij,j->", om, S_acc, om))
    return value if math.isfinite(value) else math.inf


COEF_BLOCK = 1024      # BLT strategy coefficients computed per block (``strategy_coefficients``)


@dataclass(frozen=True)
class BLTFactorization:
    params: BLTParams
    name = BLT

    def sensitivity_squared(self, n: int) -> float:
        """max_j ||C e_j||^2 = ||C e_1||^2 (module docstring), in O(1) memory."""
        if n < 1:
            raise ParameterError("n", n, ">= 1")
        return _strategy_norm2(self.params, n)

    def strategy_coefficients(self, n: int) -> np.ndarray:
        """x_0, ..., x_{n-1}: the first column of C = (C^{-1})^{-1}, a lower-triangular
        Toeplitz matrix (``_strategy_norm2``: x_0 = 1, x_t = -omega^T M^(t-1) 1). For the
        person-level sensitivity (mechanisms/participation.py), which needs them all.
        Computed a block of COEF_BLOCK at a time: the first block by the recursion, each
        next one as M^COEF_BLOCK times the last (products by ``np.einsum``: the same bits
        on every CPU, ``_strategy_norm2``'s reason). Agrees with the inverse of the
        materialised C^{-1} to ~1e-14 (tests/mechanisms/test_participation.py)."""
        if n < 1:
            raise ParameterError("n", n, ">= 1")
        th, om = np.asarray(self.params.theta, dtype=float), np.asarray(self.params.omega, dtype=float)
        M = np.diag(th) - np.outer(np.ones_like(th), om)
        width = min(COEF_BLOCK, max(1, n - 1))
        states = np.empty((th.size, width))          # s_1, ..., s_width; s_{t+1} = M s_t
        states[:, 0] = 1.0
        for t in range(1, width):
            states[:, t] = np.einsum("ij,j->i", M, states[:, t - 1])
        step = np.eye(th.size)                        # M^width, by squaring
        power, e = M, width
        while e:
            if e & 1:
                step = np.einsum("ij,jk->ik", step, power)
            power, e = np.einsum("ij,jk->ik", power, power), e >> 1
        out = np.empty(n)
        out[0] = 1.0
        t = 1
        with np.errstate(all="ignore"):
            while t < n:
                take = min(width, n - t)
                out[t:t + take] = -np.einsum("i,it->t", om, states[:, :take])
                t += take
                if t < n:
                    states = np.einsum("ij,jt->it", step, states)
        return out

    def prefix_variance(self, n: int) -> np.ndarray:
        """||B_t||^2 = sum_{j < t} (c_0 + ... + c_j)^2, B = A C^{-1}."""
        G = np.cumsum(self.params.inverse_coefficients(n))
        return np.cumsum(G * G)

    def prefix_variance_at(self, t: int) -> float:
        """||B_t||^2 for one t >= 1 (``prefix_variance(n)[t - 1]``) in closed form, O(1) in t:
        the array above took 8 bytes a block, 8 GB at the 10^9 blocks a registration may
        ask for (issue 43: a MemoryError at a dp_ftrl model's first example). With
        w_i = omega_i / (1 - theta_i) and A = 1 + sum w_i, the prefix sums of C^{-1}'s
        coefficients are G_j = A - sum_i w_i theta_i^j, so sum_{j < t} G_j^2 =
        A^2 t - 2 A sum_i w_i g(theta_i) + sum_{i,k} w_i w_k g(theta_i theta_k), with the
        geometric sum g(q) = sum_{j < t} q^j = expm1(t log q) / expm1(log q) (expm1 keeps
        the digits when q is near 1, as the decays of long horizons are). Agrees with the
        array to ~1e-12 relative
        (tests/mechanisms/test_factorization.py)."""
        if t < 1:
            raise ParameterError("t", t, ">= 1")
        th, om = np.asarray(self.params.theta), np.asarray(self.params.omega)
        w = om / (1.0 - th)
        a = 1.0 + float(w.sum())

        def g(q):
            q = np.asarray(q, dtype=float)
            with np.errstate(all="ignore"):
                log_q = np.log(q)
                return np.where(log_q == 0, float(t), np.expm1(t * log_q) / np.expm1(log_q))

        return float(a * a * t - 2 * a * np.sum(w * g(th)) + np.sum(np.outer(w, w) * g(np.outer(th, th))))


@dataclass(frozen=True)
class SqrtToeplitz:
    """The square-root factorization C = B = A^(1/2) (comparison only: O(t) noise per block)."""
    name = "sqrt_toeplitz"

    @staticmethod
    def coefficients(n: int) -> np.ndarray:
        f = np.empty(n)
        f[0] = 1.0
        for k in range(1, n):
            f[k] = f[k - 1] * (1.0 - 1.0 / (2 * k))
        return f

    def sensitivity_squared(self, n: int) -> float:
        f = self.coefficients(n)
        return float(f @ f)

    def strategy_coefficients(self, n: int) -> np.ndarray:
        """C's first column: C = A^(1/2) is its own B."""
        return self.coefficients(n)

    def prefix_variance(self, n: int) -> np.ndarray:
        f = self.coefficients(n)
        return np.cumsum(f * f)


def max_error(factorization, n: int) -> float:
    """max_t ||B_t||^2 * max_j ||C e_j||^2: the worst prefix's noise variance per unit of
    sens^2 / (2 rho)."""
    return float(factorization.prefix_variance(n).max() * factorization.sensitivity_squared(n))


def mean_error(factorization, n: int) -> float:
    return float(factorization.prefix_variance(n).mean() * factorization.sensitivity_squared(n))


def rational_blt(buffers: int) -> BLTParams:
    """C^{-1} from the rational approximation of sqrt(1 - x) (Dvijotham et al. 2024, Prop.
    4.5, with jax-privacy's defaults: step h = 1.6 pi / sqrt(2 (d1 + 1)), shift -1)."""
    d1 = (buffers + 1) // 2
    h = 1.6 * math.pi / math.sqrt(2 * (d1 + 1))
    ks = np.arange(-d1 + 1, buffers - d1 + 1) - 1
    theta = 1 / (1 + np.exp(2 * h * ks))
    omega = -(theta ** 2) * np.exp(3 * h * ks)
    omega /= np.sum(np.exp(h * ks) * theta)
    return BLTParams(tuple(map(float, theta)), tuple(map(float, omega)))


BUFFERS = 4
TABLE = Path(__file__).with_name("blt_table.json")    # bench/blt_table.py writes it
TABLE_MAX = 1 << 17


def optimise_blt(n: int, buffers: int = BUFFERS) -> BLTParams:
    """BLT parameters for n blocks minimising ``max_error``: L-BFGS from ``rational_blt``,
    decays kept in (0, 1) by a logistic map. Deterministic; seconds at n = 10^4, ~20 s at
    10^5, so the worker reads them from a table (``optimal_blt``)."""
    from scipy.optimize import minimize
    start = rational_blt(buffers)
    x0 = np.concatenate([np.log(np.asarray(start.theta) / (1 - np.asarray(start.theta))), start.omega])

    def unpack(x):
        th = 1 / (1 + np.exp(-np.clip(x[:buffers], -40, 40)))
        return BLTParams(tuple(map(float, th)), tuple(map(float, x[buffers:])))

    def loss(x):
        value = max_error(BLTFactorization(unpack(x)), n)
        return math.log(value) if math.isfinite(value) and value > 0 else 1e6

    p = unpack(minimize(loss, x0, method="L-BFGS-B", options={"maxiter": 300}).x)
    return p if max_error(BLTFactorization(p), n) < max_error(BLTFactorization(start), n) else start


@lru_cache(maxsize=1)
def _table() -> dict[int, BLTParams]:
    raw = json.loads(TABLE.read_text())
    return {int(n): BLTParams(tuple(v["theta"]), tuple(v["omega"])) for n, v in raw.items()}


def optimal_blt(n: int) -> BLTParams:
    """The tabulated BLT for the smallest power of two >= n blocks (at most 2^17): any BLT
    is a valid factorization for any n, so one optimised for a little more than n serves
    n, and its sensitivity and error are then computed for n exactly (``BLTFactorization``)."""
    if n < 1:
        raise ParameterError("n", n, ">= 1")
    table = _table()
    return table[min(TABLE_MAX, max(2, 1 << (n - 1).bit_length()))]


def factorization(name: str, n: int):
    """The factorization called ``name`` for n blocks."""
    if name == TREE:
        return TreeFactorization()
    if name == BLT:
        return BLTFactorization(optimal_blt(n))
    raise ParameterError("mechanism", name, f"'{TREE}' or '{BLT}'")


# ------------------------------------------------------------------ streaming noise
class TreeNoiseF:
    """The tree's prefix noise, stateless: node t's noise (t: the block where the node
    closes) is sigma * N(0, I) from the keyed stream (model, purpose, (epoch, t)); the
    prefix of blocks 1..t sums the nodes of t's binary decomposition."""

    def __init__(self, rng, model_id: str, purpose: str, epoch: int, sigma: float, dim: int):
        self.rng, self.model_id, self.purpose, self.epoch = rng, model_id, purpose, epoch
        self.sigma, self.dim = sigma, dim

    def prefix(self, t: int, state=None):
        """(noise on the prefix of blocks 1..t, state: None)."""
        out = np.zeros(self.dim)
        for l in range(t.bit_length()):
            if (t >> l) & 1:
                node = (t >> l) << l
                out += gaussian(self.rng, self.model_id, self.purpose, (self.epoch, node), self.dim)
        return self.sigma * out, None


class BLTNoise:
    """The BLT's prefix noise: after block t, N_t = N_{t-1} + (C^{-1} Z)_t with
    (C^{-1} Z)_t = z_t + sum_i omega_i buf_i and buf_i <- theta_i buf_i + z_t (a BLT's
    streaming multiplication), z_t = sigma * N(0, I) keyed by (model, purpose, (epoch, t)).
    State (buffers and N_{t-1}) is a pair of arrays the caller keeps."""

    def __init__(self, rng, model_id: str, purpose: str, epoch: int, sigma: float, dim: int,
                 params: BLTParams):
        self.rng, self.model_id, self.purpose, self.epoch = rng, model_id, purpose, epoch
        self.sigma, self.dim = sigma, dim
        self.theta, self.omega = np.asarray(params.theta), np.asarray(params.omega)

    def initial(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((self.theta.size, self.dim)), np.zeros(self.dim)

    def prefix(self, t: int, state):
        """(noise on the prefix of blocks 1..t, the state after block t), from the state
        after block t - 1."""
        bufs, total = state if state is not None else self.initial()
        z = self.sigma * gaussian(self.rng, self.model_id, self.purpose, (self.epoch, t), self.dim)
        total = total + z + np.einsum("b,bd->d", self.omega, bufs)     # no BLAS: ``_strategy_norm2``
        bufs = self.theta[:, None] * bufs + z
        return total, (bufs, total)
