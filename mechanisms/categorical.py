"""Exact sampling from weights n_v exp(-gamma_v): integer counts times exp of a
rational, as in multiplicative-weights distributions (DP-Winnow's w, where
w_j ~ exp(eta u_j) with integer u_j, grouped by the value of u_j).

Rejection from a uniform proposal (as in :mod:`mechanisms.exponential`) needs
n / sum(weights) proposals per draw, hopeless once the weights concentrate. This
module samples the *group* by a lazy exact inverse CDF instead:

* the cumulative weights C_v (as fractions of the total) are computed with Python's
  ``decimal`` (correctly rounded exp) at a precision whose total error is below
  2^-(bits+8), and rounded down to ``bits``-bit integers B_v;
* a draw is a ``bits``-bit uniform integer U from the keyed stream (the leading
  bits of an infinite-precision uniform). B_v is within one unit of C_v 2^bits, so
  U <= B_v - 2 certifies that the uniform is below C_v and U >= B_v + 2 that it is
  above; the group is then exact;
* otherwise (a tie, probability <= 3 groups 2^-64 per draw) the comparison is redone
  with 64 more bits of U and of C_v, recomputed at higher precision, until it resolves.

The result is exactly the inverse CDF of an infinite-precision uniform, hence
exactly distributed. Within a group, the member is uniform (exact integers).
"""
from __future__ import annotations

import decimal
from fractions import Fraction

import numpy as np

from .errors import ParameterError
from .randomness import RandomStream


def _boundaries(counts, gammas, bits: int) -> list[int]:
    """floor(C_v * 2^bits) for the cumulative normalised weights, v = 0..G-2."""
    digits = int(bits * 0.30103) + 12 + len(str(len(counts)))
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        g0 = min(gammas)
        w = []
        for n, g in zip(counts, gammas):
            rel = g - g0                           # >= 0: weights relative to the largest
            w.append(decimal.Decimal(n) * (-(decimal.Decimal(rel.numerator)
                                             / decimal.Decimal(rel.denominator))).exp())
        total = sum(w)
        scale = decimal.Decimal(2) ** bits
        out, acc = [], decimal.Decimal(0)
        for wv in w[:-1]:
            acc += wv
            out.append(int((acc / total * scale).to_integral_value(rounding=decimal.ROUND_FLOOR)))
    return out


def sample_groups(stream: RandomStream, counts, gammas, size: int) -> np.ndarray:
    """Indices v drawn i.i.d. with probability proportional to counts[v] exp(-gammas[v]);
    gammas are Fractions (any sign), counts non-negative integers, not all zero."""
    counts = [int(n) for n in counts]
    gammas = [Fraction(g) for g in gammas]
    if len(counts) != len(gammas) or not counts:
        raise ParameterError("counts/gammas", (len(counts), len(gammas)), "equal, non-zero lengths")
    if min(counts) < 0 or sum(counts) == 0:
        raise ParameterError("counts", "negative or all zero", "non-negative, not all zero")
    if len(counts) == 1:
        return np.zeros(size, dtype=np.int64)
    b64 = np.array(_boundaries(counts, gammas, 64), dtype=np.uint64)
    u = stream.uint64(size)
    one, top = np.uint64(1), np.uint64(0xFFFFFFFFFFFFFFFF)
    below = np.searchsorted(b64, np.where(u >= one, u - one, 0), side="left")   # #{B_v <= U-2}
    near = np.where(u >= top - one, b64.size,
                    np.searchsorted(b64, u + np.uint64(2), side="left"))       # #{B_v <= U+1}
    idx = below.astype(np.int64)
    for lane in np.flatnonzero(near != below):        # exact refinement, vanishingly rare
        idx[lane] = _resolve_tie(stream, counts, gammas, int(u[lane]))
    return idx


def _resolve_tie(stream: RandomStream, counts, gammas, u: int) -> int:
    bits = 64
    while True:
        bits += 64
        u = (u << 64) | int(stream.uint64(1)[0])
        bounds = _boundaries(counts, gammas, bits)
        for v, b in enumerate(bounds):
            if u <= b - 2:
                return v            # certainly below C_v and above every earlier boundary
            if u <= b + 1:
                break               # still within a unit of C_v: draw more bits
        else:
            return len(bounds)
