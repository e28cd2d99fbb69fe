"""Exact discrete Laplace and discrete Gaussian sampling, one fixed row of random words
per attempt, vectorised over attempts.

The algorithms are Canonne, Kamath and Steinke 2020 ("The Discrete Gaussian for
Differential Privacy"): Algorithm 1 (Bernoulli(exp(-gamma))), Algorithm 2 (discrete
Laplace) and Algorithm 3 (discrete Gaussian), unchanged. What this module chooses is
which random words each step reads, so that numpy can run many attempts at once in a
fixed number of array operations instead of a loop per step (samplers.py's lane loops
cost 20-30 us a value in blocks of 1,024: hundreds of small numpy calls).

One attempt reads one row: 7 64-bit and 9 32-bit words for discrete Laplace, 13 and 15
for the discrete Gaussian (``_Layout``), from the keyed stream (all attempts' 64-bit
rows, then all their 32-bit rows). The attempt itself is the scalar function
``_attempt`` below, which is the definition: it reads the row's words at fixed columns,
and when it needs a word the row does not hold (a loop that ran longer than the row
allows: 5-7 attempts in 10,000 with the default rows), or a column's word falls in the
rejection zone of its bound, it continues with fresh words from the same stream. The
vectorised path computes ``_attempt`` for every row it can decide from the row alone
and calls ``_attempt`` itself for the others, in row order, after the round's rows were
read: so the outputs are a pure function of the stream, and the tests check the
vectorised path against ``_attempt`` row by row, with rows short enough that most
attempts continue in Python.

Why it is exact. Every word an attempt reads is an independent uniform word: the rows
are fresh keystream, the continuation words come after them, and a word is reduced
modulo a bound b only when it lies below 2^w - (2^w mod b) (else it is replaced by the
next fresh word: rejection sampling, exactly uniform modulo b). Given independent
exactly uniform inputs, each step is the corresponding step of CKS: which words feed
which step changes nothing in the distribution. Attempts are independent, so the
accepted ones, taken in order, are i.i.d. from the target (rejection sampling).

The steps, for gamma = s/t in lowest terms (P(z) proportional to exp(-|z| s/t)):
- U = w mod t; keep it with probability exp(-U/t) (CKS Alg. 1 for gamma <= 1: draw
  A_k ~ Bernoulli(U/(t k)), k = 1, 2, ..., as w_k mod (t k) < U, until one is 0;
  keep iff that k is odd); else the attempt fails.
- V = the number of Bernoulli(exp(-1)) successes before the first failure. One trial
  is CKS Alg. 1 at gamma = 1, whose stopping index K* has P(K* > k) = 1/k! exactly;
  so one word u = w mod 8! decides K* <= 8 at once (K* > k iff u < 8!/k!), and u = 0
  (K* > 8) continues with fresh A_9 ~ Bernoulli(1/9), ...; success iff K* is odd.
- a sign bit B; Y = floor((U + t V) / s); (B = 1, Y = 0) fails (zero counted once);
  Z = (1 - 2B) Y.
Discrete Gaussian (sigma2 integer, t = isqrt(sigma2) + 1): a discrete Laplace attempt
with gamma = 1/t gives Y, accepted with probability exp(-(t|Y| - sigma2)^2 /
(2 sigma2 t^2)): floor(gamma) trials at gamma = 1 as above, then Alg. 1 on the
fractional part (words mod den k).
"""
from __future__ import annotations

import math

import numpy as np

from .errors import ParameterError
from .randomness import RandomStream

