"""What a model kind is, and the machinery every kind's handler shares.

A kind is one class, a subclass of :class:`Handler`, in one module of this package:

* class attributes and classmethods describe the kind from its public registration:
  ``name``, its params schema ``Params``, ``heavy`` (its batches may take seconds, so
  they run off the event loop), ``input_form`` (binary or real features),
  ``max_active`` (a bound on a row's active features, applied by truncation),
  ``config_problem`` (why a registration cannot run: record sizes, infeasible
  parameters), ``input_problem`` (why an input is outside the kind's domain),
  ``status`` and ``parameter_rows`` (its rows in ``/status/``, metrics and the audit
  report);
* an instance processes one model's events over the state mapping: ``create`` or
  ``load``, then ``on_example`` / ``on_query`` (and ``on_examples`` for a run of
  examples, if the kind learns in batches), ``save`` once per batch.

The registry (``__init__``) maps names to these classes; nothing else in the code
branches on a kind's name.

Cold records are retired once no state can read them again: every cold write goes
through ``Handler._put``, and ``_write_head`` deletes, right after the head, each record
this handler wrote or loaded that the new head no longer needs (``live``). A node of a
continual-release tree that left the prefix's decomposition, a hypothesis set of an
older version, the sample of a finished epoch: without this a worker's store and its
changelog grow with every block and every epoch, forever. (A record leaves ``live``
only when another is written, so heads of batches that wrote no cold record skip the
check.) Crash order: the deletions follow the head that drops them in the same
changelog partition (one producer, one request in flight per partition: aiokafka
``Sender`` mutes a partition while its batch is in flight), so a restart that finds a
deletion also finds that head; a restart from an older head finds every record the
older head reads (none was deleted before the newer head). Deletions are a function of
the head and the log, so re-applying a batch after a crash deletes the same records.

The privacy unit (agents/units.py). For a model whose registration has a
``privacy_unit``, every example passes ``admit`` before the kind's ``on_example`` /
``prepare_examples`` / ``on_examples`` see it; one that is not admitted (past its
person's bound, or without an ID) goes to ``pass_over``: it takes its place in the
kind's schedule exactly as an admitted example would (a block, a training window, an
epoch's sample, a round) and teaches the learner nothing. So every public counter (when a
block releases, a window trains, an epoch starts; versions, seqs, buffered counts) is a
function of the number of arriving examples, and whether an example was admitted changes
only noised, ledgered quantities: a refusal says nothing about the ID, not even that it
was seen before. Each kind says where its next example lands (``unit_slot``: the epoch
the bound counts in, and the block for a kind that releases per block), counted in
arriving examples.
"""
from __future__ import annotations

import re
from typing import ClassVar

from dpstream.learners.features import Featuriser
from dpstream.mechanisms.accounting import Ledger, LedgerEntry, LedgerState, spent
from dpstream.mechanisms.errors import DPStreamError
from dpstream.mechanisms.participation import over_epochs
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LedgerEntryEvent, ModelConfig
from dpstream.schemas.config import KindParams
from dpstream.schemas.events import Features

from ..units import Decision, decide, unit_key
from .storage import BIT_BYTES, FLOAT_BYTES, chunk_keys, model_key, rows_per_record

BINARY, REAL = "binary", "real"
_UNIT = re.compile(r"[0-9a-f]{32}")      # a pseudonym as the sequencer writes it (agents/units.py)
#: the registration check's key: public, for dry runs whose outputs are discarded
_CHECK_RNG = KeyedRandomness(b"dpstream registration check, public key")
_FEATURISERS: dict[str, tuple[ModelConfig, Featuriser]] = {}


def _featuriser(model_id: str, config: ModelConfig) -> Featuriser:
    """A model's featuriser, built once per registration (a bounded cache)."""
    hit = _FEATURISERS.get(model_id)
    if hit is None or hit[0] != config:
        if len(_FEATURISERS) >= 10_000:
            _FEATURISERS.clear()
        hit = _FEATURISERS[model_id] = (config, Featuriser(config.features))
    return hit[1]


