"""Bulk consumption: the worker's partitions are read a fetch at a time through the
consumer faust already holds, past faust's per-record path (the drain loop that hands
fetches over is in streams/worker/faust_seam.py, with every other faust internal it needs).

Each fetch's records of the dpstream topics (inputs and ``model-events``) go, one list
per fetch, to a bounded queue that a single task (``BulkPath.applier``) applies in order
with the agents' functions; under load queued fetches are merged into one batch. faust
keeps everything else: the app, the consumer group and its assignment (the agents stay
declared, so their topics are subscribed and co-partitioned), commits, rebalancing,
the web views. The tables are the worker's own (streams/worker/state.py).

Crash safety is the agents' own and unchanged: a batch's state is written only after its
outputs are acknowledged (agents/records.py), and a record is acked to faust only after
that, so committed offsets never run ahead of outputs or state (outputs are awaited per
batch on the app's outputs producer; faust flushes its own producer, which carries the
table changelogs, before each commit). A fetch taken under an older consumer generation
(a rebalance happened since) is dropped unacked: the partition's new owner re-reads it,
and the processor's ``owns`` fence keeps a stale worker from writing state. A batch that
fails is retried after a pause, from the state the mapping holds: handlers are
idempotent by log position and keyed noise, so a retry re-emits identical outputs. It is
retried for as long as a broker outage or a refused right lasts (someone outside ends
those), for GIVE_UP_AFTER seconds when the error is anything else (then the worker exits
for its supervisor to restart it: waiting would not change it), and not at all once the
worker stops (``keeps_trying``, ``stop``; streams/worker/watchdog.py ``StopGuard``).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from faust.types import TP

from dpstream.agents.records import RawRecord

from . import faust_seam as seam

log = logging.getLogger("dpstream.bulk")

REFUSALS = (TopicAuthorizationFailedError, GroupAuthorizationFailedError)
ApplyFetch = Callable[[dict[str, list[RawRecord]]], Awaitable[bool]]
QUEUED_FETCHES = 4          # fetches waiting to be applied (each <= fetch_max_bytes, 50 MiB)
MERGE_RECORDS = 8_000       # queued fetches are merged into one batch up to this many records
RETRY_PAUSE = 1.0           # seconds between attempts at a batch that failed
RELEASE_AFTER = 1.0         # seconds without an own append before a held log partition is read again
GIVE_UP_AFTER = 30.0        # seconds a batch may fail with an error no one outside can fix


class BatchFailed(RuntimeError):
    """A batch kept failing with an error that neither the broker nor an admin can fix."""


def keeps_trying(err: BaseException) -> bool:
    """Whether a failed batch is retried for as long as the error lasts: a broker gone or
    slow (aiokafka's retriable errors, timeouts, a gap that could not be re-read in time)
    and a right refused (an admin grants it again; the line says which) end when someone
    outside acts. Anything else (a faust service gone, a bug) will not change by waiting:
    after GIVE_UP_AFTER seconds the worker exits for its supervisor to restart it."""
    from aiokafka import errors as E

    from .logread import GapNotFilled
    return (getattr(err, "retriable", False) or isinstance(err, REFUSALS + (
        E.KafkaTimeoutError, GapNotFilled, asyncio.TimeoutError, ConnectionError)))


class BulkPath:
    """The queue of fetches, the task that applies them, and the held log partitions.

    ``apply`` receives, per batch, the records of each dpstream topic in offset order per
    partition, and must make their outputs and state durable before it returns; it
    returns False if it left any record out (a partition revoked meanwhile), and then
    none of the batch is acked. ``log_positions()`` gives, per partition of ``log_topic``
    this worker owns, the offset below which every record is applied (a partition the
    worker appends to itself is held back instead of read back, ``hold``).
    ``on_batch()`` is called as the applier starts on each batch."""

    def __init__(self, app, topics: dict[str, str], apply: ApplyFetch, *, log_topic: str,
                 log_positions: Callable[[], dict[int, int]], on_batch: Callable[[], None],
                 explain: Callable[[BaseException, str], str] | None = None):
        self._app, self._apply, self._log_topic = app, apply, log_topic
        self._explain = explain or (lambda err, doing: f"{doing} failed ({type(err).__name__})")
        self._log_positions, self._on_batch = log_positions, on_batch
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=QUEUED_FETCHES)
        self.last_fetch = time.monotonic()      # when the drain loop last queued records
        self.busy = False                       # the applier is working on a batch
        # held log partitions -> last own append; kept across rebalances (faust keeps a
        # pause while the partition stays assigned), released or dropped by _release_held
        self.held: dict[TP, float] = {}
        self._committing: asyncio.Future | None = None
        self._topics = ", ".join(sorted(topics))
        self.stopping = False                   # the worker was asked to stop (``stop``)
        self.batch_records = 0                  # records of the batch being applied
        seam.install_drain(app, topics, self._handover, self._fetch_failed)

    def say(self, err: BaseException, operation: str, what: str) -> str:
        """One line for a failed broker call (``explain``): the right refused, named from
        the error (a topic or the group), or else ``operation`` on ``what``."""
        if isinstance(err, GroupAuthorizationFailedError):
            return self._explain(err, "Read group {}")
        if isinstance(err, TopicAuthorizationFailedError):
            return self._explain(err, f"{operation} topic {{}}")
        return self._explain(err, f"{operation} {what}")

    def stop(self) -> None:
        """The worker is stopping: no batch is retried any more (what is left stays
        uncommitted, and is read again by the next worker)."""
        self.stopping = True

    def _fetch_failed(self, err: BaseException, failing_for: float) -> bool:
        """A fetch the broker refused (an ACL revoked while the worker runs, a broker
        error): say what is missing (RepeatFilter keeps it to a line per 10 s) and fetch
        again; nothing was consumed, so nothing is lost. A Kafka error that waiting will
        not change (``keeps_trying``: e.g. aiokafka's group coordination task died, and
        every fetch re-raises its error) for GIVE_UP_AFTER seconds in a row, or any other
        error (a bug): let faust's fetcher fail, which crashes the app (the worker then
        exits for its supervisor, watchdog.StopGuard)."""
        from aiokafka.errors import KafkaError
        doing = self.say(err, "Read", f"topics {self._topics}")
        if not isinstance(err, KafkaError):
            return False
        if not keeps_trying(err) and failing_for >= GIVE_UP_AFTER:
            log.critical("%s for %.0f s, which waiting will not change; stopping the worker so "
                         "that its supervisor restarts it", doing, failing_for)
            return False
        log.error("%s; fetching again every %.0f s, nothing is lost", doing, seam.FETCH_RETRY)
        return True

    async def _handover(self, generation: int, batch: dict[str, list[RawRecord]], offsets: dict) -> None:
        self.last_fetch = time.monotonic()
        await self._queue.put((generation, batch, offsets))

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
        broker's acknowledgements (streams/worker/app.py ``apply_fetch``); read back from
        ``model-events`` they are dropped unparsed, yet each one cost a fetch in faust's
        consumer and a trip through the drain loop and the applier: half of all
        fetches. A held partition is paused in faust (``pause_partitions``: it leaves
        the set of partitions faust's consumer asks aiokafka for; aiokafka keeps at most
        one fetched batch of it and fetches it no further), and after each batch it is
        acked up to what the processor applied (``_hold_applied``). Records another
        writer appends to a held partition are not lost: the next own append lands
        beyond them and the processor re-reads the gap first; a partition with no own
        append for RELEASE_AFTER seconds is read again (``release_held``); and the
        tail check reads any partition whose end is beyond what was applied once the
        worker idles. faust resumes every partition after a rebalance; the
        next own append holds it again.

        Measured (DP-Winnow, 5,000 examples/s, 10 s runs, /tmp probe): p99 114-176 ms
        (3 runs) when the consumer instead sought past the applied records after every
        batch, 73-140 ms held (4 runs); and those seeks (one per batch) were what set off
        aiokafka's lost wake-up (streams/worker/tuning.py ``shorten_fetch_wait``): 11 stalls of
        200 ms in 10 s at 1,000 examples/s in 10 ms ticks, none held."""
        now, new = time.monotonic(), []
        for partition in partitions:
            tp = TP(self._log_topic, partition)
            self.held[tp] = now
            if not seam.is_paused(self._app, tp):
                new.append(tp)
        if new:
            self._app.consumer.pause_partitions(new)

    async def run(self) -> None:
        """The applier; a bug that escapes it is logged and it restarts (its batch stays
        unacked: the tail check, or the partitions' next owner, reads it again)."""
        while not self._ending():
            try:
                await self._applier()
            except asyncio.CancelledError:
                raise
            except Exception:                   # noqa: BLE001 - the worker must not stop
                log.exception("the bulk applier failed; restarting it")
                await asyncio.sleep(RETRY_PAUSE)

    def _ending(self) -> bool:
        return self.stopping or self._app.should_stop

    def left_over(self) -> str:
        """What a worker stopping now leaves to the next one (for the stop's log line)."""
        queued = sum(len(recs) for _, batch, _ in list(self._queue._queue) for recs in batch.values())
        return (f"{self.batch_records if self.busy else 0} record(s) in the batch being applied "
                f"and {queued} queued, not applied")

    async def _retry(self, generation: int, batch: dict[str, list[RawRecord]]) -> bool | None:
        """Apply ``batch`` until it succeeds (its result), the consumer generation changes
        or the worker stops (None: left unacked, so read again by the partitions' next
        owner, or by this worker after a restart). An error the broker or an admin can end
        is retried for as long as it lasts, anything else for GIVE_UP_AFTER seconds, then
        the app is crashed for the supervisor to restart it (``keeps_trying``). A failure
        once the worker is stopping is expected (its producer stops under the batch:
        NotReady) and logged as a warning, not an error: the batch stays unacked."""
        app, first_failure = self._app, None
        while app.consumer_generation_id == generation:
            if self._ending():
                log.warning("stopping: a batch of %d record(s) is left unapplied; the next "
                            "worker reads it again, nothing is lost", self.batch_records)
                return None
            try:
                return await self._apply(batch)
            except asyncio.CancelledError:
                raise
            except Exception as err:            # noqa: BLE001 - retried, or the worker restarts
                if self._ending():              # a stop closes the producer under the batch
                    log.warning("stopping: %s; a batch of %d record(s) is left unapplied; the "
                                "next worker reads it again, nothing is lost",
                                self.say(err, "Write", "the batch's outputs and state"),
                                self.batch_records)
                    return None
                now = time.monotonic()
                first_failure = first_failure or now
                if not keeps_trying(err) and now - first_failure >= GIVE_UP_AFTER:
                    log.critical("%s for %.0f s, which waiting will not change; stopping the "
                                 "worker so that its supervisor restarts it (the batch is read "
                                 "again, nothing is lost)",
                                 self.say(err, "Write", "the batch's outputs and state"),
                                 now - first_failure)
                    await app.crash(BatchFailed(f"a batch failed for {GIVE_UP_AFTER:.0f} s "
                                                f"({type(err).__name__})"))
                    return None
                log.error("%s; retrying the batch every %.0f s, nothing is lost",
                          self.say(err, "Write", "the batch's outputs and state"), RETRY_PAUSE)
                await asyncio.sleep(RETRY_PAUSE)
        return None

    async def _applier(self) -> None:
        app = self._app
        while not self._ending():
            self.busy = False
            generation, batch, offsets = await self._queue.get()
            self.busy = True
            self._on_batch()
            # Under load fetches queue up: apply them as one batch (their records stay in
            # order per partition), so a batch's fixed cost (two round trips to the
            # broker, a state write per model) is paid once for all of them.
            while not self._queue.empty() and sum(map(len, batch.values())) < MERGE_RECORDS:
                more_generation, more, more_offsets = self._queue.get_nowait()
                if more_generation != generation:
                    generation, batch, offsets = more_generation, more, more_offsets
                    continue
                for name, recs in more.items():
                    batch.setdefault(name, []).extend(recs)
                for tp, more_acks in more_offsets.items():
                    offsets.setdefault(tp, []).extend(more_acks)
            self.batch_records = sum(map(len, batch.values()))
            complete = await self._retry(generation, batch)
            if not complete or app.consumer_generation_id != generation:
                continue                        # revoked meanwhile: the new owner commits
            for tp, acks in offsets.items():
                seam.ack(app, tp, acks)
            await self._hold_applied()
            if seam.commit_due(app) and (self._committing is None or self._committing.done()):
                # In the background, as faust's own periodic commit runs: a commit
                # (a producer flush, then an offset commit) costs tens of ms, which
                # the next batch need not wait for; what it commits is already acked.
                self._committing = asyncio.ensure_future(self._commit())

    async def _hold_applied(self) -> None:
        """After a batch's acks: ack each owned log partition up to what the processor
        applied where the consumer handed over less (own appends, and the gaps the
        processor re-read before them: all applied, and the state was written first), so
        the group's committed offsets follow though held records are never handed over;
        then release what was held long enough."""
        app = self._app
        for partition, position in self._log_positions().items():
            tp = TP(self._log_topic, partition)
            read = seam.read_position(app, tp)
            if read is None:                # nothing handed over since the assignment
                start = seam.committed_position(app, tp) or 0
            else:                           # from the last handed-over offset itself: after
                start = read                # faust's seek that offset is the next to read
            if start >= position or read is not None and read >= position - 1:
                continue
            seam.ack(app, tp, range(start, position))
            seam.set_read_position(app, tp, position - 1)
        if self.held:
            await self.release_held(time.monotonic())

    async def release_idle(self, now: float) -> None:
        """``release_held`` from a timer: only while no batch is being applied."""
        if self.held and not self.busy:
            await self.release_held(now)

    async def release_held(self, now: float) -> None:
        """Resume held log partitions with no own append for RELEASE_AFTER seconds, so
        records other writers append reach the processor through the consumer again.
        The consumer first seeks to what the processor applied (faust's ``seek_wait``):
        it stopped where the partition was paused, maybe hours of own appends ago. A
        partition not assigned now waits (at most one entry per log partition): faust
        keeps its pause if it comes back. Nothing is released while faust rebalances: it
        pauses every partition then and resumes them itself when done
        (faust/tables/recovery.py ``_resume_streams``, then ``app.on_rebalance_end``).

        Called only where every record the processor applied is acked: at a batch's end
        (``_hold_applied``) or between batches (``release_idle``). The seek moves faust's
        read offset to the applied position, and ``_hold_applied`` acks the own appends
        from the read offset on; a seek in the middle of a batch (the timer ran between
        two of its 500-record chunks, one of which took over RELEASE_AFTER under load)
        moved it past the earlier chunk's appends before they were acked, so they were
        never acked, faust committed only up to that gap, and the group's committed
        offset of the log partition stayed there for good (issue 43 item 11: stuck at
        111 of 751 and 225 of 5104; found with a trace of every ack, handover, seek and
        hold of the log partitions). A partition held again while the seek was awaited
        (an own append meanwhile: the seek's position is then stale) stays paused; the
        next release seeks it again."""
        app = self._app
        if app.rebalancing or app.in_recovery:
            return
        consumer = app.consumer
        assigned = consumer.assignment()
        for tp, since in list(self.held.items()):
            if tp in assigned and now - since >= RELEASE_AFTER and self.held.pop(tp, None) is not None:
                position = self._log_positions().get(tp.partition)
                try:
                    if position is not None:
                        await consumer.seek_wait({tp: position})
                except Exception as err:    # noqa: BLE001 - revoked meanwhile: re-read by its owner
                    log.debug("seeking a released log partition failed (%s)", type(err).__name__)
                if tp not in self.held:
                    consumer.resume_partitions([tp])

    async def _commit(self) -> None:
        try:
            await self._app.consumer.commit()
        except Exception as err:            # noqa: BLE001 - the next commit covers these offsets
            log.warning("commit failed (%s); the next one retries", type(err).__name__)
