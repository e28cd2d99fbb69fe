"""Exact samplers on the integers (Canonne, Kamath, Steinke 2020, "The Discrete
Gaussian for Differential Privacy", Algorithms 1-3).

Every sampler consumes only exact uniform integers from a :class:`RandomStream`
(no floating point touches a probability), so the output distribution is exactly
the stated one. Rational parameters are given as (numerator, denominator) integer
arrays; :func:`fraction_at_least` / :func:`fraction_at_most` round a float the
privacy-safe way (noise scales up, epsilons down).

Discrete Laplace and discrete Gaussian batches run vectorised over attempts, one fixed
row of random words each (row_samplers.py: ~0.5 and ~1.2 us a value in large blocks,
1.2-1.4 us in blocks of 1,024, bench/samplers.py). ``bernoulli_exp``
(the exponential mechanism's) runs over lanes: each rejection loop draws one word per
still-active lane per step, so n draws cost O(n) words and O(log n) numpy steps.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .errors import ParameterError
from .randomness import RandomStream
from .row_samplers import discrete_gaussian_rows, discrete_laplace_rows, fresh_below

DEFAULT_DENOMINATOR = 1 << 20
# The largest discrete Laplace scale accepted (a scale of 7e10 counts drowns any signal;
# the row samplers' 64-bit words need t * 7 < 2^62 for scale = t/s with s ~ 2^20).
MAX_SCALE = 1 << 36


def fraction_at_least(x: float | Fraction, denominator: int = DEFAULT_DENOMINATOR) -> Fraction:
    """The smallest multiple of 1/denominator that is >= x (use for noise scales)."""
    if isinstance(x, Fraction):
        return x
    return Fraction(math.ceil(Fraction(x) * denominator), denominator)


def fraction_at_most(x: float | Fraction, denominator: int = DEFAULT_DENOMINATOR) -> Fraction:
    """The largest multiple of 1/denominator that is <= x (use for epsilons)."""
    if isinstance(x, Fraction):
        return x
    return Fraction(math.floor(Fraction(x) * denominator), denominator)


def _bernoulli_exp_unit(stream: RandomStream, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num/den <= 1 (CKS Algorithm 1, first branch):
    draw A_k ~ Bernoulli(gamma/k) for k = 1, 2, ... until A_k = 0; succeed iff k is odd."""
    n = num.size
    result = np.zeros(n, dtype=bool)
    lanes = np.arange(n)
    k = np.ones(n, dtype=np.int64)
    while lanes.size:
        a = stream.below(den[lanes] * k[lanes]) < num[lanes]
        stopped = lanes[~a]
        result[stopped] = (k[stopped] % 2) == 1
        lanes = lanes[a]
        k[lanes] += 1
    return result


def bernoulli_exp(stream: RandomStream, num, den) -> np.ndarray:
    """Bernoulli(exp(-gamma)) per lane for rational gamma = num/den >= 0, exactly
    (CKS Algorithm 1): floor(gamma) Bernoulli(exp(-1)) trials must all succeed,
    then one Bernoulli(exp(-(gamma - floor(gamma))))."""
    num = np.atleast_1d(np.asarray(num, dtype=np.int64)).ravel()
    den = np.broadcast_to(np.asarray(den, dtype=np.int64), num.shape).copy()
    if num.size and (num.min() < 0 or den.min() < 1):
        raise ParameterError("gamma", "negative or zero denominator", "num >= 0 and den >= 1")
    whole, frac = num // den, num % den
    alive = np.ones(num.size, dtype=bool)
    lanes = np.flatnonzero(whole > 0)
    done = np.zeros(num.size, dtype=np.int64)
    ones = np.ones(num.size, dtype=np.int64)
    while lanes.size:
        ok = _bernoulli_exp_unit(stream, ones[lanes], ones[lanes])
        alive[lanes[~ok]] = False
        lanes = lanes[ok]
        done[lanes] += 1
        lanes = lanes[done[lanes] < whole[lanes]]
    out = np.zeros(num.size, dtype=bool)
    live = np.flatnonzero(alive)
    if live.size:
        out[live] = _bernoulli_exp_unit(stream, frac[live], den[live])
    return out


def discrete_gaussian(stream: RandomStream, sigma2: int, size: int) -> np.ndarray:
    """Z with P(Z = z) proportional to exp(-z^2 / (2 sigma2)), exactly (CKS 2020
    Algorithm 3), for an integer variance parameter sigma2 in [1, 1e8]: t = isqrt(sigma2)
    + 1, propose Y ~ DLap(t), accept with probability exp(-(t|Y| - sigma2)^2 /
    (2 sigma2 t^2)), an exact Bernoulli(exp(-num/den)) on integers; vectorised over
    attempts by row_samplers.py. Callers round a variance up to an integer: more noise,
    never less."""
    return discrete_gaussian_rows(stream, int(sigma2), size)