def max_contributions(config: ModelConfig) -> int:
    """k: the most examples of one privacy ID that reach the learner per epoch, from the
    registration's ``privacy_unit`` (``max_contributions``); 1 when the unit is one example
    (no ``privacy_unit``). Each kind calibrates and charges for it (the ledger is in the
    registration's unit)."""
    unit = config.privacy_unit
    return 1 if unit is None else int(unit.max_contributions)


class Outputs:
    """The records one batch emits, in order: (topic, key, value)."""

    def __init__(self):
        self.items: list[tuple[str, str | None, dict]] = []

    def add(self, topic: str, key: str | None, value: dict) -> None:
        self.items.append((topic, key, value))


class Handler:
    """A model kind (class level) and the processor of one model's events (instance)."""

    name: ClassVar[str]
    Params: ClassVar[type[KindParams]]
    heavy: ClassVar[bool] = False       # a batch may take seconds: applied off the event loop
    batch_from: ClassVar[int | None] = None   # shortest run of examples ``on_examples`` takes
    #: an online learner: its published version moves exactly with the ``updated`` flags of
    #: its records, and it charges nothing after ``budget_exhausted`` (replay --no-key checks)
    online: ClassVar[bool] = False
    #: the ledger mechanism names this kind charges (replay --no-key tells kinds apart by them)
    mechanisms: ClassVar[tuple[str, ...]] = ()
    #: whether an epoch is a disjoint stretch of examples (the report says the guarantee is
    #: per example, each epoch on its own examples)
    epochs_on_fresh_examples: ClassVar[bool] = False
    #: what the model's answers are once its last record says ``frozen`` or
    #: ``budget_exhausted`` (the audit report's notice)
    after_stop: ClassVar[dict[str, str]] = {
        "frozen": "later answers come from its last released hypothesis, for free",
        "budget_exhausted": "later answers come from its last released hypothesis, for free"}

    @classmethod
    def learning_note(cls, config: ModelConfig) -> str | None:
        """What a query answered ``learning`` waits for, from the public config (``dpstream
        run`` says it when queries get no label); None: the generic text."""
        return None

    # ------------------------------------------------------------ the kind, from its config
    @staticmethod
    def input_form(config: ModelConfig) -> str:
        """BINARY (x in {-1, +1}^d, dense or as active indices) or REAL (dense x in R^d):
        what the kind's params say (``KindParams.input_form``)."""
        return config.params.input_form()

    @classmethod
    def max_active(cls, config: ModelConfig) -> int | None:
        """The most active features a row may have (more are cut, lowest indices kept);
        None: no bound."""
        return None

    @staticmethod
    def featuriser(config: ModelConfig) -> Featuriser | None:
        """The declared features' featuriser (None when the model declares none)."""
        return None if config.features is None else _featuriser(config.model_id, config)

    @classmethod
    def featurise(cls, config: ModelConfig, features: dict) -> dict:
        """The row of a record's raw declared ``features`` ({"active": ...} or {"x": ...}),
        bounded by the featuriser, never refused."""
        return cls.featuriser(config).row(features, cls.input_form(config) == BINARY)

    @classmethod
    def config_problem(cls, config: ModelConfig) -> str | None:
        """Why a registration cannot run (None when it can): its state would not fit in
        bounded records, or its parameters are infeasible at its budget."""
        return None

    @classmethod
    def registration_notes(cls, config: ModelConfig) -> list[str]:
        """What a registration that runs will do otherwise than it reads (the CLI says it as
        the model is registered; the worker runs it as before)."""
        return []

    @classmethod
    def lifetime(cls, config: ModelConfig):
        """The guarantee per privacy unit over the model's life: the budget for one example
        (an example lies in one epoch); for a person, the epoch's guarantee composed over the
        ``max_epochs`` epochs their examples may reach the learner in (one for a kind with a
        single epoch) (mechanisms/participation.py ``over_epochs``). A kind whose epochs are
        zCDP composes them in zCDP (``_epoch_rho``)."""
        b, unit = config.budget, config.privacy_unit
        epochs = 1 if unit is None or not cls.epochs_on_fresh_examples else unit.max_epochs
        return over_epochs(b.epsilon, b.delta, epochs, cls._epoch_rho(config) if epochs > 1 else None)

    @classmethod
    def _epoch_rho(cls, config: ModelConfig) -> float | None:
        """One epoch's zCDP per privacy unit, for a kind that accounts in zCDP (else None)."""
        return None

    @classmethod
    def unit_note(cls, config: ModelConfig, per_unit: float, per_example: float) -> list[str]:
        """The registration's one line on its privacy unit (none for one example): epsilon per
        person and epoch (the budget's unit) and per example, as the kind computed them, and
        a person's guarantee over the model's life (``lifetime``)."""
        if config.privacy_unit is None:
            return []
        k, e = max_contributions(config), config.privacy_unit.max_epochs
        life = cls.lifetime(config)
        epochs = (f", in at most {e} epoch{'s' if e > 1 else ''}" if cls.epochs_on_fresh_examples
                  else " (the model has one epoch)")
        return [f"privacy unit: a person with at most {k} example{'s' if k > 1 else ''} per epoch"
                f"{epochs}: epsilon {per_unit:.4g} per person and epoch, {per_example:.4g} per example, "
                f"at delta {config.budget.delta:g}; over the model's life epsilon {life.epsilon:.4g} per "
                f"person at delta {life.delta:.3g}"]

    @classmethod
    def input_problem(cls, config: ModelConfig, features: Features) -> str | None:
        """Why well-shaped features are outside this kind's domain (None when inside)."""
        return None

    @classmethod
    def status(cls, config: ModelConfig, head: dict) -> tuple[dict, dict | LedgerState | None]:
        """(the kind's public status fields, its current ledger record) from a head record."""
        raise NotImplementedError

    @classmethod
    def parameter_rows(cls, config: ModelConfig) -> list[tuple[str, str, str]]:
        """(parameter, value, where it comes from) for the audit report."""
        return []

    @classmethod
    def buffer_chunk(cls, config: ModelConfig) -> int:
        """Buffered rows per record: 256, fewer for wide rows."""
        binary = cls.input_form(config) == BINARY
        return rows_per_record(config.dimension + 1, BIT_BYTES if binary else FLOAT_BYTES, 256)

    # ------------------------------------------------------------ one model's events
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
        self.chunk = self.buffer_chunk(config)
        unit = config.privacy_unit
        self.bound = None if unit is None else unit.max_contributions   # k; None: unit one example
        self.unit_floor: int | None = None  # the epoch of the last committed head (units.py)
        self.unit_trace: dict | None = None  # (model, seq) -> units.Decision, when asked (replay)

    def key(self, *parts) -> str:
        return model_key(self.model_id, *parts)

    def create(self, outputs: Outputs) -> None:
        raise NotImplementedError

    def load(self, head: dict) -> None:
        raise NotImplementedError

    def save(self) -> None:
        """Write the head (and the cold records that changed) for ``log_offset``."""
        raise NotImplementedError

    def live(self) -> set[str]:
        """The cold records a load of the current state reads."""
        raise NotImplementedError

    def on_example(self, event: dict, source: str, outputs: Outputs) -> None:
        raise NotImplementedError

    def on_query(self, event: dict, source: str, outputs: Outputs) -> None:
        raise NotImplementedError

    def prepare_examples(self, items: list[tuple[dict, str]]):
        """A run of examples (event, source) checked and converted for ``on_examples``;
        raises, having changed nothing, if one is invalid (the processor then applies
        them one at a time, dead-lettering that one)."""
        raise NotImplementedError

    def on_examples(self, items: list[tuple[dict, str]], prepared, outputs: Outputs) -> None:
        """The same state and outputs, in the same order, as ``on_example`` on each."""
        raise NotImplementedError

    def internal_mistakes(self) -> int | None:
        """Online mistakes so far (a private statistic, for in-process evaluation and the
        internal audit report only); None for kinds that do not learn online."""
        return None

    # ------------------------------------------------------------ the privacy unit
    def unit_slot(self) -> tuple[int, int | None]:
        """(epoch, block) of the next example, admitted or not: the epoch a person's bound
        counts in, and, for a kind whose learner releases once per block, the block it
        enters (at most one example of a person per block); None for other kinds. Counted
        in arriving examples (module docstring), so a function of the log alone."""
        raise NotImplementedError

    def unit_slots(self, n: int) -> list[tuple[int, int | None]]:
        """The slots of the next ``n`` examples with nothing between them (a run for
        ``admitted_runs``). This default repeats ``unit_slot``: right for a kind whose slot
        a run of examples does not move, or that takes examples one at a time
        (``batch_from`` None); a kind whose slot moves within a run overrides it."""
        return [self.unit_slot()] * n

    def admit(self, event: dict, seq: int | None = None, slot: tuple[int, int | None] | None = None) -> bool:
        """Whether a bounded model's example (at ``seq``, default the next event's, entering
        ``slot``, default ``unit_slot()``) reaches the learner: its ``unit`` had fewer than
        k examples admitted this epoch before it, none in its block (agents/units.py).
        Writes the unit's record when admitted; records the decision in ``unit_trace`` when
        the runtime keeps one. An example without a (well-formed) unit is not admitted."""
        seq = self.events if seq is None else seq
        epoch, block = self.unit_slot() if slot is None else slot
        unit = event.get("unit")
        if not (isinstance(unit, str) and _UNIT.fullmatch(unit)):
            unit, admitted = None, False
        else:
            key = unit_key(self.model_id, unit)
            admitted, record = decide(self.state.get(key), seq=seq, epoch=epoch, block=block,
                                      k=self.bound, floor=epoch if self.unit_floor is None else self.unit_floor,
                                      epochs=self.config.privacy_unit.max_epochs)
            if record is not None:
                self.state[key] = record
        if self.unit_trace is not None:
            self.unit_trace[(self.model_id, seq)] = Decision(self.model_id, seq, unit, epoch, block, admitted)
        return admitted

    def admitted_runs(self, items: list[tuple[dict, str]]) -> list[tuple[bool, list]]:
        """A run of examples (event, source) cut into consecutive stretches that are all
        admitted or all not, in order, each example decided as ``admit`` decides it one at a
        time (its seq, and its slot: the i-th of the run's, admitted or not)."""
        slots = self.unit_slots(len(items))
        runs: list[tuple[bool, list]] = []
        for i, item in enumerate(items):
            ok = self.admit(item[0], self.events + i, slots[i])
            if runs and runs[-1][0] == ok:
                runs[-1][1].append(item)
            else:
                runs.append((ok, [item]))
        return runs

    def pass_over(self, items: list[tuple[dict, str]], outputs: Outputs) -> None:
        """Examples that do not reach the learner (module docstring): each takes its place
        in the kind's schedule as ``on_example`` would, teaches nothing (its features and
        label are never read), and gets the record an example there gets."""
        raise NotImplementedError

    # ------------------------------------------------------------ outputs
    def charge_epoch(self) -> int:
        """The epoch a charge being made belongs to (kinds whose learner starts epochs
        itself read it from the learner)."""
        return self.epoch

    def spent_epoch(self) -> int:
        """The epoch whose ledger ``spent()`` reads: a prediction's ``epoch`` (the schema's
        "the epoch whose ledger epsilon_spent is", which ``dpstream replay --no-key`` checks)."""
        return max(0, self.charge_epoch())

    def _charged(self, entry: LedgerEntry) -> None:
        """Publish a ledger entry (``Ledger.on_entry``): made before the release it pays for."""
        self.epoch = self.charge_epoch()
        b = self.config.budget
        self._out.add("ledger", self.model_id, LedgerEntryEvent(
            model_id=self.model_id, seq=self.event_seq, epoch=self.epoch,
            budget_epsilon=b.epsilon, budget_delta=b.delta, unit=self.config.unit,
            key_fingerprint=self.rng.fingerprint(), **entry.as_dict()).model_dump())

    def _begin(self, outputs: Outputs) -> None:
        """Start handling one event: its outputs carry the model's own event counter as
        ``seq`` (the same in every runtime, unlike log offsets)."""
        self.event_seq, self._out = self.events, outputs
        self.events += 1

    def _predict(self, kind, source, event, label, status, version, updated=False) -> None:
        """One ``Prediction`` record, built as the dict ``Prediction(...).model_dump()``
        gives (one per event on the hot path: no model object per record; the tests
        validate every emitted record against the schema)."""
        self._out.add("predictions", self.model_id, self._prediction(
            kind, source, event, label, status, version, updated, float(self.spent())))

    def _predict_rows(self, outputs: Outputs, items, status: str, version: int) -> None:
        """``_begin`` then ``_predict`` (an example's record: no label, not updated) for
        each of ``items`` (event, source), between which the model did not move."""
        if not items:
            return
        spent_eps, seq = float(self.spent()), self.events
        self.events += len(items)
        add = outputs.add
        for i, (event, source) in enumerate(items):
            add("predictions", self.model_id, self._prediction(
                "example", source, event, None, status, version, False, spent_eps, seq + i))
        self.event_seq, self._out = seq + len(items) - 1, outputs

    def _prediction(self, kind, source, event, label, status, version, updated, spent_eps,
                    seq=None) -> dict:
        return {"model_id": self.model_id, "source": source,
                "seq": self.event_seq if seq is None else seq, "kind": kind,
                "query_id": event.get("query_id"), "label": None if label is None else int(label),
                "status": status, "version": int(version), "epsilon_spent": spent_eps,
                "epsilon_left": max(0.0, self.config.budget.epsilon - spent_eps),
                "updated": bool(updated), "epoch": self.spent_epoch()}

    def _learn_in_blocks(self, items, outputs, learn) -> None:
        """``on_examples`` (and ``pass_over``) for a learner that releases once per block
        (``blocks_left``, ``version``): a block segment [a, b) at a time through
        ``learn(a, b)`` (its batch kernel, or ``pass_over``), the segment's records but the
        last with the model as it was (no release before the block's end), the last one's
        record after it (a new epoch's charge is its)."""
        a = 0
        while a < len(items):
            b = min(len(items), a + self.model.blocks_left())
            self._predict_rows(outputs, items[a:b - 1], "learning", self.model.version)
            self._begin(outputs)
            step = learn(a, b)[-1]
            self._released(step)
            self._predict("example", items[b - 1][1], items[b - 1][0], None, "learning",
                          step.version, step.released)
            a = b

    def _released(self, step) -> None:
        """After a step of a learner that releases per block (cold records, if any)."""

    # ------------------------------------------------------------ buffered rows
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

    def _chunks(self, *parts, n: int, per: int) -> set[str]:
        return chunk_keys(self.model_id, *parts, n=n, per=per)

    # ------------------------------------------------------------ head and cold records
    def _write_head(self, body: dict) -> None:
        """The head record (``log_offset``: the last applied model-events offset; ``n``: the
        events applied; ``sources``: the last applied offset per input partition), then
        the cold records this head no longer reads are deleted (module docstring)."""
        self.state[self.key("head")] = {"log_offset": self.log_offset, "n": self.events,
                                        "sources": dict(self.head_sources), **body}
        if not self._put_since_head:      # a record leaves ``live`` only as another is written
            return
        self._put_since_head = False
        live = self.live()
        for key in sorted(self.stored - live):
            del self.state[key]
        self.stored &= live

    def _load_head(self, head: dict) -> None:
        self.log_offset, self.head_sources, self.events = \
            head["log_offset"], dict(head["sources"]), head["n"]

    def _put(self, key: str, value) -> None:
        """Write a cold record (one ``live`` names while the state needs it)."""
        self.state[key] = value
        self.stored.add(key)
        self._put_since_head = True

    # ------------------------------------------------------------ the ledger
    # ``epoch`` means one thing in every kind: the index of the disjoint stretch of
    # examples one ledger covers (epochs compose in parallel). DP-Winnow has one epoch,
    # 0, for its whole stream; continual Winnow and the predictor count theirs; a
    # decision-list model's epoch is its training window.
    def ledger_record(self) -> LedgerState | None:
        """The current epoch's ledger record (None before its first charge)."""
        raise NotImplementedError

    def spent(self) -> float:
        return spent(self.ledger_record()).epsilon

    def _publishing(self, ledger: Ledger) -> Ledger:
        """``ledger`` with its entries published by this handler (``_charged``)."""
        ledger.on_entry.append(self._charged)
        return ledger


