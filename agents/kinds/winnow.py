"""Kind ``winnow``: the seed's DP-Winnow (seed 000 Algorithm 4.2, learners/dp_winnow.py).

Records: ``head`` (the learner's counters, AboveThreshold state, ledger; every batch),
``weights/<k>`` (shadow scores and the sampled w~ after k updates; written on an update).
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from dpstream.learners.dp_winnow import MAX_DRAWS, DPWinnow, DPWinnowState
from dpstream.learners.inputs import active_matrix
from dpstream.mechanisms.above_threshold import above_threshold_scales
from dpstream.mechanisms.accounting import Ledger
from dpstream.mechanisms.errors import BudgetExhausted, DPStreamError
from dpstream.mechanisms.params import (DPWinnowParameters, dp_winnow_draw_rho, dp_winnow_guarantee,
                                        dp_winnow_practical_parameters, dp_winnow_theory_parameters)
from dpstream.schemas.config import KindParams

from .base import Handler, Outputs, max_contributions
from .storage import RECORD_BYTES


class WinnowParams(KindParams):
    """DP-Winnow (seed 000 Algorithm 4.2). ``theory`` mode derives eps^, eta, m, K and L
    from the budget by Theorem 11; ``practical`` mode takes them as given and reports what
    they guarantee."""
    kind: Literal["winnow"] = "winnow"
    mode: Literal["theory", "practical"] = "practical"
    rho: float = Field(default=0.1, gt=0, le=1)
    T: int = Field(default=1_000_000, ge=1)
    beta: float = Field(default=0.01, gt=0, lt=1)
    c: float = Field(default=0.25, gt=0, lt=0.5)
    signed: bool = False
    eps_hat: float | None = Field(default=None, gt=0)
    eta: float | None = Field(default=None, gt=0)
    m: int | None = Field(default=None, ge=1, le=MAX_DRAWS)
    K: int | None = Field(default=None, ge=1)
    L: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _practical_complete(self):
        if self.mode == "practical" and None in (self.eps_hat, self.eta, self.m, self.K, self.L):
            raise ValueError("practical mode needs eps_hat, eta, m, K and L")
        return self


def winnow_parameters(config) -> DPWinnowParameters:
    """The registration's DP-Winnow parameters, in its privacy unit: for a person with k
    examples (``privacy_unit``), theory mode's epsilon and practical mode's eps_hat and eta
    are the person's, and the mechanism runs at them divided by k (mechanisms/params.py
    ``dp_winnow_charges``)."""
    p, b, k = config.params, config.budget, max_contributions(config)
    if p.mode == "theory":
        return dp_winnow_theory_parameters(epsilon=b.epsilon, delta=b.delta, rho=p.rho, T=p.T,
                                           beta=p.beta, d=2 * config.dimension if p.signed
                                           else config.dimension, c=p.c, max_contributions=k)
    return dp_winnow_practical_parameters(eps_hat=p.eps_hat, eta=p.eta, m=p.m, K=p.K, L=p.L,
                                          delta=b.delta, rho=p.rho, c=p.c, T=p.T, beta=p.beta,
                                          max_contributions=k)


def active_of(event: dict) -> list[int]:
    """A binary row's +1 features: ``active``, or the +1 coordinates of a dense x."""
    if "active" in event:
        return event["active"]
    return [j for j, v in enumerate(event["x"]) if v > 0]


