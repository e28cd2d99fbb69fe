"""Per-kind model handlers: load a learner from the state mapping, apply one event,
write back what changed, and describe the outputs.

Keys (all under ``model/<id>/``): ``config``; ``head`` (written once per batch of events: log
position, input positions, the learner's small counters); versioned cold records
``weights/<k>`` (DP-Winnow), ``buffer/<epoch>/<chunk>`` (buffered samples),
``hyp/<epoch>/<version>/<chunk>`` (predictor hypotheses), ``release/<version>``
(decision lists), ``params``, ``node/<epoch>/<t>/<chunk>`` and ``offset/<epoch>/<chunk>``
(continual Winnow).

Cold records are retired once no state can read them again: every cold write goes
through ``Handler._put``, and ``_write_head`` deletes, right after the head, each record
this handler wrote or loaded that the new head no longer needs (``live``). A node of the
tree that left the prefix's decomposition, a hypothesis set of an older version, the
sample of a finished epoch: without this a worker's store and its changelog grow with
every block and every epoch, forever. (A record leaves ``live`` only when another is
written: a block closes, a version, window or epoch begins, DP-Winnow updates; so heads
of batches that wrote no cold record skip the check.) Crash order: the deletions follow the head that
drops them in the same changelog partition (one producer, one request in flight per
partition: aiokafka ``Sender`` mutes a partition while its batch is in flight), so a
restart that finds a deletion also finds that head; a restart from an older head finds
every record the older head reads (none was deleted before the newer head). Deletions
are a function of the head and the log, so re-applying a batch after a crash deletes
the same records.
"""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np

from dpstream.learners.continual_winnow import (ContinualWinnow, ContinualWinnowParameters,
                                                ContinualWinnowState, continual_winnow_parameters)
from dpstream.learners.decision_list import DecisionList, FeatureFamily
from dpstream.learners.dp_winnow import DPWinnow, DPWinnowState
from dpstream.learners.decision_list_classifier import round_epsilon
from dpstream.learners.generators import (DecisionLists, FiniteClass, Halfspaces, Intervals,
                                          MonotoneConjunctions, Thresholds)
from dpstream.learners.greedy_cover import dp_greedy_cover
from dpstream.learners.inputs import BinaryInput, active_matrix
from dpstream.learners.predictor import (EXHAUSTED, HARD, NO_EPOCH, PredictorConfig, PredictorState,
                                         PrivatePredictor, size_predictor)
from dpstream.learners.winnow import decode_array, encode_array
from dpstream.mechanisms.accounting import Ledger, LedgerEntry, LedgerState, spent
from dpstream.mechanisms.continual import closed_nodes
from dpstream.mechanisms.errors import DPStreamError
from dpstream.mechanisms.exponential import exact_epsilon
from dpstream.mechanisms.params import dp_winnow_practical_parameters, dp_winnow_theory_parameters
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LedgerEntryEvent, ModelConfig, Release

# Every state record stays well below Kafka's default 1 MiB message limit: chunk sizes
# follow the dimension, and a model whose single record cannot fit is refused at
# registration (``state_problem``), never discovered by a worker that then crash-loops.
RECORD_BYTES = 600_000       # budget per record, JSON as faust writes it
FLOAT_BYTES, BIT_BYTES = 25, 3   # worst-case JSON bytes of one float / one 0-1 int, with ", "


