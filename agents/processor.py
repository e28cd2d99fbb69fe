"""Apply the per-model ordered log (``model-events``) to each model's learner.

For every example or query the processor emits exactly one ``predictions`` record
(a registration emits none, only its ledger records), plus one
``ledger`` record per privacy charge made while handling it (charged before the
release it pays for leaves) and, for decision lists, one ``releases`` record per
trained window. Outputs never carry features, labels of examples, or keys.

Idempotence (docs/architecture.md, "At least once, losing nothing"): each model's ``head`` record holds the last
applied log offset (``seq``) and, per input partition, the last applied input offset;
an event at or before either is skipped (its outputs were produced before, and the
keyed randomness would reproduce them identically anyway). State that changes on
every event lives in ``head``; large state (weights, hypotheses, buffered samples)
is written only when it changes, under versioned keys that are never overwritten
with different content, and ``head`` is written last: a crash between the two
leaves ``head`` pointing at the previous, complete version.

Crash order (records.py): a batch's ledger records are made durable first, then its
prediction and release records, and only then is its state written. So a release
never exists without its ledger record, and state on the changelog never runs ahead
of the outputs it implies. A failed delivery drops the in-memory handler, so the next
attempt reloads from the state mapping instead of an advanced, unsaved learner.

An event its model cannot apply (a handler raises: a bug, or a log record written
behind the sequencer's back) has exactly one output, a dead letter, and no effect on
the model: whatever its handler did before raising (a ledger charge, an update, a
state write) is rolled back. The batch is then applied again one event at a time,
each event a savepoint (``_apply_each``): keyed noise makes the events before the
failure reproduce the same outputs, and the failed event leaves only its dead letter
and the offsets that mark it handled. Before, a charge made before the failure stayed
published and counted (conservative, but a ledger entry with no release behind it).

The privacy unit: an example of a model with a ``privacy_unit`` reaches its handler's
learner only if ``Handler.admit`` admits it (agents/units.py); one that is not admitted
goes to ``Handler.pass_over``: it takes its place in the model's schedule (its block,
window, sample or round) and teaches nothing, so the public schedule counts arriving
examples (agents/kinds/base.py). A run of examples is cut into stretches of admitted and
not admitted ones, in order, so the batch kernels keep their runs. With ``trace``
(replay), every decision is kept in memory, by (model, seq): the private trace
``dpstream replay`` checks the bound on; it is never published.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig, Rejected

from .kinds import Handler, Outputs, kind
from .records import Emit, Fetch, RawRecord, deliver

PREDICTIONS, LEDGER, RELEASES, REJECTED = "predictions", "ledger", "releases", "rejected"
log = logging.getLogger("dpstream.processor")


@dataclass(slots=True)
class LogEvent:
    """One parsed ``model-events`` record: the validated event, where its input came from
    (``source``: "topic:partition:offset"; ``input_partition``: "topic:partition"), and
    the log record itself."""
    record: RawRecord
    event: dict
    source: str
    model_id: str
    input_partition: str
    input_offset: int

    @property
    def is_example(self) -> bool:
        return self.event["type"] == "example"

    def already_applied(self, log_offset: int, sources: dict[str, int]) -> bool:
        """Whether a model at ``log_offset`` (its last applied log offset) and ``sources``
        (its last applied offset per input partition) applied this event before: a log
        record at or before its last applied one (the log was re-delivered), or an input
        at or before the last applied offset of its input partition (the sequencer
        re-appended it to the log after a crash). Its outputs were produced then,
        identically (keyed noise)."""
        return (self.record.offset <= log_offset
                or sources.get(self.input_partition, -1) >= self.input_offset)


class _EventFailed(Exception):
    """A handler raised while applying ``record`` (of ``model_id``): the batch is applied
    again one event at a time, and this event is rolled back and dead-lettered."""

    def __init__(self, record: RawRecord, model_id: str):
        super().__init__(record.source)
        self.record, self.model_id = record, model_id


class WrongKey(Exception):
    """The model was created under a key with another fingerprint: applying its events with
    this key would draw second, independent noise (a silent doubling of its privacy cost)."""


class Processor:
    """Keeps loaded handlers between events; the state mapping stays the truth.

    Events are applied in batches (one event is a batch of one): every event of the
    batch is applied in memory, the batch's outputs are made durable (ledger records
    first), and only then is each touched model's ``head`` written, once. So a batch
    costs one round trip to the broker and one head record per model, not per event.
    State mappings that place records by partition (the faust tables) expose
    ``set_partition``; every write goes to the partition of the model's events.
    """

    def __init__(self, rng: KeyedRandomness, state: MutableMapping, emit: Emit,
                 fetch: Fetch | None = None, *, offload: bool = False, owns=None,
                 trace: bool = False):
        self.rng, self.emit, self.fetch = rng, emit, fetch
        # (model, seq) -> units.Decision: private, in memory, only when asked (replay)
        self.unit_trace: dict | None = {} if trace else None
        self._unit_floors: dict[str, int] = {}   # model -> epoch of its last committed head
        self.base = state
        self.state = Overlay(state)          # handlers write here; flushed on the loop thread
        self.offload = offload               # apply heavy batches in a worker thread
        self.owns = owns or (lambda partition: True)
        self._handlers: dict[str, Handler] = {}
        self._set_partition = self.state.set_partition

    def handler(self, model_id: str) -> Handler | None:
        """The model's handler, loaded from the state mapping (None if unregistered)."""
        h = self._handlers.get(model_id)
        head = self.state.get(f"model/{model_id}/head")
        if h is None or head is None or h.log_offset != head["log_offset"]:
            cfg = self.state.get(f"model/{model_id}/config")
            if cfg is None:
                return None
            key = self.state.get(f"model/{model_id}/key")
            if key is not None and key != self.rng.fingerprint():
                raise WrongKey(model_id)
            config = ModelConfig.model_validate(cfg)
            h = kind(config.kind)(config, self.rng, self.state)
            h.load(head)
            h.stored = h.live()
            self._units(h)
            self._handlers[model_id] = h
        return h

    def _units(self, h: Handler) -> None:
        """A bounded model's handler, loaded or created: the trace, and the epoch of its last
        committed head (``unit_floor``, agents/units.py): the one this process recorded at
        its last commit, else the loaded head's (a first load reads committed state)."""
        if h.bound is None:
            return
        h.unit_trace = self.unit_trace
        floor = self._unit_floors.get(h.model_id)
        if floor is None:
            floor = self._unit_floors[h.model_id] = h.unit_slot()[0]
        h.unit_floor = floor

    async def handle_batch(self, records: list[RawRecord]) -> None:
        """Apply ``records`` (in log order); with ``fetch``, first re-read the records of
        each partition the runtime skipped (``log/<partition>``: next expected offset)."""
        outputs = Outputs()
        dirty: dict[str, tuple[Handler, int]] = {}        # model id -> (handler, partition)
        positions: dict[int, int] = {}
        todo: list[RawRecord] = []
        for record in records:
            p = record.partition
            if self.fetch is None:
                todo.append(record)
                continue
            expected = positions[p] if p in positions else self.state.get(f"log/{p}", 0)
            if record.offset < expected:    # handled by a batch whose state is written
                continue
            if record.offset > expected:
                todo.extend(await self.fetch(record.topic, p, expected, record.offset))
            todo.append(record)
            positions[p] = max(expected, record.offset + 1)
        try:
            heavy = self.offload and self._heavy(todo)   # never calibrate, fit or train on the loop
            try:
                await self._call(heavy, self._apply_all, todo, outputs, dirty)
            except _EventFailed:                        # roll the batch back; one at a time
                self.state.discard()
                self._handlers.clear()
                outputs, dirty = Outputs(), {}
                await self._call(heavy, self._apply_each, todo, outputs, dirty)
            self._flush()                               # cold records, before the outputs
            await deliver(self.emit, [o for o in outputs.items if o[0] == LEDGER])
            await deliver(self.emit, [o for o in outputs.items if o[0] != LEDGER])
        except BaseException:
            self.state.discard()
            for model_id in dirty:
                self._handlers.pop(model_id, None)
            raise
        for model_id, (handler, p) in dirty.items():
            if not self.owns(p):          # partition revoked meanwhile: the new owner writes
                self._handlers.pop(model_id, None)
                self._unit_floors.pop(model_id, None)
                continue
            self._set_partition(p)
            handler.save()
        for p, position in positions.items():
            self._set_partition(p)
            self.state[f"log/{p}"] = position
        self._flush()
        for model_id, (handler, _) in dirty.items():     # their heads are written: committed
            if handler.bound is not None and model_id in self._handlers:
                handler.unit_floor = self._unit_floors[model_id] = handler.unit_slot()[0]

    @staticmethod
    async def _call(offload: bool, fn, *args) -> None:
        if offload:
            await asyncio.to_thread(fn, *args)
        else:
            fn(*args)

    def _heavy(self, records: list[RawRecord]) -> bool:
        """Whether a batch may hold seconds of work: a registration (calibration) or an
        event of a kind whose events may (``Handler.heavy``: epoch starts, refits,
        training). Other events stay on the loop thread: measured, a thread makes a batch
        of cheap events about 60% slower (the GIL handed back and forth)."""
        seen = set()
        for record in records:
            if record.key in seen:
                continue
            seen.add(record.key)
            model_id = (record.key or b"").decode(errors="replace")
            cfg = self.state.get(f"model/{model_id}/config")
            if cfg is None:
                return True
            try:
                if kind(cfg["params"]["kind"]).heavy:
                    return True
            except KeyError:            # a config written behind the sequencer's back
                return True
        return False

    def _loaded(self, model_id: str, dirty: dict) -> Handler | None:
        return dirty[model_id][0] if model_id in dirty else self.handler(model_id)

    def _apply_all(self, records: list[RawRecord], outputs: Outputs, dirty: dict) -> None:
        """Apply records in order. Consecutive examples of one model whose kind learns in
        batches (``Handler.batch_from``) are applied together, with the same outputs in
        the same order as one at a time; anything else flushes the run first. Raises
        ``_EventFailed`` as soon as a handler raises (``handle_batch`` rolls back)."""
        run: list[LogEvent] = []
        for record in records:
            e = self._parse(record)
            if e is not None and run and e.model_id == run[0].model_id and e.is_example:
                run.append(e)                     # the run's model: known to batch
                continue
            batches = e is not None and self._learns_in_batches(e, dirty)
            if batches and (not run or run[0].model_id == e.model_id):
                run.append(e)
                continue
            self._apply_run(run, outputs, dirty)
            run = [e] if batches else []
            if not batches:
                self._apply(record, e, outputs, dirty)
        self._apply_run(run, outputs, dirty)

    def _apply_each(self, records: list[RawRecord], outputs: Outputs, dirty: dict) -> None:
        """Apply records one at a time, each a savepoint: after an event, its model's head
        goes to the overlay; an event whose handler raises is rolled back (its outputs,
        its overlay writes, its handler, reloaded from the head of the event before) and
        becomes a dead letter that counts as applied. The same outputs as ``_apply_all``
        for every event that applies (keyed noise; batches apply as one at a time)."""
        for record in records:
            e = self._parse(record)
            mark, saved = len(outputs.items), self.state.savepoint()
            try:
                self._apply(record, e, outputs, dirty)
                self._save_after(record, e, dirty)
            except _EventFailed as failed:
                cause = failed.__cause__
                # the exception's type and where it was raised: its message may quote input
                log.error("event at %s could not be applied (%s at %s); rolled back and "
                          "dead-lettered", record.source, type(cause).__name__, _raised_at(cause))
                del outputs.items[mark:]
                self.state.restore(saved)
                self._skip_failed(e, outputs, dirty)

    def _save_after(self, record: RawRecord, e: LogEvent | None, dirty: dict) -> None:
        """The event's model's head to the overlay (``_apply_each``'s savepoint); a save
        that raises fails the event like its handler would."""
        if e is None or e.model_id not in dirty:
            return
        handler, partition = dirty[e.model_id]
        self._set_partition(partition)
        try:
            handler.save()
        except Exception as err:    # noqa: BLE001 - rolled back and dead-lettered
            raise _EventFailed(record, e.model_id) from err

    def _skip_failed(self, e: LogEvent, outputs: Outputs, dirty: dict) -> None:
        """The failed event's only effects: its dead letter, and its model's offsets moved
        past it (so a restart does not meet it again), on the handler reloaded from the
        state before the event. A model that cannot even load keeps its state."""
        outputs.add(REJECTED, None, Rejected(
            source=e.source, reason="not applied: the model could not process this event").model_dump())
        self._handlers.pop(e.model_id, None)
        dirty.pop(e.model_id, None)
        try:
            handler = self.handler(e.model_id)
            if handler is None:
                return
            handler.head_sources[e.input_partition] = e.input_offset
            handler.log_offset = e.record.offset
            self._set_partition(e.record.partition)
            handler.save()
        except Exception as err:    # noqa: BLE001 - a model whose state cannot load or save
            log.error("model of the event at %s cannot load its state (%s); left as it was",
                      e.record.source, type(err).__name__)
            self._handlers.pop(e.model_id, None)
            return
        self._handlers[e.model_id] = handler
        dirty[e.model_id] = (handler, e.record.partition)

    @staticmethod
    def _parse(record: RawRecord) -> LogEvent | None:
        """The log record's event, or None if it cannot be parsed (``_apply`` then
        dead-letters it)."""
        try:
            body = record.body if record.body is not None else orjson.loads(record.value)
            event, source = body["event"], body["source"]
            part, offset = source.rsplit(":", 1)
            return LogEvent(record, event, source, event["model_id"], part, int(offset))
        except Exception:           # noqa: BLE001 - an input that breaks parsing is a dead letter
            return None

    def _learns_in_batches(self, e: LogEvent, dirty: dict) -> bool:
        """Whether the record is an example of a loaded model whose kind learns in
        batches (else it takes the one-at-a-time path, which also dead-letters)."""
        try:
            if not e.is_example:
                return False
            handler = self._loaded(e.model_id, dirty)
        except Exception:           # noqa: BLE001 - the one-at-a-time path says why
            return False
        return handler is not None and handler.batch_from is not None

    def _apply_run(self, run: list[LogEvent], outputs: Outputs, dirty: dict) -> None:
        """Apply a run of examples of one model: skip the applied ones, then
        ``on_examples``; if ``prepare_examples`` refuses the run (an invalid row, found
        before anything changes), or it is shorter than the kind's ``batch_from``, apply
        it one at a time instead."""
        if not run:
            return
        handler = self._loaded(run[0].model_id, dirty)
        if len(run) < handler.batch_from:     # numpy's fixed cost exceeds the run's
            for e in run:
                self._apply(e.record, e, outputs, dirty)
            return
        todo: list[LogEvent] = []
        log_offset, sources = handler.log_offset, dict(handler.head_sources)
        for e in run:
            if e.already_applied(log_offset, sources):      # against the run so far
                continue
            todo.append(e)
            log_offset, sources[e.input_partition] = e.record.offset, e.input_offset
        if not todo:
            return
        self._set_partition(todo[0].record.partition)
        items = [(e.event, e.source) for e in todo]
        try:
            # a bounded model's admissions first (re-deciding one at a time gives the same)
            runs = handler.admitted_runs(items) if handler.bound is not None else [(True, items)]
            prepared = [handler.prepare_examples(part) if admitted else None for admitted, part in runs]
        except Exception:           # noqa: BLE001 - nothing changed: one at a time, with dead letters
            for e in run:
                self._apply(e.record, e, outputs, dirty)
            return
        try:
            for (admitted, part), ready in zip(runs, prepared):
                if admitted:
                    handler.on_examples(part, ready, outputs)
                else:
                    handler.pass_over(part, outputs)
        except Exception as err:    # noqa: BLE001 - rolled back; one at a time finds the event
            raise _EventFailed(todo[0].record, handler.model_id) from err
        handler.head_sources.update(sources)
        handler.log_offset = log_offset
        self._handlers[handler.model_id] = handler
        dirty[handler.model_id] = (handler, todo[0].record.partition)

    def _flush(self) -> None:
        """Write the overlay through, except records of partitions this worker no longer
        owns: a worker that lost a partition mid-batch must not overwrite its new owner's
        state (a stale, shorter buffer chunk would change an epoch's sample)."""
        self.state.flush(self.owns)

    def _apply(self, record: RawRecord, e: LogEvent | None, outputs: Outputs, dirty: dict) -> None:
        """Apply one log record. The sequencer writes only validated events here, but the
        topic is writable by others: a record this code cannot parse becomes a dead letter
        (source and a fixed reason), as does an event its model cannot apply (a bug must not
        stop every model) or one of a model created under another key."""
        if e is None:
            outputs.add(REJECTED, None, Rejected(source=record.source, reason=record.problem or
                                                 "malformed model-events record").model_dump())
            return
        try:
            self._apply_event(e, outputs, dirty)
        except WrongKey:
            outputs.add(REJECTED, None, Rejected(
                source=e.source, reason="not applied: the model was created under another key "
                "(its ledger fingerprint differs); restart with the model's key and re-feed").model_dump())
        except Exception as err:    # noqa: BLE001 - one event must never stop every model
            # Processing is deterministic, so replay meets the same exception at the same
            # event: rolled back and dead-lettered by ``_apply_each`` (module docstring).
            raise _EventFailed(record, e.model_id) from err

    def _apply_event(self, e: LogEvent, outputs: Outputs, dirty: dict) -> None:
        self._set_partition(e.record.partition)          # cold records written while applying
        if e.event["type"] == "model":
            if e.model_id in dirty or f"model/{e.model_id}/head" in self.state:
                return                                  # config alone: a crash mid-create
            config = ModelConfig.model_validate(e.event)
            self.state[f"model/{e.model_id}/config"] = e.event
            self.state[f"model/{e.model_id}/key"] = self.rng.fingerprint()
            handler = kind(config.kind)(config, self.rng, self.state)
            handler.create(outputs)
            self._units(handler)
        else:
            handler = self._loaded(e.model_id, dirty)
            if handler is None:  # not created here: its registration was dead-lettered
                outputs.add(REJECTED, None, Rejected(
                    source=e.source, reason="not applied: the model is not registered "
                    "(its registration was refused: see the rejected record of its models "
                    "input)").model_dump())
                return
            if e.already_applied(handler.log_offset, handler.head_sources):
                return
            if e.is_example:
                if handler.bound is None or handler.admit(e.event):
                    handler.on_example(e.event, e.source, outputs)
                else:
                    handler.pass_over([(e.event, e.source)], outputs)
            else:
                handler.on_query(e.event, e.source, outputs)
        handler.head_sources[e.input_partition] = e.input_offset
        handler.log_offset = e.record.offset
        self._handlers[e.model_id] = handler
        dirty[e.model_id] = (handler, e.record.partition)


