"""AboveThreshold (sparse vector), Dwork and Roth 2014 Algorithm 1 in the corrected
form analysed by Lyu, Su and Li 2017, with the interface of seed 000 Section 4.2
(InitializeAboveThr(eps, L, beta), AddQuery(q), TestAboveThr()).

For sensitivity-1 integer queries (counts), with discrete Laplace noise:

* on initialisation the noisy threshold is L^ = L + DLap(2/eps);
* each query q fires iff q + DLap(4/eps) >= L^, with fresh query noise;
* after the first fire the instance halts and accepts no query.

Privacy: the whole run of one instance, up to and including its single fire, is
eps-DP (DR Theorem 3.23; Lyu-Su-Li Theorem 2 with c = 1). Only the fire bit leaves:
the noisy values are never exposed by this class.

Accuracy (DR Theorem 3.24): over k queries, with probability 1 - beta, no fire on a
query below L - alpha and no miss of a query above L + alpha, alpha = 8(ln k +
ln(2/beta))/eps (:func:`above_threshold_alpha`).

State is a plain record (instance id, number of queries seen, fired); the noise is
a keyed :class:`NoiseTape`, so the record alone restores the instance exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .errors import MechanismHalted, ParameterError
from .noise_tape import NoiseTape
from .randomness import KeyedRandomness
from .samplers import MAX_SCALE, fraction_at_least


def above_threshold_alpha(k: int, beta: float, epsilon: float) -> float:
    """DR Theorem 3.24 accuracy: alpha = 8 (ln k + ln(2/beta)) / eps."""
    return 8.0 * (math.log(k) + math.log(2.0 / beta)) / epsilon


def above_threshold_scales(epsilon: float) -> tuple[Fraction, Fraction]:
    """(threshold scale 2/eps, query scale 4/eps), rounded up to exact rationals; an
    epsilon so small that 4/eps exceeds the samplers' MAX_SCALE is refused."""
    if not (epsilon > 0 and 4.0 / epsilon <= MAX_SCALE):
        raise ParameterError("epsilon", epsilon, f">= {4.0 / MAX_SCALE:.3g} (noise scale 4/eps "
                             f"at most {MAX_SCALE})")
    return fraction_at_least(2.0 / epsilon), fraction_at_least(4.0 / epsilon)


@dataclass
class AboveThresholdState:
    """One AboveThreshold instance's counters (its noise is a function of the key and instance)."""
    instance: int
    queries: int = 0
    fired: bool = False


class AboveThreshold:
    """One eps-DP instance. ``purpose`` separates instances of different users of
    the same model; ``state.instance`` separates successive instances."""

    def __init__(self, *, epsilon: float, threshold: float, beta: float, rng: KeyedRandomness,
                 model_id: str, state: AboveThresholdState, purpose: str = "above_threshold"):
        if not epsilon > 0:
            raise ParameterError("epsilon", epsilon, "> 0")
        if not 0 < beta < 1:
            raise ParameterError("beta", beta, "in (0, 1)")
        if not math.isfinite(threshold):
            raise ParameterError("threshold", threshold, "a finite number")
        self.epsilon, self.threshold, self.beta = epsilon, threshold, beta
        self.state = state
        t_scale, q_scale = above_threshold_scales(epsilon)
        tau = NoiseTape(rng, model_id, purpose + "/threshold", state.instance, t_scale, block=16)[0]
        self._noisy_threshold = threshold + tau
        self._query_noise = NoiseTape(rng, model_id, purpose + "/query", state.instance, q_scale)
        self._pending: int | None = None

    def _check_running(self) -> None:
        if self.state.fired:
            raise MechanismHalted(
                f"AboveThreshold instance {self.state.instance} fired and halted; start a new one")

    # The seed's two-call interface.
    def add_query(self, q: int) -> None:
        self._check_running()
        self._pending = int(q)

    def test_above_threshold(self) -> bool:
        if self._pending is None:
            raise MechanismHalted("TestAboveThr() called without a query (AddQuery first)")
        q, self._pending = self._pending, None
        t = self.state.queries
        self.state.queries = t + 1
        if q + self._query_noise[t] >= self._noisy_threshold:
            self.state.fired = True
            return True
        return False

    def step(self, q: int) -> bool:
        """AddQuery(q) then TestAboveThr()."""
        self.add_query(q)
        return self.test_above_threshold()

    def quiet(self, qs) -> int:
        """``step`` over the queries ``qs`` in order, for as long as none fires: returns
        how many were asked (all answered "below"); the first query that would fire is
        not asked (the instance is left exactly as after those ``step`` calls, so a
        ``step`` on it next fires). The same noise values as ``step``: value t of the
        tape is a function of t alone. Only the fire bits decide the count."""
        self._check_running()
        qs = np.asarray(qs, dtype=np.int64)
        t = self.state.queries
        fires = qs + self._query_noise.values(t, t + qs.size) >= self._noisy_threshold
        asked = int(fires.argmax()) if fires.any() else int(qs.size)
        self.state.queries = t + asked
        return asked

    def alpha(self, k: int) -> float:
        return above_threshold_alpha(k, self.beta, self.epsilon)
