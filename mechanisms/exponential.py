"""The exponential mechanism (McSherry and Talwar 2007; seed 000, Preliminaries),
sampled exactly.

Pick candidate i with probability proportional to exp(eps * score_i / (2 Delta)) for
integer scores of sensitivity Delta. Seed 000 writes exp(-eps q / 2): a sign typo,
since higher quality must be more likely (docs/privacy.md); this module uses +.

Exact sampler: with s* = max score, weight_i = exp(-gamma_i), gamma_i = eps (s* - s_i)
/ (2 Delta) >= 0 is rational once eps is rounded down to a rational (rounding eps
down only adds privacy). Rejection: propose i uniformly, accept with probability
exp(-gamma_i) using the exact Bernoulli(exp(-gamma)) sampler. The accepted index
has exactly the target distribution; the expected number of proposals is
n / sum_i weight_i <= n (the best candidate has weight 1). No floating point is
involved, so scores that differ by thousands cannot underflow to zero weights.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .errors import ParameterError
from .randomness import RandomStream
from .samplers import DEFAULT_DENOMINATOR, bernoulli_exp, fraction_at_most

_MAX_BATCH = 1 << 14


def exact_epsilon(epsilon: float | Fraction) -> Fraction:
    """epsilon rounded down to the exact grid the sampler uses (multiples of 2^-20); an
    epsilon that rounds to 0 is refused (it would pick uniformly while claiming epsilon)."""
    eps = fraction_at_most(epsilon)
    if eps <= 0:
        raise ParameterError("epsilon", float(epsilon),
                             f">= {1 / DEFAULT_DENOMINATOR:.3g} (the exponential mechanism's grid)")
    return eps


def exponential_mechanism(stream: RandomStream, scores, epsilon: float | Fraction,
                          sensitivity: int = 1, size: int | None = None):
    """Index chosen by the exponential mechanism over integer ``scores``; with
    ``size``, an array of that many independent choices (every accepted proposal of
    the rejection sampler is an independent exact sample)."""
    s = np.asarray(scores)
    if s.ndim != 1 or s.size == 0:
        raise ParameterError("scores", f"shape {s.shape}", "a non-empty 1-d array")
    if not np.issubdtype(s.dtype, np.integer):
        if not np.all(np.isfinite(s)) or not np.all(s == np.round(s)):
            raise ParameterError("scores", "non-integer values", "integer scores")
        s = s.astype(np.int64)
    eps = exact_epsilon(epsilon)
    if sensitivity < 1:
        raise ParameterError("sensitivity", sensitivity, ">= 1")
    num = eps.numerator * (int(s.max()) - s.astype(np.int64))
    den = 2 * sensitivity * eps.denominator
    n = s.size
    want = 1 if size is None else int(size)
    batch = int(min(_MAX_BATCH, max(16, n, want)))
    picks: list[np.ndarray] = []
    got = 0
    while got < want:
        idx = stream.below(n, size=batch)
        chosen = idx[bernoulli_exp(stream, num[idx], den)]
        picks.append(chosen)
        got += chosen.size
    out = np.concatenate(picks)[:want]
    return int(out[0]) if size is None else out
