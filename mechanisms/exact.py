"""Exact output distributions of small mechanism instances, for privacy checks.

These are verification tools (tests, audits, the docs' claims), not mechanisms:
each computes probabilities by summing over the noise support in closed form, so a
privacy claim can be checked without sampling error.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln, logsumexp

from .between_thresholds import outcome_log_probs
from .samplers import discrete_laplace_cdf, discrete_laplace_pmf


def above_threshold_fire_distribution(queries, threshold: float, epsilon: float,
                                      threshold_scale: float | None = None,
                                      query_scale: float | None = None,
                                      support: int = 400) -> np.ndarray:
    """P(first fire at query i) for i = 0..k-1 and P(no fire) as entry k, for one
    AboveThreshold instance on fixed integer query values (DR Algorithm 1).

    A scale of 0 removes that noise (the broken variants). Sums over the threshold noise tau in [-support, support] (the rest has mass
    below 2 p^support/(1+p), negligible for the scales tested); the query noises are
    independent given tau, so each term is a product of discrete Laplace CDFs.
    """
    ts = 2.0 / epsilon if threshold_scale is None else threshold_scale
    qs = 4.0 / epsilon if query_scale is None else query_scale
    tau = np.arange(-support, support + 1)
    w = discrete_laplace_pmf(tau, ts) if ts > 0 else (tau == 0).astype(float)
    q = np.asarray(queries, dtype=np.float64)
    # fire at i given tau: q_i + nu >= L + tau  <=>  nu >= ceil(L + tau - q_i)
    need = np.ceil(threshold + tau[:, None] - q[None, :])
    p_fire = 1.0 - discrete_laplace_cdf(need - 1, qs) if qs > 0 else (need <= 0).astype(float)
    p_stay = 1.0 - p_fire
    before = np.cumprod(np.concatenate([np.ones((tau.size, 1)), p_stay], axis=1), axis=1)
    out = np.empty(q.size + 1)
    out[:-1] = (w[:, None] * before[:, :-1] * p_fire).sum(axis=0)
    out[-1] = (w * before[:, -1]).sum()
    return out


def exponential_mechanism_probabilities(scores, epsilon: float, sensitivity: float = 1.0) -> np.ndarray:
    """P(pick i) proportional to exp(eps * score_i / (2 sensitivity))."""
    z = epsilon * np.asarray(scores, dtype=np.float64) / (2.0 * sensitivity)
    return np.exp(z - logsumexp(z))


def between_thresholds_constant_delta(*, scale: float, lower: float, upper: float, count: int,
                                      shift: int, rounds: int, epsilon: float) -> float:
    """Exact hockey-stick divergence D_{e^eps}(P_c || P_{c+shift}) of the transcript of a
    BetweenThresholds instance asked the same count for ``rounds`` rounds.

    A transcript is a word over {L, R} possibly ending in TOP; its probability depends
    only on (#L, #R, halted), so the divergence is a finite sum over those triples
    weighted by binomial multiplicities (docs/privacy.md, "BetweenThresholds").
    """
    cs = np.array([count, count + shift])
    ll, lr, lt = outcome_log_probs(cs, scale, lower, upper)
    a = np.arange(rounds + 1)[:, None]
    r = np.arange(rounds + 1)[None, :]
    n = a + r
    log_mult = gammaln(n + 1) - gammaln(a + 1) - gammaln(r + 1)
    total = 0.0
    for halted in (False, True):
        valid = (n == rounds) if not halted else (n <= rounds - 1)
        lp = a * ll[0] + r * lr[0] + (lt[0] if halted else 0.0)
        lq = a * ll[1] + r * lr[1] + (lt[1] if halted else 0.0)
        with np.errstate(invalid="ignore"):
            gap = -np.expm1(np.minimum(epsilon + lq - lp, 0.0))   # 1 - e^eps q/p when positive
            terms = np.where(valid & (lp > -np.inf), np.exp(log_mult + lp) * gap, 0.0)
        total += float(np.nansum(terms))
    return total


def between_thresholds_worst_constant_delta(*, scale: float, lower: float, upper: float,
                                            rounds: int, epsilon: float,
                                            counts=None) -> tuple[float, int, int]:
    """max over counts and shifts of :func:`between_thresholds_constant_delta`;
    returns (delta, count, shift)."""
    if counts is None:
        counts = range(int(math.floor(lower - 6 * scale)), int(math.ceil(upper + 6 * scale)) + 1)
    best = (0.0, 0, 0)
    for c in counts:
        for s in (+1, -1):
            d = between_thresholds_constant_delta(scale=scale, lower=lower, upper=upper, count=c,
                                                  shift=s, rounds=rounds, epsilon=epsilon)
            if d > best[0]:
                best = (d, c, s)
    return best


def between_thresholds_epoch_constant_delta(*, scale: float, lower: float, upper: float, count: int,
                                            shift: int, rounds: int, v_max: int,
                                            epsilon: float) -> float:
    """Exact hockey-stick divergence D_{e^eps}(P_c || P_{c+shift}) of a whole predictor
    epoch (mechanisms/bt_epoch.py) asked the same count for ``rounds`` rounds: after each
    TOP a fresh instance continues (same noise law, no threshold noise), and the epoch
    ends at its v_max-th TOP. A transcript's probability depends only on (#L, #R, #TOP):
    with fewer than v_max TOPs it has exactly ``rounds`` outcomes in any order; with v_max
    it ends on its last TOP, the others in any order before it."""
    cs = np.array([count, count + shift])
    ll, lr, lt = outcome_log_probs(cs, scale, lower, upper)
    a = np.arange(rounds + 1)[:, None]
    r = np.arange(rounds + 1)[None, :]
    total = 0.0
    for n in range(v_max + 1):
        if n < v_max:
            valid = (a + r + n) == rounds
            log_mult = gammaln(rounds + 1) - gammaln(a + 1) - gammaln(r + 1) - gammaln(n + 1)
        else:
            valid = (a + r + n) <= rounds
            log_mult = gammaln(a + r + n) - gammaln(a + 1) - gammaln(r + 1) - gammaln(n)
        lp = a * ll[0] + r * lr[0] + n * lt[0]
        lq = a * ll[1] + r * lr[1] + n * lt[1]
        with np.errstate(invalid="ignore", over="ignore"):
            gap = -np.expm1(np.minimum(epsilon + lq - lp, 0.0))
            terms = np.where(valid & (lp > -np.inf), np.exp(log_mult + lp) * gap, 0.0)
        total += float(np.nansum(terms))
    return total
