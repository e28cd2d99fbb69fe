"""The worker's state: two tables, kept per partition in memory and on compacted
changelog topics, and restored by the worker itself before any record of their
partition is applied.

    sequencer-state   model configs, the last input offset handled per input partition
    model-state       one record per key ``model/<id>/...`` (agents/kinds/storage.py),
                      ``log/<partition>`` (the processor's next log offset)

The handoff invariant (docs/architecture.md, "Partitions that move"): a record of
partition ``p`` (an input or ``model-events``) is applied only once both changelog
partitions ``p`` were read to the end offsets the broker gave after ``p`` was assigned
in the current generation, and the tables hold exactly what they say. Kafka Streams
keeps the same invariant with its restore consumer (a task is RUNNING only after its
stores are restored). A partition not restored yet is not an error: its records wait
(``WorkerApp.apply_fetch`` awaits ``restored``), they are never dead-lettered or skipped.

Why the worker restores its tables itself instead of using faust's: faust-streaming
0.15.3 marks a new assignment active (``Consumer._set_active_tps``) and yields before it
pauses those partitions for recovery, so a fetch taken in that window was applied
against a half-restored table: in a rebalance drill under load, every event of a model
was dead-lettered as "could not process this event" (a versioned record missing) or
"not registered" (its config missing), 2 runs in 2. And faust's recovery sought a
negative changelog offset on a busy rebalance (``Recovery._seek_offsets``: aiokafka's
``ValueError: Offset must be a positive integer``), crashed, and the worker exited
(faust-streaming issues 155 and 176 report the same family: off-by-one changelog offsets
after compaction, recoveries that never end). Here the whole restore is one small
loop over a consumer of its own, whose every offset comes from the broker, and whose
failures are retried in place.

The changelogs are the topics faust's tables wrote (``{app_id}-{table}-changelog``,
keys raw UTF-8, values faust's JSON codec, a tombstone a null value), so a worker of
either kind restores the other's state.

Partitions kept across a rebalance keep their state (the group's protocol is eager: a
partition assigned to this worker in two generations in a row was nobody else's in
between). A partition lost drops its state and its unsent changelog records; one
gained is restored from scratch.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from aiokafka import TopicPartition
from faust.serializers import codecs

from .kafka import running

log = logging.getLogger("dpstream.state")

TABLES = ("sequencer-state", "model-state")
# Heads are rewritten on every batch, so an uncompacted changelog grows with history
# and a restore would replay all of it. Kafka compacts closed segments only: short
# segments keep each changelog near one record per key, so a restore reads state, not
# history (measured by bench/pipeline.py's recovery step).
CHANGELOG_COMPACTION = {"segment.ms": "60000", "segment.bytes": str(16 * 1024 * 1024),
                        "min.cleanable.dirty.ratio": "0.1"}
RETRY_PAUSE = 1.0          # seconds between attempts at a restore that failed
STALL = 30.0               # seconds a restore may read nothing new before it starts again
SAY_WAITING_AFTER = 10.0   # seconds a batch waits for a restore before the worker says so
FETCH_RECORDS = 10_000     # records per changelog read


def changelog_name(app_id: str, table: str) -> str:
    """The changelog topic of ``table`` (faust's naming, faust/tables/base.py)."""
    return f"{app_id}-{table}-changelog"


class Table:
    """One table: values by key (str) and the partition each key was written to.

    ``encode`` and ``decode`` are the changelog's format: keys UTF-8, values faust's JSON
    codec (what its tables wrote), a deletion a null value."""

    def __init__(self, name: str, topic: str):
        self.name, self.topic = name, topic
        self.data: dict[str, object] = {}
        self.partition_of: dict[str, int] = {}
        self.keys_of: dict[int, set[str]] = {}      # so that a drop costs its own keys only

    @staticmethod
    def encode(key: str, value) -> tuple[bytes, bytes | None]:
        return key.encode(), None if value is None else codecs.dumps("json", value)

    @staticmethod
    def decode(key: bytes | None, value: bytes | None) -> tuple[str, object]:
        return (key or b"").decode(errors="replace"), None if value is None else codecs.loads("json", value)

    def drop(self, partitions: set[int]) -> None:
        """Forget every key of ``partitions``."""
        for p in partitions:
            for k in self.keys_of.pop(p, ()):
                if self.partition_of.get(k) == p:
                    del self.partition_of[k]
                    self.data.pop(k, None)

    def install(self, partition: int, values: dict[str, object]) -> None:
        """Replace what the table holds for ``partition`` with ``values`` (a restore's)."""
        self.drop({partition})
        self.data.update(values)
        self.partition_of.update(dict.fromkeys(values, partition))
        self.keys_of[partition] = set(values)

    def put(self, partition: int, key: str, value) -> None:
        old = self.partition_of.get(key)
        if old is not None and old != partition:
            self.keys_of.get(old, set()).discard(key)
        self.data[key] = value
        self.partition_of[key] = partition
        self.keys_of.setdefault(partition, set()).add(key)

    def remove(self, key: str) -> None:
        self.data.pop(key, None)
        old = self.partition_of.pop(key, None)
        if old is not None:
            self.keys_of.get(old, set()).discard(key)


class TableView:
    """The MutableMapping the agents use over a ``Table``. ``set_partition(p)`` makes
    later writes and deletions belong to partition ``p`` (batches have no current event
    to take it from): each goes to the changelog through ``writer`` (a
    ``faust_seam.ChangelogWriter``; ``deferrable``: its records may wait for the end of
    a held block), then to the table."""

    def __init__(self, table: Table, writer, *, deferrable: bool = False,
                 writable: Callable[[int], bool] = lambda partition: True):
        self.table, self.writer, self.deferrable = table, writer, deferrable
        self.writable = writable
        self.partition: int | None = None

    def set_partition(self, partition: int) -> None:
        self.partition = partition

    def _where(self) -> int:
        if self.partition is None:
            raise RuntimeError(f"a write to table {self.table.name} names no partition (set_partition)")
        return self.partition

    def __getitem__(self, key: str):
        return self.table.data[key]

    def __setitem__(self, key: str, value) -> None:
        partition = self._where()
        if not self.writable(partition):    # lost (maybe regained) while a batch ran: its
            return                          # state is the partition's owner's to write
        self.writer.add(self.table, partition, key, value, deferrable=self.deferrable)
        self.table.put(partition, key, value)

    def __delitem__(self, key: str) -> None:
        """A tombstone on the changelog (a restore and compaction drop the key), then the
        key leaves the table."""
        partition = self._where()
        if not self.writable(partition):
            return
        self.writer.add(self.table, partition, key, None, deferrable=self.deferrable)
        self.table.remove(key)

    def __contains__(self, key: str) -> bool:
        return key in self.table.data

    def get(self, key: str, default=None):
        return self.table.data.get(key, default)

    def keys(self) -> list[str]:
        return list(self.table.data)

    def __iter__(self):
        return iter(list(self.table.data))

    def __len__(self) -> int:
        return len(self.table.data)


class WorkerState:
    """The tables, which partitions they hold, and the restores that fill them.

    ``assign(partitions)`` takes the partitions this worker was just given (the union of
    the partition numbers of every dpstream topic assigned: all topics and both
    changelogs share one partition count, and faust co-partitions them). It drops what
    it lost and starts one restore task for what it gained. ``restored(partitions,
    owns)`` returns once each partition is restored or no longer owned. ``read`` is how
    a restore reads changelog partitions to their ends (``read_changelogs``; tests may
    give another)."""

    def __init__(self, app_id: str, kafka, writer, *, read=None):
        self.tables = {t: Table(t, changelog_name(app_id, t)) for t in TABLES}
        self.kafka, self.writer = kafka, writer
        self.read = read or self._read
        self.assigned: set[int] = set()
        self.ready: set[int] = set()
        # Tables change only between batches: a batch applied in a worker thread reads
        # them while a rebalance runs on the loop, and a drop or an install under it made
        # its later events read no state ("not registered" dead letters, seen in the
        # drill). While ``applying``, lost partitions wait in _dropping and restored ones
        # in _installing; ``_settle`` applies both once the batch is done.
        self._applying = False
        self._dropping: set[int] = set()
        self._installing: dict[int, dict[str, dict]] = {}
        self.epoch = 0                          # counts assignments (the log lines' numbers)
        self._changed = asyncio.Event()         # set whenever ``ready`` or ``assigned`` changes
        self._task: asyncio.Task | None = None
        self._task_partitions: set[int] = set()
        self._token = object()                  # the restore whose result counts
        self.restores = 0                       # restores completed (metrics, tests)
        self.declare: Callable[[], "asyncio.Future"] | None = None   # creates the changelogs

    def view(self, table: str, *, deferrable: bool = False) -> TableView:
        """The agents' mapping over ``table``. Writes reach only ready partitions: a
        partition lost while a batch ran (``ready`` loses it at once, and one regained
        is ready only after its restore is installed, between batches) is not written
        with state computed before, neither in memory nor on its changelog."""
        return TableView(self.tables[table], self.writer, deferrable=deferrable,
                         writable=self.is_ready)

    def topics(self) -> list[str]:
        return [t.topic for t in self.tables.values()]

    def is_ready(self, partition: int) -> bool:
        return partition in self.ready

    def assign(self, partitions: Iterable[int], *, fresh: bool = False) -> None:
        """The partitions this worker holds from now on (a rebalance's assignment).
        ``fresh``: this worker missed a generation (it was out of the group: another
        worker may have written its partitions meanwhile), so nothing counts as kept."""
        partitions = set(partitions)
        previous = set() if fresh else self.assigned
        lost, gained = (self.assigned - partitions) | (self.assigned & partitions if fresh else set()), \
            partitions - previous
        self.epoch += 1
        if lost:
            self.writer.drop(lost)
            self.ready -= lost
            self._dropping |= lost
        for p in set(self._installing) - partitions:
            del self._installing[p]
        # a restore of the previous assignment that had not finished starts again with
        # this one: every partition assigned and not ready is read in full
        self.assigned = partitions
        todo = partitions - self.ready - set(self._installing)
        running = self._task is not None and not self._task.done()
        if running and self._task_partitions == todo and not fresh:
            todo = set()                    # the restore under way reads exactly these
        elif running:
            self._task.cancel()
            self._task = None
        # one line per rebalance: outputs a batch published just before it may be
        # published again, identical, by the next owner (at-least-once)
        # (the text varies, so that the log's repeat filter never holds one back)
        log.info(f"assignment {self.epoch}: partitions {_list(partitions)} (kept "
                 f"{_list(partitions - gained)}, lost {_list(lost)}); restoring {_list(todo)} "
                 "from the changelogs")
        if todo:
            self._token = object()
            self._task_partitions = todo
            self._task = asyncio.get_running_loop().create_task(self._restore(todo, self._token))
        self._settle()
        self._notify()

    @contextlib.contextmanager
    def applying(self):
        """A batch is being applied: the tables keep their partitions until it is done."""
        self._applying = True
        try:
            yield
        finally:
            self._applying = False
            self._settle()
            self._notify()

    def _settle(self) -> None:
        """Drop the partitions lost and install those restored, unless a batch is being
        applied (then its end does it)."""
        if self._applying:
            return
        if self._dropping:
            for table in self.tables.values():
                table.drop(self._dropping)
            self._dropping = set()
        for p, values in self._installing.items():
            if p not in self.assigned:
                continue
            for name, table in self.tables.items():
                table.install(p, values[name])
            self.ready.add(p)
        self._installing = {}

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def restored(self, partitions: Iterable[int], owns: Callable[[int], bool],
                       stopping: Callable[[], bool] = lambda: False, *,
                       current: Callable[[], bool] = lambda: True) -> None:
        """Return once every one of ``partitions`` is restored, or not owned any more (its
        records are then left to its next owner), or the worker is ``stopping``; never
        while the worker has not taken in the consumer's assignment yet (``current``)."""
        partitions, since, said = set(partitions), time.monotonic(), False
        while True:
            self._settle()
            waiting = {p for p in partitions if owns(p) and p not in self.ready}
            if stopping() or current() and not waiting:
                return
            if not said and time.monotonic() - since >= SAY_WAITING_AFTER:
                log.info("records of partition(s) %s wait for their state's restore (%.0f s so "
                         "far); none is applied before it", _list(waiting), time.monotonic() - since)
                said = True
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    async def _restore(self, partitions: set[int], token: object) -> None:
        """Read both changelogs of ``partitions`` to their end offsets, then install the
        result and mark them ready, unless another assignment came meanwhile (then its
        own restore does it). Failures (a broker away, a right refused) are retried in
        place every RETRY_PAUSE seconds: the records wait, the worker goes on."""
        tps = [TopicPartition(t.topic, p) for t in self.tables.values() for p in sorted(partitions)]
        started, failures = time.monotonic(), 0
        epoch = self.epoch
        while token is self._token:
            try:
                if self.declare is not None:
                    await self.declare()
                read = await self.read(tps)
                break
            except asyncio.CancelledError:
                raise
            except Exception as err:        # noqa: BLE001 - retried; the records wait
                failures += 1
                (log.error if failures in (1, 10) or failures % 60 == 0 else log.debug)(
                    "restoring partition(s) %s failed (%s); trying again every %.0f s, no record "
                    "of them is applied meanwhile", _list(partitions), type(err).__name__, RETRY_PAUSE)
                await asyncio.sleep(RETRY_PAUSE)
        else:
            return
        if token is not self._token:
            return
        count = 0
        for p in partitions:
            self._installing[p] = {}
            for name, table in self.tables.items():
                values = read.get(TopicPartition(table.topic, p), {})
                self._installing[p][name] = {k: v for k, v in values.items() if v is not None}
                count += len(self._installing[p][name])
        self.restores += 1
        self._settle()
        log.info(f"assignment {epoch}: restored partition(s) {_list(partitions)}, {count} "
                 f"record(s) in {time.monotonic() - started:.1f} s")
        self._notify()

    async def _read(self, tps: list[TopicPartition]) -> dict:
        return await read_changelogs(self.kafka, tps)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except BaseException:           # noqa: BLE001 - cancelled, or failed: stopping anyway
                pass


async def read_changelogs(kafka, tps: list[TopicPartition], *, stall: float = STALL) -> dict:
    """Each changelog partition's keys and last values (None: deleted), read from its
    first offset to the end offset the broker gives now, with a consumer of no group.
    Offsets come from the broker alone (``beginning_offsets``, ``end_offsets``,
    ``position``), never from arithmetic on them. A read that gets nothing new for
    ``stall`` seconds raises ``TimeoutError`` (the caller tries again). An undecodable
    value (not written by a worker) is skipped with its place logged: the key keeps its
    earlier value, and the agents re-read the log from there (idempotent by offset)."""
    out: dict[TopicPartition, dict[str, object]] = {tp: {} for tp in tps}
    async with running(kafka.consumer(group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest",
                                      max_partition_fetch_bytes=8 * 1024 * 1024)) as consumer:
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > starts[tp]}
        for tp in todo:
            consumer.seek(tp, starts[tp])
        progress = time.monotonic()
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=500, max_records=FETCH_RECORDS)
            for tp, records in batch.items():
                values = out[tp]
                for r in records:
                    if r.offset >= ends[tp]:
                        break
                    try:
                        key, value = Table.decode(r.key, r.value)
                    except Exception as err:    # noqa: BLE001 - not a worker's record
                        log.error("changelog %s[%d] offset %d is not a state record (%s); skipped",
                                  tp.topic, tp.partition, r.offset, type(err).__name__)
                        continue
                    values.pop(key, None)       # keep log order: the last write last
                    values[key] = value
                if records:
                    progress = time.monotonic()
            for tp in list(todo):
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
            if todo and time.monotonic() - progress > stall:
                raise TimeoutError(f"changelog read made no progress for {stall:.0f} s")
    return out


def _list(partitions: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(partitions))) or "none"