class Overlay(MutableMapping):
    """Writes buffered over a state mapping, with the partition each write belongs to.

    The processor's handlers read and write only through it, so a batch can be applied in
    a worker thread without touching the runtime's mapping (a faust table is not thread
    safe); ``flush`` writes the buffer through, in order, on the caller's thread.
    ``del overlay[key]`` buffers a deletion (of a key that may or may not exist: a
    handler retires the records it knows it wrote); it reaches the base, in its place in
    the write order, only if the base holds the key then."""

    def __init__(self, base: MutableMapping):
        self.base = base
        self.pending: dict[str, tuple[int | None, object]] = {}
        self.partition: int | None = None
        self._base_set_partition = getattr(base, "set_partition", lambda partition: None)

    def set_partition(self, partition: int) -> None:
        self.partition = partition

    def __getitem__(self, key):
        if key in self.pending:
            value = self.pending[key][1]
            if value is _DELETED:
                raise KeyError(key)
            return value
        return self.base[key]

    def get(self, key, default=None):
        if key in self.pending:
            value = self.pending[key][1]
            return default if value is _DELETED else value
        return self.base.get(key, default)

    def __contains__(self, key) -> bool:
        if key in self.pending:
            return self.pending[key][1] is not _DELETED
        return key in self.base

    def __setitem__(self, key, value) -> None:
        self.pending.pop(key, None)               # keep write order: last write last
        self.pending[key] = (self.partition, value)

    def __delitem__(self, key) -> None:
        self[key] = _DELETED

    def __iter__(self):
        return iter(k for k in set(self.base) | set(self.pending) if k in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def flush(self, owns=lambda partition: True) -> None:
        for key, (partition, value) in self.pending.items():
            if partition is not None and not owns(partition):
                continue
            if partition is not None:
                self._base_set_partition(partition)
            if value is not _DELETED:
                self.base[key] = value
            elif key in self.base:
                del self.base[key]
        self.pending.clear()

    def discard(self) -> None:
        self.pending.clear()

    def savepoint(self) -> dict:
        """The buffered writes so far (values are replaced on write, never changed in
        place, so a shallow copy is a snapshot)."""
        return dict(self.pending)

    def restore(self, saved: dict) -> None:
        self.pending.clear()
        self.pending.update(saved)


_DELETED = object()


def _raised_at(err: BaseException | None) -> str:
    """'file:line' of the innermost frame that raised ``err`` (no message, no values)."""
    tb = err.__traceback__ if err is not None else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    return f"{'/'.join(Path(tb.tb_frame.f_code.co_filename).parts[-2:])}:{tb.tb_lineno}"
