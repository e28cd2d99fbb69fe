"""Kind ``decision_list``: DP-GreedyCover (seed 000 Algorithm 3.1) trained once per window of
examples, each window on its own examples (learners/decision_list_classifier.py
``private_fit``); queries are answered by the last released list.

Records: ``head`` (buffered count, version, window, the window's ledger),
``buffer/<window>/<chunk>`` (the window's rows as 0/1), ``release/<version>`` (the
released list).

A window is ``window`` arriving examples. With a person as the privacy unit, an example
that does not reach the learner (agents/units.py) takes its place in the window as an
empty row: it counts toward the window (so when a window trains, and ``buffered_examples``
on /status, depend on the arrivals alone) and is not among the rows it trains on.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field

from dpstream.learners.decision_list import DecisionList, FeatureFamily
from dpstream.learners.decision_list_classifier import private_fit, round_plan
from dpstream.mechanisms.accounting import LedgerState
from dpstream.mechanisms.errors import DPStreamError
from dpstream.mechanisms.exponential import exact_epsilon
from dpstream.schemas import Release
from dpstream.schemas.config import KindParams

from .base import Handler, max_contributions
from .storage import BIT_BYTES, RECORD_BYTES, rows_per_record

MAX_FEATURES = 200_000


class DecisionListParams(KindParams):
    """DP decision lists trained per window of ``window`` examples (disjoint windows)."""
    kind: Literal["decision_list"] = "decision_list"
    window: int = Field(ge=1, le=10_000_000)  # examples per training window (disjoint)
    max_conjunction: int = Field(default=1, ge=1, le=3)
    negations: bool = True
    accounting: Literal["set_cover", "advanced", "basic"] = "set_cover"


def feature_count(d: int, max_conjunction: int, negations: bool) -> int:
    """|F| of a FeatureFamily without building it: conjunctions of j distinct variables,
    each literal positive or (with negations) negative."""
    return sum(math.comb(d, j) * (2 ** j if negations else 1) for j in range(1, max_conjunction + 1))


def rules_problem(d: int, p) -> str | None:
    """Why the candidate rules of a decision-list family would not fit in memory."""
    n_features = feature_count(d, p.max_conjunction, p.negations)
    if n_features > MAX_FEATURES:
        return (f"{n_features:,} candidate rules (d={d}, conjunctions up to "
                f"{p.max_conjunction}) exceed the {MAX_FEATURES:,} that a decision-list "
                "learner can hold in memory: lower max_conjunction or the dimension")
    return None


def family(config) -> FeatureFamily:
    p = config.params
    return FeatureFamily(config.dimension, p.max_conjunction, p.negations)


class DecisionListKind(Handler):
    name = "decision_list"
    Params = DecisionListParams
    heavy = True            # a window's training runs DP-GreedyCover over the window
    mechanisms = ("dp_greedy_cover[set_cover]", "dp_greedy_cover[advanced]", "dp_greedy_cover[basic]")
    epochs_on_fresh_examples = True

    # ------------------------------------------------------------ the kind
    @classmethod
    def config_problem(cls, config) -> str | None:
        d, p, b = config.dimension, config.params, config.budget
        if rows_per_record(d + 1, BIT_BYTES, 256) == 0:
            return (f"decision-list rows of dimension {d} do not fit one record: at most "
                    f"{RECORD_BYTES // BIT_BYTES - 1:,} dimensions")
        problem = rules_problem(d, p)
        if problem:
            return problem
        rules = feature_count(d, p.max_conjunction, p.negations)   # |F|, without building F
        try:          # a round's epsilon the exponential mechanism's sampler can use
            exact_epsilon(round_plan(p.accounting, b.epsilon, b.delta, rules,
                                     max_contributions(config)).epsilon)
        except DPStreamError as err:
            return str(err)
        return None

    @classmethod
    def registration_notes(cls, config) -> list[str]:
        """A person as the privacy unit: epsilon per person (the budget, for a window's run)
        and per example, one line."""
        try:
            plan = cls._plan(config)
        except DPStreamError:
            return []
        return cls.unit_note(config, config.budget.epsilon, plan.example_epsilon)

    @staticmethod
    def _plan(config):
        p, b = config.params, config.budget
        return round_plan(p.accounting, b.epsilon, b.delta,
                          feature_count(config.dimension, p.max_conjunction, p.negations),
                          max_contributions(config))

    @classmethod
    def status(cls, config, head):
        return {"epoch": head["epoch"], "releases": head["version"],
                "buffered_examples": head["buffer_n"], "exhausted": False}, head["ledger"]

    @classmethod
    def parameter_rows(cls, config):
        p = config.params
        plan = cls._plan(config)
        rows = [("window", str(p.window), "registration"),
                ("per-round eps", f"{plan.epsilon:.4g}", f"{p.accounting} analysis (mechanisms.params)")]
        if config.privacy_unit is None:
            return rows
        k = max_contributions(config)
        return rows + [("privacy unit", f"a person: at most {k} rows per window",
                        "registration (the agents admit a person's first k in log order)"),
                       ("round: score sensitivity, eps per example",
                        f"{plan.sensitivity}, {plan.mechanism_epsilon:.4g}",
                        f"{plan.analysis} at the person level (mechanisms.params.greedy_cover_person_round)")]

    # ------------------------------------------------------------ one model
    def create(self, outputs) -> None:
        self._begin(outputs)
        self.family = family(self.config)
        self.buffer_n, self.version, self.epoch, self.released = 0, 0, 0, None
        self.ledger_state: LedgerState | None = None

    def load(self, head: dict) -> None:
        self._load_head(head)
        self.family = family(self.config)
        self.buffer_n, self.version, self.epoch = head["buffer_n"], head["version"], head["epoch"]
        self.ledger_state = None if head["ledger"] is None else LedgerState(**head["ledger"])
        self.released = None
        if self.version:
            rec = self.state[self.key("release", self.version)]
            self.released = DecisionList(self.family, tuple(map(tuple, rec["rules"])), rec["default"])

    def save(self) -> None:
        ledger = None if self.ledger_state is None else dict(vars(self.ledger_state))
        self._write_head({"buffer_n": self.buffer_n, "version": self.version,
                          "epoch": self.epoch, "ledger": ledger})

    def live(self) -> set[str]:
        """The current window's buffer and the current release (``load``)."""
        keys = self._chunks("buffer", self.epoch, n=self.buffer_n, per=self.chunk)
        return keys | ({self.key("release", self.version)} if self.version else set())

    def ledger_record(self):
        return self.ledger_state

    def unit_slot(self) -> tuple[int, None]:
        """The window being collected: a person's bound counts per training window."""
        return self.epoch, None

    def _row(self, event) -> np.ndarray:
        """The 0/1 row of a binary input (dense x in {-1, +1}^d or active indices)."""
        if "x" in event:
            return np.asarray(event["x"]) > 0
        row = np.zeros(self.config.dimension, dtype=bool)
        row[event["active"]] = True
        return row

    def on_example(self, event, source, outputs) -> None:
        self._take(event, source, outputs, self._row(event).astype(int).tolist() + [int(event["y"] > 0)])

    def pass_over(self, items, outputs) -> None:
        """Each takes its place in the window as an empty row (module docstring)."""
        for event, source in items:
            self._take(event, source, outputs, [])

    def _take(self, event, source, outputs, row: list) -> None:
        """An example's place in the window (its 0/1 row and label, or empty), the window
        trained once it is full, and the example's record."""
        self._begin(outputs)
        self.buffer_n = self._append_row(self.epoch, self.buffer_n, row)
        if self.buffer_n >= self.config.params.window:
            self._train()
        self._predict("example", source, event, None, "learning", self.version)

    def _train(self) -> None:
        """DP-GreedyCover on the window's rows (the places of examples that did not reach
        the learner left out: any number of rows, none included), charged first."""
        p, b = self.config.params, self.config.budget
        rows = [r for r in self._load_rows(self.epoch, self.buffer_n) if r]
        rows = np.asarray(rows, dtype=np.int8).reshape(len(rows), self.config.dimension + 1)
        stream = self.rng.stream(self.model_id, "dp_greedy_cover", self.epoch)
        dl, ledger = private_fit(self.family, rows[:, :-1].astype(bool), rows[:, -1],
                                 epsilon=b.epsilon, delta=b.delta, accounting=p.accounting,
                                 stream=stream, on_charge=self._charged,
                                 max_contributions=max_contributions(self.config))
        self.ledger_state = ledger.state
        self.version += 1
        rec = dl.to_record()
        self._put(self.key("release", self.version), rec)
        self.released = dl
        self._out.add("releases", self.model_id, Release(
            model_id=self.model_id, seq=self.event_seq, version=self.version, rules=dl.describe(),
            payload=rec).model_dump())
        self.epoch += 1
        self.buffer_n = 0

    def spent_epoch(self) -> int:
        """The window the released list was trained on (its ledger is what ``spent()``
        reads), not the window now being collected: before, a prediction said epoch 1 while
        showing the charge of epoch 0 (and epoch 2, which had no charge yet, after)."""
        return self.epoch - 1 if self.version else 0

    def on_query(self, event, source, outputs) -> None:
        self._begin(outputs)
        if self.released is None:
            self._predict("query", source, event, None, "learning", 0)
            return
        label = 1 if int(self.released.predict(self._row(event).reshape(1, -1))[0]) == 1 else -1
        self._predict("query", source, event, label, "answered", self.version)