def rows_per_record(values_per_row: int, value_bytes: int, cap: int) -> int:
    """How many rows of ``values_per_row`` values fit in one record (0: not even one)."""
    return min(cap, RECORD_BYTES // (values_per_row * value_bytes))


class Outputs:
    def __init__(self):
        self.items: list[tuple[str, str, dict]] = []

    def add(self, topic: str, key: str, value: dict) -> None:
        self.items.append((topic, key, value))


class Handler:
    BATCH_FROM = 1          # shortest run of examples ``on_examples`` takes (if the kind has it)

    def __init__(self, config: ModelConfig, rng: KeyedRandomness, state):
        self.config, self.rng, self.state = config, rng, state
        self.model_id = config.model_id
        self.log_offset = -1                # last applied offset of the model-events log
        self.head_sources: dict[str, int] = {}   # last applied offset per input partition
        self.events = 0                     # events applied to this model (runtime-independent)
        self.event_seq = -1                 # the event being handled: its outputs' ``seq``
        self._out: Outputs | None = None
        self.epoch = 0
        self.stored: set[str] = set()       # cold records written or read since the last head
        self._put_since_head = False

    def key(self, *parts) -> str:
        return "/".join(["model", self.model_id, *map(str, parts)])

    @property
    def chunk(self) -> int:
        """Buffered rows per record: 256, fewer for wide rows."""
        binary = self.config.kind == "decision_list"
        return rows_per_record(self.config.dimension + 1, BIT_BYTES if binary else FLOAT_BYTES, 256)

    # ------------------------------------------------------------ outputs
    def _charged(self, entry: LedgerEntry) -> None:
        b = self.config.budget
        self._out.add("ledger", self.model_id, LedgerEntryEvent(
            model_id=self.model_id, seq=self.event_seq, epoch=self.epoch, mechanism=entry.mechanism,
            epsilon=entry.epsilon, delta=entry.delta, count=entry.count, charges=entry.charges,
            spent_epsilon=entry.spent_epsilon, spent_delta=entry.spent_delta, rule=entry.rule,
            budget_epsilon=b.epsilon, budget_delta=b.delta,
            key_fingerprint=self.rng.fingerprint(), rho=entry.rho).model_dump())

    def _predict(self, kind, source, event, label, status, version, updated=False) -> None:
        """One ``Prediction`` record, built as the dict ``Prediction(...).model_dump()``
        gives (one per event on the hot path: no model object per record; the tests
        validate every emitted record against the schema)."""
        self._out.add("predictions", self.model_id, self._prediction(
            kind, source, event, label, status, version, updated, float(self.spent())))

    def _predict_rows(self, outputs: Outputs, items, status: str, version: int) -> None:
        """``_begin`` then ``_predict`` (an example's record: no label, not updated) for
        each of ``items`` (event, source, offset), between which the model did not move."""
        if not items:
            return
        spent, seq = float(self.spent()), self.events
        self.events += len(items)
        add = outputs.add
        for i, (event, source, _) in enumerate(items):
            add("predictions", self.model_id, self._prediction(
                "example", source, event, None, status, version, False, spent, seq + i))
        self.event_seq, self._out = seq + len(items) - 1, outputs

    def _prediction(self, kind, source, event, label, status, version, updated, spent,
                    seq=None) -> dict:
        return {"model_id": self.model_id, "source": source,
                "seq": self.event_seq if seq is None else seq, "kind": kind,
                "query_id": event.get("query_id"), "label": None if label is None else int(label),
                "status": status, "version": int(version), "epsilon_spent": spent,
                "epsilon_left": max(0.0, self.config.budget.epsilon - spent), "updated": bool(updated)}

    def _begin(self, outputs: Outputs) -> None:
        """Start handling one event: its outputs carry the model's own event counter as
        ``seq`` (the same in every runtime, unlike log offsets)."""
        self.event_seq, self._out = self.events, outputs
        self.events += 1

    # ------------------------------------------------------------ buffers
    def _append_row(self, epoch: int, n: int, row: list) -> int:
        chunk = n // self.chunk
        key = self.key("buffer", epoch, chunk)
        # truncate: after a crash the chunk may already hold this row (written before the
        # head that counts it), and re-applying the event must not append it twice
        rows = list(self.state.get(key, []))[:n % self.chunk]
        rows.append(row)
        self._put(key, rows)
        return n + 1

    def _load_rows(self, epoch: int, n: int) -> list:
        rows = []
        for chunk in range((n + self.chunk - 1) // self.chunk):
            rows.extend(self.state[self.key("buffer", epoch, chunk)])
        return rows[:n]

    def _write_head(self, offset: int, body: dict) -> None:
        """The head record: ``seq`` is the last applied model-events offset, ``n`` the
        events applied (the record's key names are kept for existing changelogs). Then
        the cold records this head no longer reads are deleted (module docstring)."""
        self.log_offset = offset
        self.state[self.key("head")] = {"seq": offset, "n": self.events, "sources": dict(self.head_sources),
                                        **body}
        if not self._put_since_head:      # a record leaves ``live`` only as another is written
            return
        self._put_since_head = False
        live = self.live()
        for key in sorted(self.stored - live):
            del self.state[key]
        self.stored &= live

    def _put(self, key: str, value) -> None:
        """Write a cold record (one ``live`` names while the state needs it)."""
        self.state[key] = value
        self.stored.add(key)
        self._put_since_head = True

    def live(self) -> set[str]:
        """The cold records a load of the current state reads."""
        raise NotImplementedError

    def _chunks(self, *parts, n: int, per: int) -> set[str]:
        """Keys ``parts/<c>`` of the ceil(n / per) chunks of n items."""
        return {self.key(*parts, c) for c in range((n + per - 1) // per)}

    def _load_head(self, head: dict) -> None:
        self.log_offset, self.head_sources, self.events = head["seq"], dict(head["sources"]), head["n"]

    # ------------------------------------------------------------ the ledger
    # ``epoch`` means one thing in every handler: the index of the disjoint stretch of
    # examples one ledger covers (epochs compose in parallel). DP-Winnow has one epoch,
    # 0, for its whole stream; continual Winnow and the predictor count theirs; a
    # decision-list model's epoch is its training window.
    def ledger_record(self) -> LedgerState | None:
        """The current epoch's ledger record (None before its first charge)."""
        raise NotImplementedError

    def spent(self) -> float:
        return spent(self.ledger_record()).epsilon

    def _charge_epoch(self, mechanism: str, epsilon: float, delta: float) -> LedgerState:
        """A fresh epoch ledger paid once, up front, for a mechanism that covers the whole
        epoch (continual Winnow's tree, one DP-GreedyCover run); the entry is published."""
        b = self.config.budget
        ledger = Ledger.create(epsilon=b.epsilon, delta=b.delta, rule="basic")
        ledger.on_entry.append(self._charged)
        ledger.charge(mechanism, epsilon, delta)
        return ledger.state


def binary_input(event: dict, d: int) -> BinaryInput:
    if "active" in event:
        return BinaryInput.from_active(event["active"], d)
    return BinaryInput.from_dense(np.asarray(event["x"], dtype=np.int64))


# ====================================================================== DP-Winnow
def winnow_parameters(config: ModelConfig):
    p, b = config.params, config.budget
    if p.mode == "theory":
        return dp_winnow_theory_parameters(epsilon=b.epsilon, delta=b.delta, rho=p.rho, T=p.T,
                                           beta=p.beta, d=2 * config.dimension if p.signed
                                           else config.dimension, c=p.c)
    return dp_winnow_practical_parameters(eps_hat=p.eps_hat, eta=p.eta, m=p.m, K=p.K, L=p.L,
                                          delta=b.delta, rho=p.rho, c=p.c, T=p.T, beta=p.beta)


class WinnowHandler(Handler):
    # Runs of fewer examples go one at a time (the same outputs: predictions are exact
    # integers): measured, a 12-example batch through numpy cost as much as 12 rounds,
    # a 16-example one a fifth less.
    BATCH_FROM = 16

    def create(self, outputs: Outputs, offset: int) -> None:
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

    def save(self, offset: int) -> None:
        hot = self.model.state.hot_record()
        if self._saved_k != hot["k"]:
            self._put(self.key("weights", hot["k"]), self.model.state.cold_record())
            self._saved_k = hot["k"]
        self._write_head(offset, {"learner": hot})

    def live(self) -> set[str]:
        return {self.key("weights", self.model.state.k)}

    def ledger_record(self) -> LedgerState:
        return self.model.ledger.state

    def _status(self) -> str:
        s = self.model.state
        return "budget_exhausted" if s.exhausted else ("frozen" if s.frozen else "answered")

    def _example_status(self) -> str:
        return "learning" if self._status() == "answered" else self._status()

    def on_example(self, event, source, offset, outputs) -> None:
        """The record of a labelled example carries no label: sgn(<w~, x_t>) is a function
        of the private example that Theorem 11 (which covers the hypothesis sequence w~)
        does not cover. Version and update flag are functions of w~'s sequence."""
        self._begin(outputs)
        r = self.model.learn_one(binary_input(event, self.config.dimension), event["y"])
        self._predict("example", source, event, None, self._example_status(), r.version, r.updated)

    def prepare_examples(self, items: list[tuple[dict, str, int]]):
        """(rows, labels) of ``items`` (event, source, offset) for ``on_examples``; raises,
        having changed nothing, if a row or label is one ``on_example`` would refuse (the
        processor then applies them one at a time, dead-lettering that one)."""
        d, actives = self.config.dimension, []
        for event, _, _ in items:
            if "active" in event:
                actives.append(event["active"])
                continue
            x = event["x"]
            if len(x) != d or not all(v == 1 or v == -1 for v in x):
                raise ValueError("not a dense input of the model's dimension in {-1, +1}")
            actives.append([j for j, v in enumerate(x) if v > 0])
        ys = [event["y"] for event, _, _ in items]
        if not all(type(y) is int and (y == 1 or y == -1) for y in ys):
            raise ValueError("a label is not -1 or +1")
        return active_matrix(actives, d, pad=d), np.asarray(ys, dtype=np.int64)

    def on_examples(self, items: list[tuple[dict, str, int]], prepared, outputs) -> None:
        """Consecutive examples at once: the stretches in which AboveThreshold does not
        fire through the learner's batch kernel (``learn_quiet``), each round at which it
        fires through ``on_example`` (its update, re-sample and charges). The same state
        and outputs, in the same order, as ``on_example`` on each in turn."""
        rows, ys = prepared
        d, a = self.config.dimension, 0
        while a < len(items):
            version, status = self.model.state.k, self._example_status()
            done = len(self.model.learn_quiet(
                rows[a:], ys[a:], lambda i: binary_input(items[a + i][0], d).to_record()))
            self._predict_rows(outputs, items[a:a + done], status, version)
            a += done
            if a < len(items):
                self.on_example(*items[a], outputs)
                a += 1

    def internal_mistakes(self) -> int:
        """Online mistakes so far: a private statistic, for in-process evaluation only."""
        return self.model.state.total_mistakes

    def on_query(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        label = self.model.predict_one(binary_input(event, self.config.dimension))
        self._predict("query", source, event, label, self._status(), self.model.state.k)


# ====================================================================== continual Winnow
NODE_COLUMNS = 32_768        # columns per node record: <= 700 kB of base64 even when dense
TREE_MECHANISM = "tree_aggregation[discrete_gaussian]"


def active_of(event: dict) -> list[int]:
    """A row's active features: ``active``, or the +1 coordinates of a dense x."""
    if "active" in event:
        return event["active"]
    return [j for j, v in enumerate(event["x"]) if v > 0]


class ContinualWinnowHandler(Handler):
    """Continual-release Winnow (our extension). Records: ``params`` (the calibrated noise,
    written once), ``head`` (counters, this block's increment, the epoch ledger),
    ``node/<epoch>/<t>/<chunk>`` (true node sums, written when block t closes; their noise
    is recomputed from the key), ``offset/<epoch>/<chunk>`` (the released A^ an epoch
    starts from). One epoch ledger: its single charge is made when the epoch starts."""

    def create(self, outputs: Outputs, offset: int) -> None:
        self._begin(outputs)
        p, b = self.config.params, self.config.budget
        params = continual_winnow_parameters(
            epsilon=b.epsilon, delta=b.delta, d=self.config.dimension, max_active=p.max_active + 1,
            horizon=p.horizon, block=p.block, eta=p.eta, margin=p.margin)
        self.state[self.key("params")] = asdict(params)
        self.model = ContinualWinnow(params=params, rng=self.rng, model_id=self.model_id)
        self._start_epoch()

    def _start_epoch(self) -> None:
        p = self.model.params
        self.epoch = self.model.state.epoch
        self.ledger_state = self._charge_epoch(TREE_MECHANISM, p.epsilon, p.delta)

    def load(self, head: dict) -> None:
        self._load_head(head)
        params = ContinualWinnowParameters(**self.state[self.key("params")])
        hot = head["learner"]
        dim = params.d + 1
        state = ContinualWinnowState(**hot)
        state.alpha = {t: self._read_vector("node", state.epoch, t, dim=dim)
                       for t in closed_nodes(state.b)}
        state.offset = self._read_vector("offset", state.epoch, dim=dim) if state.epoch else None
        self.model = ContinualWinnow(params=params, rng=self.rng, model_id=self.model_id, state=state)
        self.ledger_state = LedgerState(**head["ledger"])
        self.epoch = state.epoch

    def _write_vector(self, v: np.ndarray, *parts) -> None:
        for c, lo in enumerate(range(0, v.size, NODE_COLUMNS)):
            part = v[lo:lo + NODE_COLUMNS]
            nz = np.flatnonzero(part)
            self._put(self.key(*parts, c), {"idx": encode_array(nz), "val": encode_array(part[nz])})

    def _read_vector(self, *parts, dim: int) -> np.ndarray:
        v = np.zeros(dim, dtype=np.int64)
        for c, lo in enumerate(range(0, dim, NODE_COLUMNS)):
            r = self.state[self.key(*parts, c)]
            v[lo + decode_array(r["idx"])] = decode_array(r["val"])
        return v

    def save(self, offset: int) -> None:
        s = self.model.state
        self._write_head(offset, {"learner": s.hot_record(), "ledger": dict(vars(self.ledger_state))})

    def live(self) -> set[str]:
        """The nodes of the prefix's decomposition and the epoch's offset (``load``)."""
        s, dim = self.model.state, self.model.params.d + 1
        keys = set().union(*(self._chunks("node", s.epoch, t, n=dim, per=NODE_COLUMNS)
                             for t in closed_nodes(s.b)))
        return keys | (self._chunks("offset", s.epoch, n=dim, per=NODE_COLUMNS) if s.epoch else set())

    def ledger_record(self) -> LedgerState:
        return self.ledger_state

    def version(self) -> int:
        s, p = self.model.state, self.model.params
        return s.epoch * p.blocks + s.b

    def internal_mistakes(self) -> int:
        """Online mistakes of the released model: private, for in-process evaluation only."""
        return self.model.state.mistakes

    def on_example(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        step = self.model.learn_one(active_of(event), event["y"])
        self._released(step)
        self._predict("example", source, event, None, "learning", self.version(), step.released)

    def prepare_examples(self, items: list[tuple[dict, str, int]]):
        """Every row and label of ``items`` (event, source, offset) checked and converted
        for ``on_examples``; raises, having changed nothing, if one is invalid."""
        return self.model.checked([active_of(e) for e, _, _ in items], [e["y"] for e, _, _ in items])

    def on_examples(self, items: list[tuple[dict, str, int]], prepared, outputs) -> None:
        """Consecutive examples at once, through the learner's batch kernel a block
        segment at a time: the same learner state, cold records and outputs, in the same
        order, as ``on_example`` on each in turn."""
        idx, ys = prepared
        a = 0
        while a < len(items):
            b = min(len(items), a + self.model.blocks_left())
            version = self.version()              # fixed until the segment's last example
            steps = self.model.learn_rows(idx[a:b], ys[a:b])
            self._predict_rows(outputs, items[a:b - 1], "learning", version)   # no release before b
            self._begin(outputs)
            self._released(steps[-1])
            self._predict("example", items[b - 1][1], items[b - 1][0], None, "learning",
                          self.version(), steps[-1].released)
            a = b

    def _released(self, step) -> None:
        """Cold records as blocks close; versioned keys whose content is a function of the
        log, so re-applying after a crash rewrites the same."""
        s = self.model.state
        if step.new_epoch:
            self._write_vector(s.offset, "offset", s.epoch)
            self._start_epoch()
        elif step.released:
            self._write_vector(s.alpha[s.b], "node", s.epoch, s.b)

    def on_query(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        label = self.model.predict_one(active_of(event))
        self._predict("query", source, event, label, "answered", self.version())


# ====================================================================== predictor
def predictor_shape(config: ModelConfig) -> tuple[int, int]:
    """(k, m) as registered, or sized from the budget and ``examples``."""
    p, b = config.params, config.budget
    if p.k is not None:
        return p.k, p.m
    return size_predictor(epsilon=b.epsilon, delta=b.delta, v_max=p.v_max, examples=p.examples,
                          accounting=p.accounting)


def predictor_config(config: ModelConfig) -> PredictorConfig:
    p, b = config.params, config.budget
    return PredictorConfig(k=predictor_shape(config)[0], epsilon=b.epsilon, delta=b.delta,
                           v_max=p.v_max, accounting=p.accounting)


def predictor_generator(config: ModelConfig):
    """The registered hypothesis class (schemas.config.GENERATORS) as a generator of
    learners/generators.py."""
    p, d = config.params, config.dimension
    if p.generator == "halfspace":
        return Halfspaces(d, adaptive=p.adaptive, hard_weight=p.hard_query_weight)
    if p.generator in ("conjunctions", "disjunctions"):
        return MonotoneConjunctions(d, disjunction=p.generator == "disjunctions")
    if p.generator == "decision_lists":
        return DecisionLists(FeatureFamily(d, p.max_conjunction, p.negations))
    if p.generator == "finite":
        return FiniteClass(p.table)
    return {"thresholds": Thresholds, "intervals": Intervals}[p.generator]()


class PredictorHandler(Handler):
    @property
    def hyp_chunk(self) -> int:
        """Hypotheses per record: 1000, fewer for wide hypotheses (halfspaces in many
        dimensions, long decision lists)."""
        return max(1, rows_per_record(self.model.generator.width, FLOAT_BYTES, 1000))

    def create(self, outputs: Outputs, offset: int) -> None:
        self._begin(outputs)
        self._build(PredictorState())
        self.buffer_n = 0            # examples buffered for the next epoch
        self.epoch_n = 0             # examples the current epoch was partitioned from
        self._saved_version = None

    def _build(self, pstate: PredictorState) -> None:
        self.model = PrivatePredictor(config=predictor_config(self.config),
                                      generator=predictor_generator(self.config), rng=self.rng,
                                      model_id=self.model_id, state=pstate,
                                      on_charge=self._charged)

    def load(self, head: dict) -> None:
        self._load_head(head)
        self._build(PredictorState.from_record(head["predictor"]))
        self.buffer_n = head["buffer_n"]
        s = self.model.state
        self._saved_version = (s.epoch, s.version)
        if s.epoch >= 0:
            X, y = self._sample(s.epoch, head["epoch_n"])
            H = []
            per = self.hyp_chunk
            for j in range((predictor_shape(self.config)[0] + per - 1) // per):
                H.extend(self.state[self.key("hyp", s.epoch, s.version, j)])
            self.model.restore(self.model.partition(X, y, s.epoch), H)
        self.epoch_n = head.get("epoch_n", 0)

    def _sample(self, epoch: int, n: int):
        rows = np.asarray(self._load_rows(epoch, n), dtype=float)
        return rows[:, :-1], rows[:, -1].astype(int)

    def save(self, offset: int) -> None:
        s = self.model.state
        if s.epoch >= 0 and self._saved_version != (s.epoch, s.version):
            H = self.model.generator.dump(self.model.H)
            per = self.hyp_chunk
            for j in range(0, len(H), per):
                self._put(self.key("hyp", s.epoch, s.version, j // per), H[j:j + per])
            self._saved_version = (s.epoch, s.version)
        self._write_head(offset, {"predictor": s.to_record(), "buffer_n": self.buffer_n,
                               "epoch_n": self.epoch_n})

    def live(self) -> set[str]:
        """The epoch's sample and hypotheses, and the next epoch's buffer (``load``)."""
        s = self.model.state
        keys = self._chunks("buffer", s.epoch + 1, n=self.buffer_n, per=self.chunk)
        if s.epoch >= 0:
            keys |= self._chunks("buffer", s.epoch, n=self.epoch_n, per=self.chunk)
            keys |= self._chunks("hyp", s.epoch, s.version, n=predictor_shape(self.config)[0],
                                 per=self.hyp_chunk)
        return keys

    def ledger_record(self) -> LedgerState | None:
        return self.model.state.ledger

    def _need(self) -> int:
        k, m = predictor_shape(self.config)
        return k * m

    def _maybe_start_epoch(self) -> None:
        s = self.model.state
        ready = self.buffer_n >= self._need()
        if ready and (s.epoch < 0 or (s.exhausted and self.config.params.epochs)):
            self.epoch = s.epoch + 1
            X, y = self._sample(self.epoch, self.buffer_n)
            self.epoch_n = self.buffer_n
            self.model.start_epoch(X, y)
            self.buffer_n = 0

    def on_example(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        self.epoch = self.model.state.epoch
        if self.buffer_n < self._need():          # surplus examples of a full buffer are dropped
            self.buffer_n = self._append_row(self.model.state.epoch + 1, self.buffer_n,
                                             [*event["x"], event["y"]])
        self._maybe_start_epoch()
        self._predict("example", source, event, None, "learning", self.model.state.version)

    def on_query(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        self.epoch = self.model.state.epoch
        self._maybe_start_epoch()
        self.epoch = self.model.state.epoch
        a = self.model.predict_one(np.asarray(event["x"], dtype=float))
        status = {NO_EPOCH: "learning", EXHAUSTED: "budget_exhausted", HARD: "hard_query"}.get(
            a.status, "answered")
        self._predict("query", source, event, a.label, status, a.version)


# ====================================================================== decision lists
class DecisionListHandler(Handler):
    def create(self, outputs: Outputs, offset: int) -> None:
        self._begin(outputs)
        p = self.config.params
        self.family = FeatureFamily(self.config.dimension, p.max_conjunction, p.negations)
        self.buffer_n, self.version, self.epoch, self.released = 0, 0, 0, None
        self.ledger_state: LedgerState | None = None

    def load(self, head: dict) -> None:
        self._load_head(head)
        p = self.config.params
        self.family = FeatureFamily(self.config.dimension, p.max_conjunction, p.negations)
        self.buffer_n, self.version = head["buffer_n"], head["version"]
        self.epoch = head["epoch"] if "epoch" in head else head["window"]   # heads before 2026-11-30
        self.ledger_state = None if head["ledger"] is None else LedgerState(**head["ledger"])
        self.released = None
        if self.version:
            rec = self.state[self.key("release", self.version)]
            self.released = DecisionList(self.family, tuple(map(tuple, rec["rules"])), rec["default"])

    def save(self, offset: int) -> None:
        ledger = None if self.ledger_state is None else dict(vars(self.ledger_state))
        self._write_head(offset, {"buffer_n": self.buffer_n, "version": self.version,
                                  "epoch": self.epoch, "ledger": ledger})

    def live(self) -> set[str]:
        """The current window's buffer and the current release (``load``)."""
        keys = self._chunks("buffer", self.epoch, n=self.buffer_n, per=self.chunk)
        return keys | ({self.key("release", self.version)} if self.version else set())

    def ledger_record(self) -> LedgerState | None:
        return self.ledger_state

    def on_example(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        row = [int(v > 0) for v in event["x"]] + [int(event["y"] > 0)]
        self.buffer_n = self._append_row(self.epoch, self.buffer_n, row)
        if self.buffer_n >= self.config.params.window:
            self._train()
        self._predict("example", source, event, None, "learning", self.version)

    def _train(self) -> None:
        p, b = self.config.params, self.config.budget
        rows = np.asarray(self._load_rows(self.epoch, self.buffer_n), dtype=np.int8)
        X, y = rows[:, :-1].astype(bool), rows[:, -1]
        self.ledger_state = self._charge_epoch(f"dp_greedy_cover[{p.accounting}]", b.epsilon, b.delta)
        eps_r = round_epsilon(p.accounting, b.epsilon, b.delta, len(self.family))
        stream = self.rng.stream(self.model_id, "dp_greedy_cover", self.epoch)
        dl = dp_greedy_cover(self.family, X, y, epsilon_round=eps_r, stream=stream)
        self.version += 1
        rec = dl.to_record()
        self._put(self.key("release", self.version), rec)
        self.released = dl
        self._out.add("releases", self.model_id, Release(
            model_id=self.model_id, seq=self.event_seq, version=self.version, rules=dl.describe(),
            payload=rec).model_dump())
        self.epoch += 1
        self.buffer_n = 0

    def on_query(self, event, source, offset, outputs) -> None:
        self._begin(outputs)
        if self.released is None:
            self._predict("query", source, event, None, "learning", 0)
            return
        x = (np.asarray(event["x"]) > 0).reshape(1, -1)
        label = 1 if int(self.released.predict(x)[0]) == 1 else -1
        self._predict("query", source, event, label, "answered", self.version)


HANDLERS = {"winnow": WinnowHandler, "continual_winnow": ContinualWinnowHandler,
            "predictor": PredictorHandler, "decision_list": DecisionListHandler}


def state_problem(config: ModelConfig) -> str | None:
    """Why a model's state would not fit in bounded records (None when it does)."""
    d, p = config.dimension, config.params
    if config.kind == "winnow":
        dim = 2 * d if p.signed else d
        draws = min(p.m or dim, dim)
        size = 32 * (dim + 2 * draws) // 3              # three base64 int64 arrays
        if size > RECORD_BYTES:
            return (f"DP-Winnow keeps its weights in one record: dimension {d} needs about "
                    f"{size:,} bytes, above the {RECORD_BYTES:,}-byte record limit")
    elif config.kind == "continual_winnow":
        pending = min(d + 1, p.block * (p.max_active + 1))   # aggregated increment entries
        if 2 * 12 * pending > RECORD_BYTES:
            return (f"continual Winnow keeps a block's aggregated increment in its head record: "
                    f"up to {pending:,} entries, above {RECORD_BYTES // 24:,}: use a smaller block")
    elif config.kind == "predictor":
        if rows_per_record(d + 1, FLOAT_BYTES, 256) == 0:
            return (f"predictor rows of dimension {d} do not fit one {RECORD_BYTES:,}-byte record: "
                    f"at most {RECORD_BYTES // FLOAT_BYTES - 1:,} dimensions")
        if p.generator == "decision_lists" and _rules_problem(d, p):
            return _rules_problem(d, p)
        if rows_per_record(predictor_generator(config).width, FLOAT_BYTES, 1) == 0:
            return (f"one {p.generator} hypothesis of dimension {d} does not fit one "
                    f"{RECORD_BYTES:,}-byte record")
    elif config.kind == "decision_list":
        if rows_per_record(d + 1, BIT_BYTES, 256) == 0:
            return (f"decision-list rows of dimension {d} do not fit one record: at most "
                    f"{RECORD_BYTES // BIT_BYTES - 1:,} dimensions")
        return _rules_problem(d, p)
    return None


def _rules_problem(d: int, p) -> str | None:
    """Why the candidate rules of a decision-list family would not fit in memory."""
    n_features = feature_count(d, p.max_conjunction, p.negations)
    if n_features > MAX_FEATURES:
        return (f"{n_features:,} candidate rules (d={d}, conjunctions up to "
                f"{p.max_conjunction}) exceed the {MAX_FEATURES:,} that a decision-list "
                "learner can hold in memory: lower max_conjunction or the dimension")
    return None


MAX_FEATURES = 200_000


def feature_count(d: int, max_conjunction: int, negations: bool) -> int:
    """|F| of a FeatureFamily without building it: conjunctions of j distinct variables,
    each literal positive or (with negations) negative."""
    return sum(math.comb(d, j) * (2 ** j if negations else 1) for j in range(1, max_conjunction + 1))


def check_feasible(config: ModelConfig) -> str | None:
    """Why a model config cannot run (None when it can): state records that would not fit,
    infeasible theory parameters or ones that cannot update within T, too few blocks for
    the budget, a generator that does not fit the dimension, an active-feature cap above
    the dimension."""
    problem = state_problem(config)
    if problem:
        return f"infeasible model config: {problem}"[:500]
    try:
        if config.kind == "winnow":
            note = winnow_parameters(config).note
            if note:
                return f"infeasible model config: {note}"[:500]
        elif config.kind == "continual_winnow":
            p = config.params
            if p.max_active > config.dimension:
                return f"max_active={p.max_active} exceeds the dimension {config.dimension}"
            continual_winnow_parameters(
                epsilon=config.budget.epsilon, delta=config.budget.delta, d=config.dimension,
                max_active=p.max_active + 1, horizon=p.horizon, block=p.block, eta=p.eta,
                margin=p.margin)
        elif config.kind == "predictor":
            p = config.params
            if p.generator in ("thresholds", "intervals", "finite") and config.dimension != 1:
                return f"the {p.generator} generator needs dimension 1"
            predictor_config(config).calibration()
        elif config.kind == "decision_list":     # a round's epsilon the sampler can use
            p, b = config.params, config.budget
            n_features = len(FeatureFamily(config.dimension, p.max_conjunction, p.negations))
            exact_epsilon(round_epsilon(p.accounting, b.epsilon, b.delta, n_features))
    except DPStreamError as err:
        return f"infeasible model config: {err}"[:500]
    return None