def discrete_gaussian_pmf(z: np.ndarray, sigma2: float, support: int | None = None) -> np.ndarray:
    """P(Z = z) for the discrete Gaussian, normalised over |z| <= support (default 40 sigma)."""
    support = support or int(40 * math.sqrt(sigma2)) + 1
    grid = np.arange(-support, support + 1, dtype=np.float64)
    log_norm = np.log(np.exp(-grid ** 2 / (2 * sigma2)).sum())
    z = np.asarray(z, dtype=np.float64)
    return np.exp(-z ** 2 / (2 * sigma2) - log_norm)


SMALL_BATCH = 32   # below this many draws, the pure-Python path beats numpy's per-call overhead


def discrete_laplace(stream: RandomStream, scale: Fraction | float, size: int) -> np.ndarray:
    """Z with P(Z = z) proportional to exp(-|z| / scale) (CKS Algorithm 2).

    Y geometric with P(Y = y) proportional to exp(-y / scale), a fair sign bit B;
    (B = 1, Y = 0) is rejected so that zero is not counted twice; Z = (1 - 2B) Y.
    Larger batches run it vectorised over attempts (row_samplers.py); batches of at
    most SMALL_BATCH draws run it in pure Python, one draw after the other (same
    distribution, a different but equally deterministic use of the stream, chosen by
    ``size`` alone).
    """
    scale = fraction_at_least(scale)
    if not 0 < scale <= MAX_SCALE:
        raise ParameterError("scale", float(scale), f"> 0 and at most {MAX_SCALE}")
    gamma = 1 / scale
    if size <= SMALL_BATCH:
        return np.array([_dlap_scalar(stream, gamma.numerator, gamma.denominator)
                         for _ in range(size)], dtype=np.int64)
    return discrete_laplace_rows(stream, gamma.numerator, gamma.denominator, size)


# ---------------------------------------------------------------- scalar twins (exact)
_TWO64 = 1 << 64


def _below_scalar(stream: RandomStream, n: int) -> int:
    if n > _TWO64:                  # one 64-bit word cannot cover it (limit would be 0)
        return fresh_below(stream, n)
    limit = _TWO64 - (_TWO64 % n)
    while True:
        u = int.from_bytes(stream.bytes(8), "little")
        if u < limit:
            return u % n


def _bernoulli_exp_unit_scalar(stream: RandomStream, num: int, den: int) -> bool:
    k = 1
    while _below_scalar(stream, den * k) < num:
        k += 1
    return k % 2 == 1


def _bernoulli_exp_scalar(stream: RandomStream, num: int, den: int) -> bool:
    for _ in range(num // den):
        if not _bernoulli_exp_unit_scalar(stream, 1, 1):
            return False
    return _bernoulli_exp_unit_scalar(stream, num % den, den)


def _dlap_scalar(stream: RandomStream, s: int, t: int) -> int:
    """One DLap draw with P(z) ~ exp(-|z| s/t) (CKS Algorithm 2, scalar)."""
    while True:
        u = _below_scalar(stream, t)
        if not _bernoulli_exp_scalar(stream, u, t):
            continue
        v = 0
        while _bernoulli_exp_scalar(stream, 1, 1):
            v += 1
        y = (u + t * v) // s
        negative = _below_scalar(stream, 2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace_pmf(z: np.ndarray, scale: float) -> np.ndarray:
    """P(Z = z) for DLap(scale): (1 - p)/(1 + p) p^|z|, p = exp(-1/scale)."""
    p = math.exp(-1.0 / scale)
    return (1 - p) / (1 + p) * np.power(p, np.abs(np.asarray(z, dtype=np.float64)))


def discrete_laplace_cdf(n: np.ndarray, scale: float) -> np.ndarray:
    """P(Z <= n) for integer n: p^-n/(1+p) if n < 0, else 1 - p^(n+1)/(1+p)."""
    n = np.asarray(n, dtype=np.float64)
    p = math.exp(-1.0 / scale)
    neg = np.power(p, np.maximum(-n, 0.0)) / (1 + p)
    pos = 1.0 - np.power(p, np.maximum(n + 1, 0.0)) / (1 + p)
    return np.where(n < 0, neg, pos)


def discrete_laplace_sf(n: np.ndarray, scale: float) -> np.ndarray:
    """P(Z >= n) for integer n, computed without cancellation in the upper tail."""
    return discrete_laplace_cdf(-np.asarray(n, dtype=np.float64), scale)