class WinnowKind(Handler):
    name = "winnow"
    Params = WinnowParams
    online = True
    mechanisms = ("above_threshold", "weight_draw")
    # Runs of fewer examples go one at a time (the same outputs: predictions are exact
    # integers): measured, a 12-example batch through numpy cost as much as 12 rounds,
    # a 16-example one a fifth less.
    batch_from = 16

    # ------------------------------------------------------------ the kind
    @classmethod
    def config_problem(cls, config) -> str | None:
        p, d = config.params, config.dimension
        dim = 2 * d if p.signed else d
        draws = min(p.m or dim, dim)
        size = 32 * (dim + 2 * draws) // 3              # three base64 int64 arrays
        if size > RECORD_BYTES:
            return (f"DP-Winnow keeps its weights in one record: dimension {d} needs about "
                    f"{size:,} bytes, above the {RECORD_BYTES:,}-byte record limit")
        try:
            w = winnow_parameters(config)
        except DPStreamError as err:
            return str(err)
        if w.note:
            return w.note
        try:        # the learner's first AboveThreshold, as its first event builds it
            above_threshold_scales(w.eps_hat)
        except DPStreamError as err:    # before (issue 43): accepted, then dead-lettered
            return str(err)
        if w.m > MAX_DRAWS:
            return (f"these settings need m={w.m:.4g} weight draws per update: more than the "
                    f"{MAX_DRAWS:,} DP-Winnow may draw (a structural limit, docs/limits.md): "
                    "raise rho, or use practical mode with m at most the limit")
        # The first AboveThreshold instance, one update's draws and the next instance must
        # fit the budget (charged as the learner will charge them), or the model is
        # exhausted before it can learn anything.
        b, charge = config.budget, w.charges()
        ledger = Ledger.create(epsilon=b.epsilon, delta=b.delta)
        try:
            ledger.charge("above_threshold", charge.above_threshold)
            ledger.charge("weight_draw", charge.draw, 0.0, w.m, charge.draw_rho)
            ledger.charge("above_threshold", charge.above_threshold)
        except BudgetExhausted:
            return (f"the budget eps={b.epsilon:g} cannot pay for one update: these settings "
                    f"(eps^={w.eps_hat:g}, eta={w.eta:g}, m={w.m}) need more, and certify "
                    f"eps={w.epsilon:.4g} for K={w.K} updates: raise the budget or lower eta and m")
        except DPStreamError:   # a charge that is no finite number: before, "malformed event"
            return (f"these settings (eps^={w.eps_hat:.4g}, eta={w.eta:.4g}, delta={b.delta:.4g}) make "
                    "one update's privacy charge infinite: lower eta and eps_hat, or raise delta")
        return None

    @classmethod
    def status(cls, config, head):
        s = head["learner"]
        return {"epoch": 0, "rounds": s["t"], "updates": s["k"], "frozen": s["frozen"],
                "exhausted": s["exhausted"]}, s["ledger"]

    @classmethod
    def registration_notes(cls, config) -> list[str]:
        """A person as the privacy unit: what the guarantee is per person and per example."""
        try:
            w = winnow_parameters(config)
        except DPStreamError:
            return []
        if w.max_contributions == 1:
            return cls.unit_note(config, w.epsilon, w.epsilon)
        per_example = dp_winnow_guarantee(eps_hat=w.eps_hat, eta=w.eta, m=w.m, K=w.K, delta=w.delta)
        return cls.unit_note(config, w.epsilon, per_example.epsilon)

    @classmethod
    def parameter_rows(cls, config):
        w = winnow_parameters(config)
        theory = w.source == "theorem-11"
        src = "seed 000 Thm 11 + Lemma 14 (solved jointly)" if theory else "user (practical mode)"
        if w.max_contributions > 1:
            return cls._person_rows(w, src)
        return [("eps^ (AboveThreshold)", f"{w.eps_hat:.4g}", src), ("eta", f"{w.eta:.4g}", src),
                ("m (draws per w~)", str(w.m), "Hoeffding (mechanisms/params.py)" if theory else src),
                ("K (update cap)", f"{w.K:.4g}", src),
                ("L (threshold)", f"{w.L:.4g}", "8 ln(2T^2/beta)/eps^" if theory else src),
                ("draw zCDP 2 eta^2", f"{dp_winnow_draw_rho(w.eta):.4g}", "bounded range (Cesar-Rogers)"),
                ("guaranteed eps", f"{w.epsilon:.4g}",
                 "Thm 11 composition (mechanisms.params.dp_winnow_guarantee)")]

    @staticmethod
    def _person_rows(w, src: str) -> list[tuple[str, str, str]]:
        """The rows of a registration whose privacy unit is a person with k examples."""
        k, charge = w.max_contributions, w.charges()
        return [("privacy unit", f"a person: at most {k} examples over the stream",
                 "registration (the agents admit a person's first k in log order)"),
                ("eps^ per person, AboveThreshold runs at", f"{charge.above_threshold:.4g}, {w.eps_hat:.4g}",
                 f"{src}; the mechanism at the person's / k (mechanisms.params.dp_winnow_charges)"),
                ("eta per person, the learner runs at", f"{k * w.eta:.4g}, {w.eta:.4g}", src),
                ("m (draws per w~)", str(w.m), "Hoeffding (mechanisms/params.py)" if w.source == "theorem-11" else src),
                ("K (update cap)", f"{w.K:.4g}", src if w.source != "theorem-11" else
                 "Lemma 14 with the learner's eta"),
                ("L (threshold)", f"{w.L:.4g}", "8 ln(2T^2/beta)/eps^ at the mechanism's eps^"
                 if w.source == "theorem-11" else src),
                ("charges per instance, per draw (person)", f"{charge.above_threshold:.4g}, {charge.draw:.4g}",
                 "k times the mechanism's epsilon (group privacy, pure DP: exact)"),
                ("draw zCDP per person 2 (k eta)^2", f"{charge.draw_rho:.4g}", "bounded range (Cesar-Rogers)"),
                ("guaranteed eps per person", f"{w.epsilon:.4g}",
                 "Thm 11 composition of the person's charges (mechanisms.params.dp_winnow_guarantee)")]

    # ------------------------------------------------------------ one model
    def create(self, outputs: Outputs) -> None:
        self._begin(outputs)
        self.model = DPWinnow(params=winnow_parameters(self.config), d=self.config.dimension,
                              rng=self.rng, model_id=self.model_id, signed=self.config.params.signed,
                              budget=(self.config.budget.epsilon, self.config.budget.delta),
                              on_charge=self._charged)
        self._saved_k = None

    def load(self, head: dict) -> None:
        self._load_head(head)
        hot = head["learner"]
        cold = self.state[self.key("weights", hot["k"])]
        self.model = DPWinnow(params=winnow_parameters(self.config), d=self.config.dimension,
                              rng=self.rng, model_id=self.model_id,
                              state=DPWinnowState.from_record({**hot, **cold}),
                              on_charge=self._charged)
        self._saved_k = hot["k"]

    def save(self) -> None:
        hot = self.model.state.hot_record()
        if self._saved_k != hot["k"]:
            self._put(self.key("weights", hot["k"]), self.model.state.cold_record())
            self._saved_k = hot["k"]
        self._write_head({"learner": hot})

    def live(self) -> set[str]:
        return {self.key("weights", self.model.state.k)}

    def ledger_record(self):
        return self.model.ledger.state

    def internal_mistakes(self) -> int:
        return self.model.state.total_mistakes

    def unit_slot(self) -> tuple[int, None]:
        """One epoch, 0, for the whole stream: a person's bound counts over all of it."""
        return 0, None

    def pass_over(self, items, outputs) -> None:
        """Each makes its round and teaches nothing (``DPWinnow.pass_one``: no mistake, the
        query asked all the same), so ``rounds`` counts arriving examples: the stretches in
        which AboveThreshold does not fire at once (``pass_quiet``), a round at which it
        fires as ``on_example`` records one."""
        a = 0
        while a < len(items):
            version, status = self.model.state.k, self._example_status()
            done = self.model.pass_quiet(len(items) - a)
            self._predict_rows(outputs, items[a:a + done], status, version)
            a += done
            if a < len(items):
                self._begin(outputs)
                step = self.model.pass_one()
                event, source = items[a]
                self._predict("example", source, event, None, self._example_status(), step.version,
                              step.released)
                a += 1

    def _status(self) -> str:
        s = self.model.state
        return "budget_exhausted" if s.exhausted else ("frozen" if s.frozen else "answered")

    def _example_status(self) -> str:
        return "learning" if self._status() == "answered" else self._status()

    def on_example(self, event, source, outputs) -> None:
        """The record of a labelled example carries no label: sgn(<w~, x_t>) is a function
        of the private example that Theorem 11 (which covers the hypothesis sequence w~)
        does not cover. Version and update flag are functions of w~'s sequence."""
        self._begin(outputs)
        step = self.model.learn_one(active_of(event), event["y"])
        self._predict("example", source, event, None, self._example_status(), step.version,
                      step.released)

    def prepare_examples(self, items):
        d, actives = self.config.dimension, []
        for event, _ in items:
            if "active" in event:
                actives.append(event["active"])
                continue
            x = event["x"]
            if len(x) != d or not all(v == 1 or v == -1 for v in x):
                raise ValueError("not a dense input of the model's dimension in {-1, +1}")
            actives.append([j for j, v in enumerate(x) if v > 0])
        ys = [event["y"] for event, _ in items]
        if not all(type(y) is int and (y == 1 or y == -1) for y in ys):
            raise ValueError("a label is not -1 or +1")
        return active_matrix(actives, d, pad=d), np.asarray(ys, dtype=np.int64)

    def on_examples(self, items, prepared, outputs) -> None:
        """The stretches in which AboveThreshold does not fire through the learner's batch
        kernel (``learn_quiet``), each round at which it fires through ``on_example``."""
        rows, ys = prepared
        a = 0
        while a < len(items):
            version, status = self.model.state.k, self._example_status()
            done = len(self.model.learn_quiet(
                rows[a:], ys[a:], lambda i: {"active": sorted(set(active_of(items[a + i][0])))}))
            self._predict_rows(outputs, items[a:a + done], status, version)
            a += done
            if a < len(items):
                self.on_example(*items[a], outputs)
                a += 1

    def on_query(self, event, source, outputs) -> None:
        self._begin(outputs)
        label = self.model.predict_one(active_of(event))
        self._predict("query", source, event, label, self._status(), self.model.state.k)
