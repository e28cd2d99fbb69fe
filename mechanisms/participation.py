"""Sensitivity of a matrix-factorization release when one privacy unit (a person) takes
part in up to k blocks, and group privacy for the pieces where nothing better holds.
Pure numpy, no I/O.

The setting (mechanisms/factorization.py). Blocks 1..n bring vectors g_1, ..., g_n (the
rows of G, n x dim); the mechanism releases C G + Z, Z i.i.d. N(0, sigma^2) (or exact
discrete Gaussians, mechanisms/continual.py), and everything else is post-processing.
The neighbouring relation of a person with bound k (docs/privacy.md, "The privacy unit";
agents/units.py enforces the bound): two streams differ in the contents of all records of
one privacy ID, at the same positions, and at most k of that ID's records reach the
learner per epoch, at most one per block. (Blocks are so many arriving records, whether
they reach the learner or not; one that does not adds a zero vector to its block, the
same in both streams, since which records reach the learner is a function of the arrival
pattern.) So a
person changes at most k block vectors, in a set S of distinct blocks, |S| <= k, each
by D_j with ||D_j||_2 <= sens (the replace-one block sensitivity: one example's share
of its block).

Theorem (the sensitivity over k participations). Let X = C^T C and suppose X >= 0
elementwise. Then for every such person

    ||C (G - G')||_F^2 <= sens^2 * P_k,   P_k = max over S, |S| <= k, of 1_S^T X 1_S,

and the bound is attained (all D_j equal, of norm sens, on a maximising S).
Proof. G - G' = sum_{j in S} e_j D_j^T, so
||C (G - G')||_F^2 = sum_{i, j in S} (C e_i)^T (C e_j) <D_i, D_j> = sum_{i,j in S} X_ij <D_i, D_j>
<= sum_{i,j in S} X_ij ||D_i|| ||D_j||      (Cauchy-Schwarz on <D_i, D_j>, and X_ij >= 0)
<= sens^2 sum_{i,j in S} X_ij = sens^2 1_S^T X 1_S.
Without X >= 0 the same steps bound it by sens^2 sum_{i,j in S} |X_ij|. So the Gaussian
mechanism on C G is rho-zCDP for the person with rho = sens^2 P_k / (2 sigma^2) (Bun and
Steinke 2016, Prop. 1.6); for increments chosen adaptively (each block's gradients taken
at a model computed from earlier releases) the bound holds for every realisation, and
for lower-triangular C the adaptive release is as private as the non-adaptive one with
this sensitivity (Denisov et al. 2022, Thm 2.1, for one participation; for several,
Choquette-Choo, McMahan, Rush, Thakurta 2023, "Multi-Epoch Matrix Factorization
Mechanisms for Private Machine Learning", ICML, Sec. 2, which formalises adaptive streams
with multiple participations and defines the sensitivity as a maximum over the allowed
participation patterns). What we relied on from the literature, as jax-privacy's
``matrix_factorization/sensitivity.py`` states and implements it: that definition, and
the bound by the entries of X over a pattern, with |X_ij| where X has negative entries
(Choquette-Choo et al. 2023, "(Amplified) Banded Matrix Factorization", NeurIPS, Eq. (5);
their Algorithms 3 and 4 compute it for b-min-separated patterns, of which "at most k
blocks, at most one per block" is b = 1 with k participations). The proof above is
self-contained; the computation below is exact where theirs is an upper bound, because
the structure of C (Toeplitz and monotone, or a tree) pins down the maximising set.
P_1 = max_j X_jj = max_j ||C e_j||^2 is today's single-participation sensitivity
(``sensitivity_squared``).

Computing P_k exactly, per factorization:

(a) Lower-triangular Toeplitz C (BLT, the square-root factorization) with coefficients
    c_0, ..., c_{n-1} (C_tj = c_{t-j} for t >= j; 0-based). Then
    X_ij = sum_{s=0}^{n-1-m} c_s c_{s+d},  d = |i - j|, m = max(i, j).
    If c_0 >= c_1 >= ... >= c_{n-1} >= 0, X_ij is nonincreasing in d (termwise: c_{s+d} >=
    c_{s+d+1}) and in m (fewer nonnegative terms), jointly: X(d', m') >= X(d, m) for d' <= d,
    m' <= m. Claim: the packed set {0, ..., k-1} maximises 1_S^T X 1_S over |S| <= k.
    Proof: adding a block adds nonnegative entries, so take |S| = k, S = {j_1 < ... < j_k},
    and map j_a -> a - 1. Since the j are distinct and sorted, j_b - j_a >= b - a and
    j_a >= a - 1, so every pair (a, b) has d' = |a - b| <= |j_a - j_b| and
    m' = max(a, b) - 1 <= max(j_a, j_b): each of the k^2 entries of the packed sum is at
    least its counterpart. Then 1_S^T X 1_S = ||C 1_S||^2 with
    (C 1_S)_t = c_{t-k+1} + ... + c_t (indices below 0 dropped): the window sums W_t, so
    P_k = sum_t W_t^2, O(n) (``toeplitz_participation_norm2``).
    When c is not monotone (the tabulated BLTs for 2,048 and 4,096 blocks, at their own
    n, rise by up to 8e-5 relative a step over runs of 379 and 1,586 coefficients from
    index 1,668 and 2,509: real, not rounding) or has a negative entry, the envelope
    c~_s = max_{t >= s} |c_t| is nonnegative, nonincreasing and >= |c| elementwise, so
    |X_ij| <= X~_ij for the Toeplitz C~ it defines, and P_k(X) <= sum over S of |X| <=
    P_k(X~) = the packed sum for c~: a proven upper bound, equal to P_k when c is
    monotone. Where it applies (1,670 to 2,048 and 2,511 to 4,096 blocks, the n those two
    tables serve past the first rise) its price is up to 1% of P_k (n = 4,096,
    k = 1,000), 0.1% at k = 2; the other tables are monotone at their own n
    (tests/mechanisms/test_participation.py).
(b) The binary tree (``TreeFactorization``, and continual Winnow's tree,
    mechanisms/continual.py): C has one 0/1 row per node of the complete binary tree over
    2^(levels-1) leaves, the columns its first n leaves. The released nodes (those ending
    at a block <= n) are a subset of its rows, so releasing them is post-processing of
    this C's release, and its P_1 is today's ``levels``. X_ij counts the nodes holding
    both leaves, so 1_S^T X 1_S = sum over nodes v of |S cap v|^2, and the maximum over
    |S| <= k is a dynamic program over the tree: best(v, j) = j^2 + max_{a + b = j}
    best(left, a) + best(right, b). Subtrees wholly inside the first n leaves are alike
    level by level, so there are at most two distinct subproblems a level:
    O(levels k^2), exact in integers (``tree_participation_norm2``).

Group privacy (``group_privacy``): an (eps, delta)-DP mechanism is
(k eps, delta (e^{k eps} - 1)/(e^eps - 1))-DP for inputs that differ in k examples
(induction over a path of k neighbours: P[M(x_0) in E] <= e^eps P[M(x_1) in E] + delta
<= ... <= e^{k eps} P[M(x_k) in E] + delta sum_{i<k} e^{i eps}). For a pure-DP piece
(delta = 0) it is exact and what the winnow and decision-list kinds use; with delta > 0
it is the fallback where no sharper person-level analysis holds (the decision list's
set-cover analysis).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .accounting import PrivacyCost
from .errors import ParameterError

MAX_CONTRIBUTIONS = 1000            # k: the spec's bound on a person's examples per epoch
MAX_EXPLICIT_BLOCKS = 1 << 22       # beyond, Toeplitz factorizations use k^2 P_1 (below)
_UNIT_ROUNDOFF = 2.0 ** -53


def _check(n: int, k: int) -> None:
    if not (isinstance(n, int) and n >= 1):
        raise ParameterError("n", n, "an integer >= 1 (blocks per epoch)")
    if not (isinstance(k, int) and 1 <= k <= MAX_CONTRIBUTIONS):
        raise ParameterError("k", k, f"an integer in [1, {MAX_CONTRIBUTIONS}] (contributions per epoch)")


@lru_cache(maxsize=256)
def participation_norm2(factorization, n: int, k: int) -> float:
    """P_k: the largest 1_S^T X 1_S over sets S of at most k distinct blocks among n,
    X = C^T C (module docstring), for the factorizations of mechanisms/factorization.py.

    * k = 1 (or n = 1): the factorization's ``sensitivity_squared(n)``, the same float as
      the single-participation calibration has always used.
    * the binary tree: the exact dynamic program (b).
    * a Toeplitz factorization (``strategy_coefficients``): the packed sum (a) for the
      monotone envelope of |c| (exact when c is nonnegative and nonincreasing, a proven
      upper bound otherwise), raised by its floating-point error bound (the window sums
      and the squares' sum are sums of nonnegative floats: relative error at most
      (n + 2k + 2) 2^-53, doubled here), so the value returned is at least the exact sum
      for the coefficients given. Above MAX_EXPLICIT_BLOCKS blocks (a registration may
      ask for 10^9; the coefficients would take 8 bytes each) the Cauchy-Schwarz bound
      ||sum_{j in S} C e_j||^2 <= (sum_j ||C e_j||)^2 <= k^2 P_1, loose by about
      ln(k) / ln(n) there.

    Deterministic to the bit on every CPU (sums are numpy's own loops, no BLAS): a
    replay on another machine must calibrate the same noise.

    >>> from dpstream.mechanisms.factorization import TreeFactorization
    >>> participation_norm2(TreeFactorization(), 8, 1), participation_norm2(TreeFactorization(), 8, 2)
    (4.0, 14.0)
    """
    _check(n, k)
    k = min(k, n)
    if k == 1:
        return float(factorization.sensitivity_squared(n))
    if getattr(factorization, "name", None) == "tree":
        return float(tree_participation_norm2(n, k))
    coefficients = getattr(factorization, "strategy_coefficients", None)
    if coefficients is None:
        raise ParameterError("factorization", getattr(factorization, "name", factorization),
                             "the binary tree or a Toeplitz factorization (strategy_coefficients)")
    if n > MAX_EXPLICIT_BLOCKS:
        return float(k * k) * float(factorization.sensitivity_squared(n))
    return toeplitz_participation_norm2(coefficients(n), k)


def monotone_envelope(c) -> np.ndarray:
    """c~_s = max_{t >= s} |c_t|: the least nonincreasing sequence >= |c| (module
    docstring, (a))."""
    a = np.abs(np.asarray(c, dtype=np.float64))
    return np.maximum.accumulate(a[::-1])[::-1]


def is_monotone(c) -> bool:
    """Whether c_0 >= c_1 >= ... >= 0 (then the packed sum is exactly P_k)."""
    c = np.asarray(c, dtype=np.float64)
    return bool(np.all(c >= 0) and np.all(np.diff(c) <= 0))


def window_sums(c: np.ndarray, k: int) -> np.ndarray:
    """W_t = c_{max(0, t-k+1)} + ... + c_t for t < len(c), for nonnegative c, without
    cancellation: the sequence is cut into chunks of k, and each window is a suffix of one
    chunk plus a prefix of the next (both cumulative sums of at most k nonnegative
    terms), never a difference of two long prefix sums (whose rounding, ~t 2^-53 of the
    prefix, would swamp a small window at t ~ 10^6)."""
    c = np.asarray(c, dtype=np.float64)
    n = c.size
    chunks = np.concatenate([c, np.zeros((-n) % k)]).reshape(-1, k)
    pre = np.cumsum(chunks, axis=1)
    suf = np.cumsum(chunks[:, ::-1], axis=1)[:, ::-1]      # suf[a, r] = chunk a from r on
    t = np.arange(n)
    s = t - k + 1                                          # the window's first index
    out = np.empty(n)
    head = s <= 0                                          # windows inside chunk 0
    out[head] = pre[0, t[head]]
    a, r = np.divmod(s[~head], k)
    aligned = r == 0
    out[~head] = np.where(aligned, pre[a, k - 1],
                          suf[a, r] + pre[np.minimum(a + 1, chunks.shape[0] - 1), r - 1])
    return out


def toeplitz_participation_norm2(c, k: int) -> float:
    """P_k for the lower-triangular Toeplitz C with first column c (exact for nonnegative
    nonincreasing c, else for its envelope: module docstring, (a)), rounded up by the
    floating-point error bound of ``participation_norm2``."""
    env = monotone_envelope(c)
    n = env.size
    k = min(int(k), n)
    w = window_sums(env, k)
    value = float(np.einsum("i,i->", w, w))
    return value * (1.0 + 2.0 * (n + 2 * k + 2) * _UNIT_ROUNDOFF)


def tree_participation_norm2(n: int, k: int) -> int:
    """max over S of at most k of the first n leaves of sum over the complete binary
    tree's nodes v (levels = ceil(log2 n) + 1) of |S cap v|^2: the dynamic program of the
    module docstring, (b), in exact integers."""
    _check(n, k)
    k = min(k, n)
    top = (n - 1).bit_length()                     # the root's level: 2^top >= n leaves
    memo: dict[tuple[int, int], np.ndarray] = {}

    def best(level: int, available: int) -> np.ndarray:
        """best[j]: the most a subtree of 2^level leaves, the first ``available`` usable,
        gives j chosen leaves, for j <= min(k, available)."""
        key = (level, available)
        if key in memo:
            return memo[key]
        if available == 0:
            out = np.zeros(1, dtype=np.int64)
        elif level == 0:
            out = np.array([0, 1], dtype=np.int64)
        else:
            half = 1 << (level - 1)
            below = _max_plus(best(level - 1, min(available, half)),
                              best(level - 1, max(0, available - half)), k)
            j = np.arange(below.size, dtype=np.int64)
            out = below + j * j
        memo[key] = out
        return out

    return int(best(top, n).max())


def _max_plus(f: np.ndarray, g: np.ndarray, k: int) -> np.ndarray:
    """h[j] = max_{a + b = j} f[a] + g[b] for j <= min(k, len f + len g - 2)."""
    size = min(k, f.size + g.size - 2) + 1
    h = np.full(size, np.iinfo(np.int64).min // 2, dtype=np.int64)
    if f.size > g.size:
        f, g = g, f
    for a in range(min(f.size, size)):
        m = min(g.size, size - a)
        np.maximum(h[a:a + m], f[a] + g[:m], out=h[a:a + m])
    return h


# ------------------------------------------------------------------ group privacy
def group_privacy(epsilon: float, delta: float, k: int) -> PrivacyCost:
    """(k eps, delta (e^{k eps} - 1) / (e^eps - 1)) for an (eps, delta)-DP mechanism on
    inputs that differ in k examples (module docstring); delta k when eps = 0, capped at 1.
    Exact for pure DP (delta = 0); with delta > 0, the fallback where no sharper
    person-level analysis holds.

    >>> group_privacy(0.5, 0.0, 4)
    PrivacyCost(epsilon=2.0, delta=0.0)
    """
    _check_group(epsilon, delta, k)
    if delta == 0 or k == 1:
        return PrivacyCost(k * epsilon, delta)
    if epsilon == 0:
        return PrivacyCost(0.0, min(1.0, k * delta))
    log_ratio = _log_expm1(k * epsilon) - _log_expm1(epsilon)
    return PrivacyCost(k * epsilon, min(1.0, delta * math.exp(min(log_ratio, 700.0))))


def group_member_budget(epsilon: float, delta: float, k: int) -> PrivacyCost:
    """The per-example (eps_1, delta_1) whose ``group_privacy`` over k examples is exactly
    (epsilon, delta): eps_1 = eps / k and delta_1 = delta (e^{eps_1} - 1) / (e^eps - 1)."""
    _check_group(epsilon, delta, k)
    if epsilon == 0:
        return PrivacyCost(0.0, delta / k)
    eps1 = epsilon / k
    if delta == 0 or k == 1:
        return PrivacyCost(eps1, delta)
    return PrivacyCost(eps1, delta * math.exp(_log_expm1(eps1) - _log_expm1(epsilon)))


def over_epochs(epsilon: float, delta: float, epochs: int, rho: float | None = None) -> PrivacyCost:
    """A person's guarantee over the model's life when their examples reach the learner in
    at most ``epochs`` epochs, each (epsilon, delta)-DP for them (agents/units.py caps the
    epochs). Epochs are disjoint in examples, not in people, so they compose:

    * with ``rho`` (each epoch rho-zCDP for the person, the epoch's (epsilon, delta) being
      its conversion at ``delta``): zCDP composes additively (Bun and Steinke 2016, Lemma
      2.3), so ``epochs`` rho converted at the same delta (dp-accounting, ``zcdp_epsilon``);
    * otherwise basic composition, (epochs epsilon, epochs delta) (Dwork and Roth 2014,
      Theorem 3.16), which holds for adaptively chosen mechanisms.

    >>> over_epochs(1.0, 1e-6, 3)
    PrivacyCost(epsilon=3.0, delta=3e-06)
    """
    if not (isinstance(epochs, int) and epochs >= 1):
        raise ParameterError("epochs", epochs, "an integer >= 1")
    if epochs == 1:
        return PrivacyCost(epsilon, delta)
    if rho is not None:
        from .accounting import zcdp_epsilon
        return PrivacyCost(zcdp_epsilon(epochs * rho, delta), delta)
    return PrivacyCost(epochs * epsilon, min(1.0, epochs * delta))


def _log_expm1(x: float) -> float:
    """ln(e^x - 1) for x > 0, without overflow."""
    return x + math.log1p(-math.exp(-x)) if x > 1 else math.log(math.expm1(x))


def _check_group(epsilon: float, delta: float, k: int) -> None:
    if not (epsilon >= 0 and math.isfinite(epsilon)):
        raise ParameterError("epsilon", epsilon, "a finite number >= 0")
    if not 0 <= delta <= 1:
        raise ParameterError("delta", delta, "in [0, 1]")
    if not (isinstance(k, int) and k >= 1):
        raise ParameterError("k", k, "an integer >= 1 (examples per group)")
