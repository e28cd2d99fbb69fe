"""Bulk consumption: the agents' partitions are read a fetch at a time through the
consumer faust already holds, past faust's per-record path.

Why. faust hands every record to its stream separately: the fetcher's drain loop awaits
``wait_first(callback(message), ...)`` per record (two tasks each), then the conductor,
a channel queue and the stream iterator touch it again. That costs more than the whole
raw consume-and-produce loop: a faust pass-through agent tuned for bulk work reaches
about 0.14 of a raw aiokafka loop on the same broker (bench/throughput.py), and the
worker has two such stages (sequencer and processor).

What changes. Only the fetcher's drain loop (``Consumer._drain_messages``, the coroutine
``Fetcher._fetcher`` awaits). Each fetch from faust's consumer is split by topic: records
of the dpstream topics (inputs and ``model-events``) go, one list per fetch, to a
bounded queue that a single task applies in order with the same functions the agents
run; every other record (table changelogs while tables recover) keeps faust's own
callback. faust keeps everything else: the app, the consumer group and its assignment
(the agents stay declared, so their topics are subscribed and co-partitioned with the
tables), table changelogs and recovery, commits, rebalancing, the web views.

Crash safety is the agents' own and unchanged: a batch's state is written only after its
outputs are acknowledged (agents/records.py), and a record is acked to faust only after
that, so committed offsets never run ahead of outputs or state (outputs are awaited
per batch on the app's outputs producer; faust flushes its own producer, which carries
the table changelogs, before each commit). A fetch taken under an older consumer generation (a
rebalance happened since) is dropped unacked: the partition's new owner re-reads it,
and the processor's ``owns`` fence keeps a stale worker from writing state. A batch that
fails (broker unreachable, a delivery timeout) is retried after a pause, from the state
the mapping holds: handlers are idempotent by log position and keyed noise, so a retry
re-emits identical outputs. So the worker never stops on it.

faust internals relied on (faust-streaming 0.15.x, faust/transport/consumer.py; the
dependency is pinned below 0.16 for this reason): ``Fetcher._fetcher`` awaits
``consumer._drain_messages(fetcher)``; ``Consumer._wait_next_records(timeout)`` returns
the records by TP and the active partitions; ``_to_message`` (changelog records only),
``_read_offset``, ``_add_gap``, ``_n_acked`` / ``_commit_every`` / ``commit`` and
``suspend_flow`` are used as the original drain loop uses them (a commit runs as a
background task, as faust's periodic commit does); acks do what ``Consumer.ack`` does
(``faust.types.tuples.ack_lock``, ``_committed_offset``, ``_acked_index``, ``_acked``,
``_n_acked``, ``_waiting_for_ack``) per partition, without a message per record;
``pause_partitions`` / ``resume_partitions`` / ``_paused_partitions`` (faust's own
pause: the partition leaves the set ``_wait_next_records`` asks for) hold back the log
partitions the worker appends to itself (``BulkPath.hold``), released only while
``app.rebalancing`` and ``app.in_recovery`` are false;
``app.consumer_generation_id`` marks rebalances. streams/app.py
also builds the outputs producer with ``app.producer._new_producer()`` (faust's
aiokafka driver, so it carries the app's producer settings).
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable

from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from dpstream.agents.records import RawRecord

log = logging.getLogger("dpstream.bulk")

ApplyFetch = Callable[[dict[str, list[RawRecord]]], Awaitable[bool]]
QUEUED_FETCHES = 4          # fetches waiting to be applied (each <= fetch_max_bytes, 50 MiB)
MERGE_RECORDS = 8_000       # queued fetches are merged into one batch up to this many records
RETRY_PAUSE = 1.0           # seconds between attempts at a batch that failed
RELEASE_AFTER = 1.0         # seconds without an own append before a held log partition is read again


class BulkPath:
    """What the rest of the app may do with the bulk path once installed."""

    def __init__(self, queue: asyncio.Queue, app, log_topic: str | None = None):
        self._queue, self._app, self._log_topic = queue, app, log_topic
        self.last_fetch = time.monotonic()      # when the drain loop last queued records
        self.busy = False                       # the applier is working on a batch
        # held log partitions -> last own append; kept across rebalances (faust keeps a
        # pause while the partition stays assigned), released or dropped by _release_held
        self.held: dict[TP, float] = {}

    def idle(self) -> float:
        """Seconds since faust's consumer last handed over any dpstream record, or 0 while
        anything is queued or being applied."""
        if self.busy or not self._queue.empty():
            return 0.0
        return time.monotonic() - self.last_fetch

    async def inject(self, batch: dict[str, list[RawRecord]]) -> None:
        """Apply records read from the log by other means, in the applier's order with
        the fetches; nothing is acked for them (faust's consumer still owns the offsets:
        when it delivers these records later, the agents skip them as handled)."""
        await self._queue.put((self._app.consumer_generation_id, batch, {}))

    def hold(self, partitions) -> None:
        """Hold back the log partitions this worker just appended to (call as soon as the
        broker acknowledged the appends, before the processor applies them).

        The processor takes the records the sequencer appends straight from the
        broker's acknowledgements (streams/app.py apply_fetch); read back from
        ``model-events`` they are dropped unparsed, yet each one cost a fetch in faust's
        consumer and a trip through the drain loop and the applier: half of all
        fetches. A held partition is paused in faust (``pause_partitions``: it leaves
        the set of partitions faust's consumer asks aiokafka for; aiokafka keeps at most
        one fetched batch of it and fetches it no further), and after each batch it is
        acked up to what the processor applied (``_hold_applied``). Records another
        writer appends to a held partition are not lost: the next own append lands
        beyond them and the processor re-reads the gap first; a partition with no own
        append for RELEASE_AFTER seconds is read again (``_release_held``); and the
        tail check reads any partition whose end is beyond what was applied once the
        worker idles. faust resumes every partition after a rebalance's recovery; the
        next own append holds it again.

        Measured (DP-Winnow, 5,000 examples/s, 10 s runs, /tmp probe): p99 114-176 ms
        (3 runs) when the consumer instead sought past the applied records after every
        batch, 73-140 ms held (4 runs); and those seeks (one per batch) were what set off aiokafka's
        lost wake-up (streams/tuning.py ``shorten_fetch_wait``): 11 stalls of 200 ms in
        10 s at 1,000 examples/s in 10 ms ticks, none held."""
        consumer, now, new = self._app.consumer, time.monotonic(), []
        for partition in partitions:
            tp = TP(self._log_topic, partition)
            self.held[tp] = now
            if tp not in consumer._paused_partitions:
                new.append(tp)
        if new:
            consumer.pause_partitions(new)


def install(app, topics: dict[str, str], apply: ApplyFetch, *, log_topic: str | None = None,
            log_positions: Callable[[], dict[int, int]] | None = None,
            on_batch: Callable[[], None] | None = None) -> BulkPath:
    """Route records of ``topics`` (Kafka name -> dpstream name) to ``apply`` in bulk.

    ``apply`` receives, per fetch, the records of each dpstream topic in offset order
    per partition, and must make their outputs and state durable before it returns;
    it returns False if it left any record out (a partition revoked meanwhile), and
    then none of the fetch is acked.
    ``log_positions()`` (optional) gives, per partition of ``log_topic`` this worker
    owns, the offset below which every record is applied: a partition the worker
    appends to itself is then held back instead of read back (``BulkPath.hold``).
    ``on_batch()`` (optional) is called as the applier starts on each batch.
    Call before the worker starts (the fetcher calls the drain loop once, at start)."""
    queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUED_FETCHES)
    path = BulkPath(queue, app, log_topic)
    held = path.held

    # Fault injection for the tests (tests/streams/test_kafka_pipeline.py): after this many
    # records the drain loop hands nothing more over, as a stalled consumer would.
    stall_after = int(os.environ.get("DPSTREAM_FAULT_STALL_AFTER", "-1"))
    handed = 0

    async def drain(fetcher) -> None:
        nonlocal handed
        consumer = app.consumer
        callback = consumer.callback
        read_offset = consumer._read_offset
        while not (consumer._stopped.is_set() or fetcher._stopped.is_set()):
            records, active = await consumer._wait_next_records(1.0)
            if not records or consumer.should_stop:
                continue
            generation = app.consumer_generation_id
            batch: dict[str, list[RawRecord]] = {}
            offsets: dict = {}                     # TP -> offsets handed over, to ack
            for tp, recs in records.items():
                if active is not None and tp not in active and tp not in consumer._buffered_partitions:
                    continue
                name = topics.get(tp.topic)
                if name is None:                   # changelogs while recovering: faust's path
                    for r in recs:
                        await consumer.wait_first(callback(consumer._to_message(tp, r)),
                                                  consumer.suspend_flow.wait())
                        read_offset[tp] = r.offset
                    continue
                previous = read_offset[tp]
                kept = []
                for r in recs:
                    if previous is not None and r.offset < previous:
                        continue                       # already read (faust drops these too)
                    if previous is not None and r.offset - previous > 1:
                        await consumer._add_gap(tp, previous + 1, r.offset)
                    previous = r.offset
                    kept.append(r)
                if not kept:
                    continue
                read_offset[tp] = previous
                offsets[tp] = [r.offset for r in kept]
                batch.setdefault(name, []).extend(
                    RawRecord(name, r.partition, r.offset, r.key, r.value or b"") for r in kept)
            if batch and 0 <= stall_after <= handed:
                continue                       # the injected stall: nothing handed over
            handed += sum(len(o) for o in offsets.values())
            if batch:
                path.last_fetch = time.monotonic()
                await queue.put((generation, batch, offsets))

    async def applier() -> None:
        consumer = app.consumer
        committing: asyncio.Future | None = None
        while True:
            path.busy = False
            generation, batch, offsets = await queue.get()
            path.busy = True
            if on_batch is not None:
                on_batch()
            # Under load fetches queue up: apply them as one batch (their records stay in
            # order per partition), so a batch's fixed cost (two round trips to the
            # broker, a state write per model) is paid once for all of them.
            while not queue.empty() and sum(map(len, batch.values())) < MERGE_RECORDS:
                more_generation, more, more_offsets = queue.get_nowait()
                if more_generation != generation:
                    generation, batch, offsets = more_generation, more, more_offsets
                    continue
                for name, recs in more.items():
                    batch.setdefault(name, []).extend(recs)
                for tp, more_acks in more_offsets.items():
                    offsets.setdefault(tp, []).extend(more_acks)
            while app.consumer_generation_id == generation:
                try:
                    complete = await apply(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as err:            # noqa: BLE001 - retried, never fatal
                    log.warning("batch failed (%s); retrying in %.0f s", type(err).__name__,
                                RETRY_PAUSE)
                    await asyncio.sleep(RETRY_PAUSE)
                    continue
                if not complete or app.consumer_generation_id != generation:
                    break                       # revoked meanwhile: the new owner commits
                for tp, acks in offsets.items():
                    _ack(consumer, tp, acks)
                if log_positions is not None:
                    await _hold_applied(consumer)
                commit_every = consumer._commit_every
                if commit_every is not None and consumer._n_acked >= commit_every and \
                        (committing is None or committing.done()):
                    # In the background, as faust's own periodic commit runs: a commit
                    # (a producer flush, then an offset commit) costs tens of ms, which
                    # the next batch need not wait for; what it commits is already acked.
                    consumer._n_acked = 0
                    committing = asyncio.ensure_future(_commit(consumer))
                break

    async def _hold_applied(consumer) -> None:
        """After a batch's acks: ack each owned log partition up to what the processor
        applied where the consumer handed over less (own appends, and the gaps the
        processor re-read before them: all applied, and the state was written first), so
        the group's committed offsets follow though held records are never handed over;
        then release what was held long enough."""
        read_offset, committed = consumer._read_offset, consumer._committed_offset
        for partition, position in log_positions().items():
            tp = TP(log_topic, partition)
            read = read_offset.get(tp)
            if read is None:                # nothing handed over since the assignment
                start = committed.get(tp) or 0
            else:                           # from the last handed-over offset itself: after
                start = read                # faust's seek that offset is the next to read
            if start >= position or read is not None and read >= position - 1:
                continue
            _ack(consumer, tp, range(start, position))
            read_offset[tp] = position - 1
        if held:
            await _release_held(consumer, time.monotonic())

    async def _release_held(consumer, now: float) -> None:
        """Resume held log partitions with no own append for RELEASE_AFTER seconds, so
        records other writers append reach the processor through the consumer again.
        The consumer first seeks to what the processor applied (faust's ``seek_wait``):
        it stopped where the partition was paused, maybe hours of own
        appends ago. A partition not assigned now waits (at most one entry per log
        partition): faust keeps its pause if it comes back. Nothing is released while
        faust rebalances or recovers tables: it pauses every partition then, so that no
        record is applied before the state it needs is restored, and resumes them
        itself when done (faust/tables/recovery.py ``_resume_streams``, then
        ``app.on_rebalance_end``)."""
        if app.rebalancing or app.in_recovery:
            return
        assigned = consumer.assignment()
        for tp, since in list(held.items()):
            if tp in assigned and now - since >= RELEASE_AFTER and held.pop(tp, None) is not None:
                position = log_positions().get(tp.partition)
                try:
                    if position is not None:
                        await consumer.seek_wait({tp: position})
                except Exception as err:    # noqa: BLE001 - revoked meanwhile: re-read by its owner
                    log.debug("seeking a released log partition failed (%s)", type(err).__name__)
                consumer.resume_partitions([tp])

    def _ack(consumer, tp, acks) -> None:
        """``Consumer.ack`` for a run of offsets of one partition, without building a
        faust message per record: the same bookkeeping under the same lock (offsets at
        or above the committed one, each once, counted in ``_n_acked``; the records were
        never tracked as unacked messages, so there is nothing to discard)."""
        if not app.topics.acks_enabled_for(tp.topic):
            return
        committed = consumer._committed_offset[tp]
        with ack_lock:
            index, acked = consumer._acked_index[tp], consumer._acked[tp]
            new = [o for o in acks if (committed is None or o >= committed) and o not in index]
            index.update(new)
            acked.extend(new)
            consumer._n_acked += len(new)
        notify(consumer._waiting_for_ack)

    async def _commit(consumer) -> None:
        try:
            await consumer.commit()
        except Exception as err:            # noqa: BLE001 - the next commit covers these offsets
            log.warning("commit failed (%s); the next one retries", type(err).__name__)

    app.consumer._drain_messages = drain

    @app.timer(RELEASE_AFTER)
    async def _release_idle() -> None:
        """Release held partitions when no batch runs (an idle worker)."""
        if held:
            try:
                await _release_held(app.consumer, time.monotonic())
            except Exception as err:            # noqa: BLE001 - the next tick retries
                log.warning("releasing held log partitions failed (%s)", type(err).__name__)

    @app.task
    async def _bulk_applier() -> None:
        """The applier; a bug that escapes it is logged and it restarts (its batch stays
        unacked: the tail check, or the partitions' next owner, reads it again)."""
        while True:
            try:
                await applier()
            except asyncio.CancelledError:
                raise
            except Exception:                   # noqa: BLE001 - the worker must not stop
                log.exception("the bulk applier failed; restarting it")
                await asyncio.sleep(RETRY_PAUSE)

    return path
