"""Statistical privacy auditing: lower-bound the epsilon of a mechanism from runs.

Run the mechanism many times on two neighbouring inputs D and D', count how often
an output event E happens (k1 of n1, k2 of n2), and bound P_D(E) from below and
P_D'(E) from above with Clopper-Pearson intervals (Bonferroni: each side at
(1 - confidence)/2). Any (eps, delta)-DP mechanism satisfies P_D(E) <= e^eps P_D'(E)
+ delta, so with the stated confidence

    eps >= ln((lower(P_D(E)) - delta) / upper(P_D'(E))).

A correct mechanism's bound must stay at or below its claim; a broken one's must
exceed it (that is the power check). The simulators below run the correct sparse
vector mechanisms and deliberately broken variants vectorised over runs, on the
same exact samplers as the product code (whose own output distributions the tests
tie to the exact probabilities in :mod:`mechanisms.exact`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy.stats import beta as beta_dist

from .randomness import RandomStream
from .samplers import discrete_laplace, fraction_at_least

AT_VARIANTS = ("correct", "no_query_noise", "releases_noisy_values", "reuses_threshold_after_fire")


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided (1 - alpha) Clopper-Pearson interval for a binomial proportion."""
    lo = 0.0 if k == 0 else float(beta_dist.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


@dataclass(frozen=True)
class AuditResult:
    """An epsilon lower bound from two neighbouring runs, with the counts it came from."""
    epsilon_lower_bound: float
    hits: tuple[int, int]
    runs: tuple[int, int]
    delta: float
    confidence: float

    def flags(self, claimed_epsilon: float) -> bool:
        return self.epsilon_lower_bound > claimed_epsilon


def epsilon_lower_bound(k1: int, n1: int, k2: int, n2: int, *, delta: float = 0.0,
                        confidence: float = 0.95) -> AuditResult:
    """The larger of the bounds for E in both directions (D vs D' and D' vs D)."""
    alpha = 1 - confidence
    lo1, hi1 = clopper_pearson(k1, n1, alpha)
    lo2, hi2 = clopper_pearson(k2, n2, alpha)
    best = -math.inf
    for lo, hi in ((lo1, hi2), (lo2, hi1)):
        if lo - delta > 0:
            best = max(best, math.log((lo - delta) / hi) if hi > 0 else math.inf)
    return AuditResult(max(best, 0.0), (k1, k2), (n1, n2), delta, confidence)


def audit(outputs_d: np.ndarray, outputs_d2: np.ndarray, event, *, delta: float = 0.0,
          confidence: float = 0.95) -> AuditResult:
    """Audit with a boolean event function over arrays of outputs."""
    e1, e2 = np.asarray(event(outputs_d)), np.asarray(event(outputs_d2))
    return epsilon_lower_bound(int(e1.sum()), e1.size, int(e2.sum()), e2.size,
                               delta=delta, confidence=confidence)


def simulate_above_threshold(stream: RandomStream, queries, threshold: float, epsilon: float,
                             runs: int, variant: str = "correct") -> np.ndarray:
    """Outputs of ``runs`` AboveThreshold instances on fixed integer queries.

    * correct: index of the first fire (k if none).
    * no_query_noise: same, but q_i is compared to the noisy threshold without noise.
    * releases_noisy_values: returns the noisy values q_i + nu_i of every query up to
      the fire (NaN after), as an implementation that logs or emits them would.
    * reuses_threshold_after_fire: no halt; the same noisy threshold keeps answering
      after each fire (no fresh instance); returns the (runs, k) boolean fire pattern.
    """
    if variant not in AT_VARIANTS:
        raise ValueError(f"variant={variant!r} not in {AT_VARIANTS}")
    q = np.asarray(queries, dtype=np.int64)
    k = q.size
    t_scale, q_scale = fraction_at_least(2 / epsilon), fraction_at_least(4 / epsilon)
    tau = discrete_laplace(stream, t_scale, runs)[:, None]
    nu = discrete_laplace(stream, q_scale, runs * k).reshape(runs, k)
    if variant == "no_query_noise":
        nu[:] = 0
    noisy = q[None, :] + nu
    fires = noisy >= threshold + tau
    if variant == "reuses_threshold_after_fire":
        return fires
    first = np.where(fires.any(axis=1), fires.argmax(axis=1), k)
    if variant == "releases_noisy_values":
        released = noisy.astype(np.float64)
        released[np.arange(k)[None, :] > first[:, None]] = np.nan
        return released
    return first


def simulate_between_thresholds(stream: RandomStream, count: int, scale: Fraction | float,
                                lower: float, upper: float, rounds: int, runs: int,
                                v_max: int = 1) -> np.ndarray:
    """``runs`` BetweenThresholds runs asked the same count for up to ``rounds`` rounds,
    each stopping at its ``v_max``-th TOP; returns an (runs, 3) array of (#L, #R, #TOP).
    ``v_max = 1`` is one instance (halts at TOP); larger is a predictor epoch under
    per-epoch accounting (mechanisms/bt_epoch.py: the instances after each TOP are
    further rounds of one process, with fresh noise per round)."""
    scale = fraction_at_least(scale)
    out = np.zeros((runs, 3), dtype=np.int64)
    live = np.arange(runs)
    for _ in range(rounds):
        if not live.size:
            break
        v = count + discrete_laplace(stream, scale, live.size)
        is_l, is_r = v < lower, v > upper
        out[live[is_l], 0] += 1
        out[live[is_r], 1] += 1
        out[live[~(is_l | is_r)], 2] += 1
        live = live[out[live, 2] < v_max]
    return out


def simulate_laplace_counts(stream: RandomStream, count: int, epsilon: float, runs: int) -> np.ndarray:
    """The discrete Laplace mechanism on a count: count + DLap(1/eps), eps-DP."""
    return count + discrete_laplace(stream, fraction_at_least(1 / epsilon), runs)


# ------------------------------------------------------------------ the standard suite
@dataclass(frozen=True)
class Scenario:
    """A mechanism on two neighbouring inputs, the output event to count and the epsilon
    claimed for it."""
    name: str
    claimed_epsilon: float
    delta: float
    broken: bool          # True: the auditor must flag it (power check)
    run: object           # (stream_d, stream_d2, runs) -> (outputs_d, outputs_d2)
    event: object         # outputs -> bool array


_K = 200
_HALF = np.r_[np.ones(_K // 2, np.int64), -np.ones(_K // 2, np.int64)]


def _at(variant, q1, q2, threshold):
    return lambda s1, s2, n: (simulate_above_threshold(s1, q1, threshold, 1.0, n, variant),
                              simulate_above_threshold(s2, q2, threshold, 1.0, n, variant))


def _bt(scale, v_max=1, rounds=200):
    return lambda s1, s2, n: (simulate_between_thresholds(s1, -1, scale, 0, 205.3, rounds, n, v_max),
                              simulate_between_thresholds(s2, 0, scale, 0, 205.3, rounds, n, v_max))


def _half_difference(fires):
    return fires[:, : _K // 2].sum(axis=1) - fires[:, _K // 2:].sum(axis=1) >= 24


def _calibrated_bt_scale() -> Fraction:
    from .between_thresholds import calibrate_between_thresholds
    return calibrate_between_thresholds(epsilon=1.0, delta=1e-6, lower=0, upper=205.3).scale


_EPOCH_V = 8


def _calibrated_epoch_scale() -> Fraction:
    from .bt_epoch import calibrate_epoch
    return calibrate_epoch(epsilon=1.0, delta=1e-6, lower=0, upper=205.3, v_max=_EPOCH_V).scale


def _em(s1, s2, n):
    from .exponential import exponential_mechanism
    return (exponential_mechanism(s1, np.array([0, -1, -3]), 1.0, size=n),
            exponential_mechanism(s2, np.array([-1, 0, -2]), 1.0, size=n))


def standard_scenarios() -> list[Scenario]:
    """Neighbouring inputs and events for each mechanism and broken variant. Events
    were chosen from the exact distributions (mechanisms.exact) to be near the worst."""
    zeros = np.zeros(_K, np.int64)
    bt_ok = _calibrated_bt_scale()
    return [
        Scenario("laplace count, eps=1", 1.0, 0.0, False,
                 lambda s1, s2, n: (simulate_laplace_counts(s1, 0, 1.0, n),
                                    simulate_laplace_counts(s2, 1, 1.0, n)), lambda o: o >= 1),
        Scenario("exponential mechanism, eps=1", 1.0, 0.0, False, _em, lambda o: o == 0),
        Scenario("AboveThreshold, swapped pair", 1.0, 0.0, False,
                 _at("correct", [0, 1], [1, 0], 1), lambda o: o == 1),
        Scenario("AboveThreshold, +-1 halves", 1.0, 0.0, False,
                 _at("correct", zeros, _HALF, 0), lambda o: o < _K // 2),
        Scenario("BetweenThresholds, calibrated (1, 1e-6)", 1.0, 1e-6, False, _bt(bt_ok),
                 lambda o: o[:, 0] >= 7),
        Scenario("BROKEN AboveThreshold: no query noise", 1.0, 0.0, True,
                 _at("no_query_noise", [0, 1], [1, 0], 1), lambda o: o == 1),
        Scenario("BROKEN AboveThreshold: releases noisy values", 1.0, 0.0, True,
                 _at("releases_noisy_values", [0] * 40, [1] * 40, 10**6),
                 lambda o: np.nansum(o, axis=1) >= 100),
        Scenario("BROKEN AboveThreshold: threshold reused after fire", 1.0, 0.0, True,
                 _at("reuses_threshold_after_fire", zeros, _HALF, 0), _half_difference),
        Scenario("BROKEN BetweenThresholds: quoted scale 6", 1.0, 1e-6, True, _bt(6),
                 lambda o: o[:, 0] >= 9),
        Scenario("predictor epoch, per-epoch calibrated (1, 1e-6), 8 hard queries", 1.0, 1e-6,
                 False, _bt(_calibrated_epoch_scale(), _EPOCH_V, 400), lambda o: o[:, 0] >= 27),
        Scenario("BROKEN predictor epoch: quoted scale 6, 8 hard queries", 1.0, 1e-6, True,
                 _bt(6, _EPOCH_V, 400), lambda o: o[:, 0] >= 27),
    ]


def run_scenario(scenario: Scenario, rng, runs: int, confidence: float = 0.95) -> AuditResult:
    """Run a scenario on its two neighbours and audit the claimed epsilon."""
    s1 = rng.stream("audit", scenario.name, 0)
    s2 = rng.stream("audit", scenario.name, 1)
    a, b = scenario.run(s1, s2, runs)
    return audit(a, b, scenario.event, delta=scenario.delta, confidence=confidence)
