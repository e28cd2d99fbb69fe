"""DP-Winnow, seed 000 Algorithm 4.2 (privacy: Theorem 11; regret: Theorem 12 via
Lemmas 9, 10, 13, 14), as a learner over explicit, restorable state.

Per labelled round t (the seed's loop body):
  1. release the prediction sgn(<w~, x>) (the hypothesis w~ is the released object;
     a prediction is post-processing of it);
  2. on a mistake, count it and cache (x, y) if the cache is empty (only the first
     cached example is ever used, so only it is kept);
  3. ask AboveThreshold the query q = mistakes since t_p, *every* round (asking only
     on mistake rounds would make the query schedule data-dependent);
  4. on a fire with k < K: multiplicative update of the shadow weights w with the
     cached example, re-sample w~ from w (m i.i.d. draws), k += 1, clear the cache,
     t_p = t + 1, and start a fresh AboveThreshold instance (fresh noise).
After K updates the model is frozen and keeps predicting with w~ for free.

Departures, each on purpose:
* A fire with an empty cache (possible only when AboveThreshold errs) uses an update
  slot and re-samples without changing w: data-independent (docs/privacy.md, "DP-Winnow").
* eta is rounded down to a rational so that w ~ exp(eta u) over integer scores u is
  sampled *exactly* (:mod:`mechanisms.categorical`); smaller eta only adds privacy.
* Predictions are computed in exact integers (w~ is m draws: <w~, x> = <counts, x> / m),
  so a tie is a tie, and ``learn_quiet`` (the rounds between two fires, vectorised)
  predicts exactly as ``learn_one`` does, in any batch.
* Inputs are binary rows given by their +1 features (``learners.protocol.ActiveRow``);
  a dense x in {-1, +1}^d is the list of its +1 coordinates.
* Charges follow a fixed schedule (eps^ per AboveThreshold instance, m draws of
  4 eta each, 2 eta^2-zCDP, per re-sample, see ``mechanisms.params.dp_winnow_guarantee``), each
  made before what it pays for can be released. A refused charge freezes the model
  (fail closed); the predictions stay available as post-processing.
* A person as the privacy unit (``params.max_contributions`` = k > 1): the mechanism
  runs at eps^ and eta (the person's divided by k) and each piece is charged k times its
  epsilon (``mechanisms.params.dp_winnow_charges``: k eps^, 4 k eta, 2 (k eta)^2-zCDP), so
  the ledger is in persons. DP-Winnow has one epoch: k bounds a person's examples over
  the whole stream. An example past the bound still makes its round (``pass_one``): no
  mistake, AboveThreshold asked the unchanged q, so the rounds count arriving examples.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from dpstream.mechanisms.above_threshold import AboveThreshold, AboveThresholdState
from dpstream.mechanisms.accounting import Ledger, LedgerState
from dpstream.mechanisms.categorical import sample_groups
from dpstream.mechanisms.errors import BudgetExhausted, ParameterError
from dpstream.mechanisms.params import DPWinnowParameters
from dpstream.mechanisms.randomness import KeyedRandomness

from .inputs import BinaryInput, active_matrix, embed, project, sign
from .protocol import Step
from .winnow import decode_array, encode_array

# A public, structural limit on m (docs/limits.md): a re-sample holds about a dozen
# m-long 8-byte arrays at its peak (the draws and the sampler's temporaries), ~100 MB at
# the limit. Theorem 11's m grows as 1/rho^2 (149,584 at rho = 0.1, 1.5e7 at 0.01 for
# eps 0.5, d 1000), so without it one registration could ask the worker for terabytes
# at its first update.
MAX_DRAWS = 1 << 20

AT_PURPOSE = "dp_winnow/above_threshold"
SAMPLE_PURPOSE = "dp_winnow/sample"


def rational_eta(eta: float) -> Fraction:
    """eta rounded down to about 30 significant bits (a dyadic rational)."""
    if not eta > 0:
        raise ParameterError("eta", eta, "> 0")
    shift = max(0, 30 - int(np.floor(np.log2(eta))))
    return Fraction(int(np.floor(eta * 2.0 ** shift)), 2 ** shift)


@dataclass
class DPWinnowState:
    """DP-Winnow's state as a plain record (seed 000 Algorithm 4.2: shadow scores, sampled w~,
    cached mistake, AboveThreshold counters)."""
    d: int
    signed: bool
    u: np.ndarray                       # shadow scores: w proportional to exp(eta u)
    tilde_idx: np.ndarray               # support of w~ (sorted)
    tilde_cnt: np.ndarray               # draws per support index (sums to m), empty = uniform
    at: AboveThresholdState
    ledger: LedgerState
    k: int = 0                          # updates done
    t: int = 0                          # labelled rounds seen
    t_p: int = 0
    mistakes: int = 0                   # q: mistakes since t_p
    total_mistakes: int = 0
    cache_x: dict | None = None         # first cached example ({'active'|'dense': [...]}), label
    cache_y: int = 0
    frozen: bool = False
    exhausted: bool = False

    def to_record(self) -> dict:
        return {**self.cold_record(), **self.hot_record()}

    def hot_record(self) -> dict:
        """The counters that change every round (tables write them with every batch)."""
        return {
            "d": self.d, "signed": self.signed, "at": vars(self.at).copy(),
            "ledger": vars(self.ledger).copy(), "k": self.k, "t": self.t, "t_p": self.t_p,
            "mistakes": self.mistakes, "total_mistakes": self.total_mistakes,
            "cache_x": self.cache_x, "cache_y": self.cache_y, "frozen": self.frozen,
            "exhausted": self.exhausted}

    def cold_record(self) -> dict:
        """The weights, which change only on the at most K updates (tables write them
        only then)."""
        return {"u": encode_array(self.u), "tilde_idx": encode_array(self.tilde_idx),
                "tilde_cnt": encode_array(self.tilde_cnt)}

    @classmethod
    def from_record(cls, r: dict) -> "DPWinnowState":
        r = dict(r)
        for key in ("u", "tilde_idx", "tilde_cnt"):
            r[key] = decode_array(r[key])
        r["at"] = AboveThresholdState(**r["at"])
        r["ledger"] = LedgerState(**r["ledger"])
        return cls(**r)


class DPWinnow:
    """Seed 000 Algorithm 4.2.

    >>> from dpstream.mechanisms.params import dp_winnow_practical_parameters
    >>> params = dp_winnow_practical_parameters(eps_hat=0.5, eta=0.2, m=50, K=5, L=3.0, delta=1e-6)
    >>> rng = KeyedRandomness(b"doc-key-012345678900000000000000")
    >>> model = DPWinnow(params=params, d=8, rng=rng, model_id="doc", budget=(params.epsilon, 1e-6))
    >>> model.learn_one([1, 2], +1).prediction in (-1, 1)
    True
    >>> model.predict_many([[1, 2], [5]]).tolist() in ([1, 1], [1, -1], [-1, 1], [-1, -1])
    True
    """

    def __init__(self, *, params: DPWinnowParameters, d: int, rng: KeyedRandomness, model_id: str,
                 budget: tuple[float, float] | None = None, signed: bool = False,
                 state: DPWinnowState | None = None, ledger_rule: str = "best", on_charge=None):
        if d < 2:
            raise ParameterError("d", d, ">= 2")
        self.params, self.rng, self.model_id = params, rng, model_id
        self.eta = rational_eta(params.eta)
        self.ledger: Ledger
        if state is None:
            eps, delta = budget if budget is not None else (params.epsilon, params.delta)
            self.ledger = Ledger.create(epsilon=eps, delta=delta, rule=ledger_rule)
            if on_charge:
                self.ledger.on_entry.append(on_charge)
            dim = 2 * d if signed else d
            state = DPWinnowState(d, signed, np.zeros(dim, dtype=np.int64),
                                  np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                                  AboveThresholdState(instance=0), self.ledger.state)
            self.state = state
            self._charge_or_freeze("above_threshold", params.charges().above_threshold, 1)
        else:
            self.state = state
            self.ledger = Ledger(state.ledger, on_entry=[on_charge] if on_charge else [])
        self._refresh_tilde()
        self._at = self._make_at()

    # ---------------------------------------------------------------- helpers
    def _make_at(self) -> AboveThreshold | None:
        s = self.state
        if s.frozen:
            return None
        return AboveThreshold(epsilon=self.params.eps_hat, threshold=self.params.L,
                              beta=self.params.beta / self.params.T, rng=self.rng,
                              model_id=self.model_id, state=s.at, purpose=AT_PURPOSE)

    def _refresh_tilde(self) -> None:
        """Predictions from w~ in exact integers: w~ = c / scale with integer c (draw counts
        over m, or all ones over the dimension for the uniform start), so
        sgn(<w~, x>) = sgn(<c', x>) with c' the d-length projection of c; ``_c`` holds c'
        and a zero pad slot at index d (``active_matrix`` rows). Exact sums make a
        prediction the same alone or in a batch, in any summation order."""
        s = self.state
        dim = s.u.size
        if s.tilde_idx.size == 0:                      # w~(1) = uniform (seed's initialisation)
            counts, self._scale = np.ones(dim, dtype=np.int64), dim
        else:
            counts, self._scale = np.zeros(dim, dtype=np.int64), self.params.m
            counts[s.tilde_idx] = s.tilde_cnt
        self._c = np.append(project(counts, s.signed), 0)
        self._c_total = int(self._c.sum())

    def _charge_or_freeze(self, mechanism: str, eps: float, count: int,
                          rho: float | None = None) -> bool:
        try:
            self.ledger.charge(mechanism, eps, 0.0, count, rho)
        except BudgetExhausted:
            self.state.frozen = self.state.exhausted = True
            self.state.ledger = self.ledger.state
            return False
        self.state.ledger = self.ledger.state
        return True

    def _resample(self) -> None:
        """w~ <- empirical distribution of m i.i.d. draws j ~ w, w_j ~ exp(eta u_j), exactly."""
        s = self.state
        values, inverse, counts = np.unique(s.u, return_inverse=True, return_counts=True)
        stream = self.rng.stream(self.model_id, SAMPLE_PURPOSE, s.k)
        groups = sample_groups(stream, counts, [-self.eta * int(v) for v in values], self.params.m)
        order = np.argsort(inverse, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        members = order[starts[groups] + stream.below(counts[groups])]
        s.tilde_idx, s.tilde_cnt = np.unique(members, return_counts=True)
        self._refresh_tilde()

    # ---------------------------------------------------------------- API
    def _input(self, active) -> BinaryInput:
        return BinaryInput.from_active(active, self.state.d)

    def margin(self, active) -> float:
        """<w~, x> for the row whose +1 features are ``active`` (exact up to the final
        division)."""
        x = self._input(active)
        return (2 * int(self._c[:-1][x.active].sum()) - self._c_total) / self._scale

    def predict_one(self, active) -> int:
        """sgn(<w~, x>): post-processing of the released w~, free."""
        return sign(self.margin(active))

    def predict_many(self, actives) -> np.ndarray:
        rows = active_matrix(actives, self.state.d, pad=self.state.d)
        return np.where(2 * self._c[rows].sum(axis=1) - self._c_total >= 0, 1, -1)

    def learn_many(self, actives, ys) -> list[Step]:
        """``learn_one`` on each row in turn, with the rounds between two AboveThreshold
        fires through the vectorised kernel (``learn_quiet``): the same steps, state and
        charges. Raises before learning anything if a row or label is invalid."""
        d = self.state.d
        rows = active_matrix(actives, d, pad=d)
        ys = np.asarray(ys, dtype=np.int64).reshape(-1)
        if ys.size != len(rows) or (ys.size and not np.isin(ys, (-1, 1)).all()):
            raise ParameterError("y", "<labels>", "one label per row, each -1 or +1")
        steps: list[Step] = []
        a = 0
        while a < len(ys):
            version = self.state.k
            preds = self.learn_quiet(rows[a:], ys[a:], lambda i: {"active": sorted(set(actives[a + i]))})
            steps.extend(Step(int(p), version) for p in preds)
            a += len(preds)
            if a < len(ys):
                steps.append(self.learn_one(actives[a], int(ys[a])))
                a += 1
        return steps

    def learn_quiet(self, rows: np.ndarray, ys: np.ndarray, cache_record) -> np.ndarray:
        """``learn_one`` over consecutive rounds, for as long as AboveThreshold does not
        fire: the rounds it applies change the state exactly as ``learn_one`` on each
        would, and their predictions are returned; the round at which it would fire is
        left for ``learn_one`` (its update and charges), so ``len(result)`` < ``len(ys)``
        says one is due. A frozen model applies every round.

        ``rows``: ``active_matrix(., d, pad=d)`` of the inputs; ``ys``: labels, -1 or +1;
        ``cache_record(i)``: the record the mistake cache keeps of input i."""
        s = self.state
        z = 2 * self._c[rows].sum(axis=1) - self._c_total
        yhat = np.where(z >= 0, 1, -1)
        wrong = yhat != ys
        n = len(ys) if s.frozen else self._at.quiet(s.mistakes + np.cumsum(wrong))
        mistakes = int(wrong[:n].sum())
        s.t += n
        s.total_mistakes += mistakes
        if not s.frozen and mistakes:
            s.mistakes += mistakes
            if s.cache_x is None:
                first = int(wrong.argmax())
                s.cache_x, s.cache_y = cache_record(first), int(ys[first])
        return yhat[:n]

    def learn_one(self, active, y: int) -> Step:
        if y not in (-1, 1):
            raise ParameterError("y", y, "-1 or +1")
        s = self.state
        x = self._input(active)
        yhat = self.predict_one(active)
        version = s.k
        s.t += 1
        if yhat != y:
            s.total_mistakes += 1
        if s.frozen:
            return Step(yhat, version)
        if yhat != y:
            s.mistakes += 1
            if s.cache_x is None:
                s.cache_x, s.cache_y = x.to_record(), y
        if not self._at.step(s.mistakes):
            return Step(yhat, version)
        return self._update(yhat, version)

    def pass_quiet(self, n: int) -> int:
        """Rounds of examples that teach nothing (``pass_one``), for as long as
        AboveThreshold does not fire: how many were applied (all n on a frozen model); the
        round at which it would fire is left for ``pass_one``, as ``learn_quiet`` does."""
        s = self.state
        done = n if s.frozen else self._at.quiet(np.full(n, s.mistakes, dtype=np.int64))
        s.t += done
        return done

    def pass_one(self) -> Step:
        """A round whose example teaches nothing (one that may not reach the learner: a
        person past their bound, agents/units.py): no prediction, no mistake, so the query
        q stays as it was, asked all the same. Rounds then count arriving examples, and
        whether one reached the learner changes only q, under AboveThreshold's noise."""
        s = self.state
        version = s.k
        s.t += 1
        if s.frozen or not self._at.step(s.mistakes):
            return Step(None, version)
        return self._update(None, version)

    def _update(self, yhat: int | None, version: int) -> Step:
        """AboveThreshold fired (k < K holds while not frozen): update, re-sample, restart."""
        s = self.state
        charge = self.params.charges()
        if not self._charge_or_freeze("weight_draw", charge.draw, self.params.m, charge.draw_rho):
            return Step(yhat, version)
        if s.cache_x is not None:
            s.u = s.u + s.cache_y * embed(BinaryInput.from_record(s.cache_x, s.d), s.signed)
        self._resample()
        s.k += 1
        s.mistakes, s.cache_x, s.cache_y, s.t_p = 0, None, 0, s.t + 1
        if s.k >= self.params.K:
            s.frozen = True
        else:
            s.at = AboveThresholdState(instance=s.k)
            if self._charge_or_freeze("above_threshold", charge.above_threshold, 1):
                self._at = self._make_at()
        if s.frozen:
            self._at = None
        return Step(yhat, s.k, released=True)