class BlockReleaseKind(Handler):
    """A kind whose learner releases once per block and charges each epoch as it starts it
    (``learners.protocol.BlockReleases``: continual Winnow, DP-FTRL). The learner is
    ``self.model``, its parameters come from ``parameters(config)``, its rows from the
    event field ``row``."""

    online = True
    epochs_on_fresh_examples = True
    batch_from = 1

    @staticmethod
    def parameters(config):
        raise NotImplementedError

    @classmethod
    def _epoch_rho(cls, config) -> float:
        return cls.parameters(config).rho

    @classmethod
    def parameters_problem(cls, config) -> str | None:
        """Why the first event of this config would fail (None when it would not): the
        handler's own ``create`` (the learner's calibration, the learner built, the epoch
        ledger's first charge) over a scratch state, with a public check-only key (nothing
        it computes is released). Before (issue 43) this built the parameters only, and a
        dp_ftrl budget whose first charge the ledger refuses was accepted here and
        dead-lettered by the worker."""
        try:
            cls(config, _CHECK_RNG, {}).create(Outputs())
        except DPStreamError as err:
            return str(err)
        return None

    @classmethod
    def status(cls, config, head):
        s = head["learner"]
        return {"epoch": s["epoch"], "releases_this_epoch": s["b"], "exhausted": False}, s["ledger"]

    def charge_epoch(self) -> int:
        """The learner charges an epoch as it starts it: the entry carries the new epoch."""
        return self.model.state.epoch if hasattr(self, "model") else 0

    def ledger_record(self):
        return self.model.ledger.state

    def internal_mistakes(self) -> int:
        return self.model.state.mistakes

    row = "active"      # the event field a learner's row is in ("x" for dense rows)

    def unit_slot(self) -> tuple[int, int | None]:
        """The learner's epoch and the index of the block the next example enters."""
        return self.unit_slots(1)[0]

    def unit_slots(self, n: int) -> list[tuple[int, int | None]]:
        """Blocks of ``params.block`` arriving examples, a new epoch every
        ``params.horizon`` (a multiple of the block), as ``learners.protocol.BlockReleases``
        counts them (an example that does not reach the learner counts: ``pass_over``)."""
        p, s = self.model.params, self.model.state
        epoch, t, out = s.epoch, s.t, []
        for _ in range(n):
            out.append((epoch, t // p.block))
            t += 1
            if t >= p.horizon:
                epoch, t = epoch + 1, 0
        return out

    def on_example(self, event, source, outputs) -> None:
        self._begin(outputs)
        step = self.model.learn_one(event[self.row], event["y"])
        self._released(step)
        self._predict("example", source, event, None, "learning", step.version, step.released)

    def prepare_examples(self, items):
        return self.model.checked([e[self.row] for e, _ in items], [e["y"] for e, _ in items])

    def on_examples(self, items, prepared, outputs) -> None:
        rows, ys = prepared
        self._learn_in_blocks(items, outputs, lambda a, b: self.model.learn_rows(rows[a:b], ys[a:b]))

    def pass_over(self, items, outputs) -> None:
        """Each takes its place in its block with a zero vector (``BlockReleases.pass_over``):
        the block closes and releases where it would with the example learned."""
        self._learn_in_blocks(items, outputs, lambda a, b: self.model.pass_over(b - a))

    def on_query(self, event, source, outputs) -> None:
        self._begin(outputs)
        label = self.model.predict_one(event[self.row])
        self._predict("query", source, event, label, "answered", self.model.version)