K = 6              # steps of a fractional Bernoulli(exp(-g)) loop held in the row (P(more) <= 1/6!)
TRIALS = 8         # Bernoulli(exp(-1)) trials held in the row for V (P(more) = e^-8)
WHOLE = 6          # trials held for the discrete Gaussian's whole part of gamma
FACT = 40320       # 8!: one word decides a gamma = 1 loop's stopping index up to 8
# K* for u = w mod 8! (K* > k iff u < 8!/k!); u = 0 means K* > 8 (the loop continues)
_KSTAR = 2 + (np.arange(FACT)[:, None] < FACT // np.array([math.factorial(k) for k in range(2, 9)])).sum(axis=1)
_WINS = _KSTAR % 2 == 1          # the trial succeeds iff K* is odd
_WINS[0] = False                 # u = 0 is undecided: the vectorised path stops there and defers
MAX_BOUND = 1 << 62          # t * k and den * k stay below it (64-bit words)
ROUND = 1 << 15              # attempts per round at most


def _limit(bound: int, bits: int) -> int:
    """Words below this are reduced modulo ``bound`` exactly uniformly."""
    return (1 << bits) - ((1 << bits) % bound)


class _Layout:
    """Column positions of one attempt's row (64-bit and 32-bit words)."""

    def __init__(self, k: int, trials: int, whole: int, gaussian: bool):
        self.k, self.trials, self.whole, self.gaussian = k, trials, whole, gaussian
        self.u, self.unit = 0, 1                          # 64-bit: U, its loop
        self.frac = 1 + k                                 # 64-bit: the Gaussian's fractional loop
        self.row64 = 1 + k + (k if gaussian else 0)
        self.sign, self.whole_at = trials, trials + 1     # 32-bit: V's trials, sign, whole part
        self.row32 = trials + 1 + (whole if gaussian else 0)


# ----------------------------------------------------------------- the definition (scalar)
class _Words:
    """One row and the stream it continues on."""

    __slots__ = ("w64", "w32", "stream")

    def __init__(self, w64, w32, stream: RandomStream):
        self.w64, self.w32, self.stream = w64, w32, stream

    def below(self, bound: int, col: int | None, bits: int) -> int:
        """Exactly uniform on [0, bound): the row's word at ``col`` (None: none left),
        replaced by fresh words of the same width while it lies in the rejection zone."""
        if col is None or bound > 1 << (bits - 1):
            return fresh_below(self.stream, bound)
        w = (self.w64 if bits == 64 else self.w32)[col]
        limit = _limit(bound, bits)
        while w >= limit:
            w = int.from_bytes(self.stream.bytes(bits // 8), "little")
        return w % bound


def fresh_below(stream: RandomStream, bound: int) -> int:
    """Exactly uniform on [0, bound) for any bound >= 1, from fresh words of the stream."""
    nbytes = (bound.bit_length() + 7) // 8 + 8
    limit = _limit(bound, 8 * nbytes)
    while True:
        w = int.from_bytes(stream.bytes(nbytes), "little")
        if w < limit:
            return w % bound


def _unit(words: _Words, num: int, den: int, first: int, k_max: int) -> bool:
    """Bernoulli(exp(-num/den)), 0 <= num <= den (CKS Alg. 1): A_k = [w mod den k < num]
    until one is 0, step k reading column first + k - 1 while k <= k_max."""
    k = 1
    while words.below(den * k, first + k - 1 if k <= k_max else None, 64) < num:
        k += 1
    return k % 2 == 1


def _trial(words: _Words, col: int | None) -> bool:
    """Bernoulli(exp(-1)) (CKS Alg. 1 at gamma = 1): K* from one word mod 8!, odd wins."""
    u = words.below(FACT, col, 32)
    if u:
        return bool(_WINS[u])
    k = 9                                   # u = 0: K* > 8, the loop continues
    while fresh_below(words.stream, k) < 1:
        k += 1
    return k % 2 == 1


def _attempt(layout: _Layout, words: _Words, s: int, t: int, sigma2: int = 0) -> int | None:
    """One attempt: a value, or None if it failed (module docstring's steps)."""
    u = words.below(t, layout.u, 64)
    if not _unit(words, u, t, layout.unit, layout.k):
        return None
    v = 0
    while _trial(words, v if v < layout.trials else None):
        v += 1
    negative = words.w32[layout.sign] & 1
    y = (u + t * v) // s
    if negative and y == 0:
        return None
    z = -y if negative else y
    if not layout.gaussian:
        return z
    den = 2 * sigma2 * t * t
    whole, frac = divmod((t * y - sigma2) ** 2, den)
    for i in range(whole):
        if not _trial(words, layout.whole_at + i if i < layout.whole else None):
            return None
    return z if _unit(words, frac, den, layout.frac, layout.k) else None


# ----------------------------------------------------------------- vectorised
def _stops(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of booleans A_1, A_2, ...: how many lead before the first false one (the
    row's length if none is false), and whether all were true (the loop ran past the row)."""
    first = np.argmin(a, axis=1)
    past = a[np.arange(a.shape[0]), first]
    return np.where(past, a.shape[1], first), past


def _trials(u32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bernoulli(exp(-1)) trials from words already reduced mod 8!: success, and u = 0
    (K* > 8: the trial continues past the row)."""
    return _WINS[u32], u32 == 0


def _vector(layout: _Layout, w64: np.ndarray, w32: np.ndarray, s: int, t: int, sigma2: int):
    """Values, success and "decide in Python" for every row (the last are left to _attempt)."""
    n = w64.shape[0]
    ks = np.arange(1, layout.k + 1, dtype=np.uint64)
    bounds64 = [t] + [t * k for k in range(1, layout.k + 1)]
    if layout.gaussian:
        den = 2 * sigma2 * t * t
        bounds64 += [den * k for k in range(1, layout.k + 1)]
    top64 = np.array([_limit(b, 64) - 1 for b in bounds64], dtype=np.uint64)   # largest kept word
    top32 = np.full(layout.row32, _limit(FACT, 32) - 1, dtype=np.uint32)
    top32[layout.sign] = (1 << 32) - 1                            # the sign bit: no zone
    python = (w64 > top64).any(axis=1) | (w32 > top32).any(axis=1)

    u = w64[:, 0] % np.uint64(t)
    lead, past = _stops(w64[:, 1:1 + layout.k] % (np.uint64(t) * ks) < u[:, None])
    python |= past
    ok = (lead % 2 == 0) & ~past                                  # stopped at an odd k = lead + 1

    succ, over = _trials(w32[:, :layout.trials] % np.uint32(FACT))
    v, all_succ = _stops(succ)                                    # successes before the failure
    python |= ok & (all_succ | over[np.arange(n), np.minimum(v, layout.trials - 1)])
    negative = (w32[:, layout.sign] & 1).astype(bool)
    y = (u.astype(np.int64) + t * v) // s
    ok &= ~(negative & (y == 0)) & ~python
    z = np.where(negative, -y, y)
    if not layout.gaussian:
        return z, ok, python

    gap = t * y - sigma2                  # |gap| <= t * t * (TRIALS + 1): gap^2 fits int64
    whole, frac = np.divmod(gap * gap, den)
    succ, over = _trials(w32[:, layout.whole_at:] % np.uint32(FACT))
    run, all_succ = _stops(succ)          # leading successes among the row's trials
    fail_at = np.minimum(run, layout.whole - 1)
    decided = np.where(all_succ, whole <= layout.whole, ~over[np.arange(n), fail_at] | (run >= whole))
    python |= ok & ~decided
    ok &= decided & (run >= whole)
    a = w64[:, layout.frac:] % (np.uint64(den) * ks) < frac.astype(np.uint64)[:, None]
    lead, past = _stops(a)
    python |= ok & past
    ok &= ~past & (lead % 2 == 0)
    return z, ok, python


def _sample(layout: _Layout, stream: RandomStream, s: int, t: int, sigma2: int, size: int,
            rate: float) -> np.ndarray:
    """``size`` accepted values from rounds of attempts, each round's rows read at once:
    about the number still needed over ``rate`` (the expected acceptance; later rounds
    use the rate observed), at most ROUND attempts a round (bounded memory)."""
    out, have = [], 0
    while have < size:
        m = min(int((size - have) / rate * 1.05) + 16, ROUND)
        w64 = stream.uint64(m * layout.row64).reshape(m, layout.row64)
        w32 = stream.uint32(m * layout.row32).reshape(m, layout.row32)
        z, ok, python = _vector(layout, w64, w32, s, t, sigma2)
        for i in np.flatnonzero(python):
            value = _attempt(layout, _Words(w64[i].tolist(), w32[i].tolist(), stream), s, t, sigma2)
            ok[i] = value is not None
            z[i] = 0 if value is None else value
        got = z[ok][:size - have]
        out.append(got)
        have += got.size
        rate = max(int(ok.sum()) / m, 0.01)
    return np.concatenate(out) if out else np.empty(0, dtype=np.int64)


_DLAP = _Layout(K, TRIALS, WHOLE, gaussian=False)
_DGAUSS = _Layout(K, TRIALS, WHOLE, gaussian=True)


def discrete_laplace_rows(stream: RandomStream, s: int, t: int, size: int, *,
                          layout: _Layout = _DLAP) -> np.ndarray:
    """``size`` draws with P(z) proportional to exp(-|z| s / t), s/t in lowest terms."""
    if s < 1 or t < 1 or math.gcd(s, t) != 1:
        raise ParameterError("s/t", (s, t), "positive integers in lowest terms")
    if t * (layout.k + 1) > MAX_BOUND:
        raise ParameterError("scale", f"{t}/{s}", f"a denominator t below {MAX_BOUND // (layout.k + 1)}")
    keep = (1 - math.exp(-1)) / (t * -math.expm1(-1 / t))       # mean of exp(-U/t), U < t
    return _sample(layout, stream, s, t, 0, size, rate=keep * (1 + math.exp(-s / t)) / 2)


def discrete_gaussian_rows(stream: RandomStream, sigma2: int, size: int, *,
                           layout: _Layout = _DGAUSS) -> np.ndarray:
    """``size`` draws with P(z) proportional to exp(-z^2 / (2 sigma2)), sigma2 in [1, 1e8]."""
    if not 1 <= sigma2 <= 10**8:
        raise ParameterError("sigma2", sigma2, "an integer in [1, 1e8]")
    t = math.isqrt(sigma2) + 1
    # acceptance measured per attempt: 0.35 at sigma2 = 1, 0.48 from sigma2 = 100 to 1e6
    return _sample(layout, stream, 1, t, sigma2, size, rate=0.33 if sigma2 < 4 else 0.45)
