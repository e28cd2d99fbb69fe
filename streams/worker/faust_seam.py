"""Every use of faust's, mode's and aiokafka's internals, in one module.

The worker reads whole fetches through the consumer faust already holds (streams/worker/bulk.py)
and runs that consumer on its own event loop. Both need names these libraries do not
promise to keep: private attributes and methods (leading underscores), and a few public
ones of faust's internal classes. They are all here, each behind a small function, and
``contract()`` checks that every one exists with the signature relied on, in the
installed versions, without a broker (``tests/streams/test_faust_seam.py`` runs it in the
fast test loop, and the worker runs it at start, refusing to start with the list of
what changed). pyproject.toml pins the ranges tested: faust-streaming 0.15.x,
mode-streaming 0.7.x, aiokafka 0.14.x.

What each part replaces, and why:

* **The fetcher's drain loop** (``install_drain``): faust hands every record to its stream
  separately: the fetcher's drain loop (``Consumer._drain_messages``, the coroutine
  ``Fetcher._fetcher`` awaits) awaits ``wait_first(callback(message), ...)`` per record
  (two tasks each), then the conductor, a channel queue and the stream iterator touch it
  again. That costs more than the whole raw consume-and-produce loop (bench/throughput.py:
  a faust pass-through agent tuned for bulk work reaches about 0.1 of a raw aiokafka loop).
  The replacement splits each fetch from ``_wait_next_records`` by topic: records of the
  dpstream topics go to ``handover`` as one batch per fetch; every other record (table
  topics faust itself reads) keeps faust's own callback. It keeps faust's
  bookkeeping: ``_read_offset``, gaps (``_add_gap``), and skips records already read.
  Records of a partition that left faust's active set while the fetch waited are given
  back (``_seek`` to the first of them), where faust's ``getmany`` drops them: that lost
  table changelog records and left a worker in recovery forever (``unread``).
* **Inbound times** (in ``install_drain``): faust's livelock check
  (``AIOKafkaConsumerThread.verify_event_path``, every 2.5 commit intervals) logs
  "Stream has not started processing TP(...)" at ERROR for a partition with records
  past its position and no time in ``Monitor.stream_inbound_time``, which faust's stream
  sets per record (``Monitor.on_stream_event_in``, with ``monotonic()``). Records handed
  over in bulk never pass there, so once a worker had run ``stream_processing_timeout``
  (5 min) every partition with a backlog was reported, at every check, in normal work
  (issue 43). The drain notes each handed-over partition's time as faust's stream would:
  the check stays silent while batches flow and still says "Stream stopped processing,
  or is slow" when a partition with a backlog gets none for that long.
  A partition no batch has taken yet (one a rebalance brought, while the worker restores
  its state) is reported at WARNING, INFO during a restore (``QuietIdleStreams``).
* **Acks** (``ack``): what ``Consumer.ack`` does per message (``faust.types.tuples.ack_lock``,
  ``_committed_offset``, ``_acked_index``, ``_acked``, ``_n_acked``, ``_waiting_for_ack``),
  per partition, without building a message per record; commits (``commit_due``) as
  faust's drain loop triggers them (``_commit_every``); and the search for what to commit
  (``faster_commits``: the ``consecutive_numbers`` that ``Consumer._new_offset`` calls,
  one C-speed check for the usual single run of acked offsets).
* **Pausing** (``is_paused``): faust's own pause set (``_paused_partitions``).
* **The consumer on the worker's loop** (``use_consumer``): faust runs aiokafka's
  consumer in a thread with a second event loop
  (``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread``, a mode
  ``QueueServiceThread``); every call crosses threads through a method queue, and the two
  threads share one GIL. Profiled at 23,000 DP-Winnow examples/s (py-spy, ~10 s), faust's
  consumer thread was active in 41% of the samples, 58% of those in its loop's selector,
  its real work about 17% of a core. Side by side (bench/throughput.py, two runs on one
  broker): capacity 51,726 and 50,376 examples/s on the loop against 41,079 and 47,271
  with the thread; at half capacity p50 7 and 7 ms against 21 and 17 ms.
  ``InLoopConsumerThread`` is faust's class with the thread taken out: ``thread_loop`` is
  the worker's loop, ``start`` serves the service as a task of it (mode's
  ``ServiceThread._serve``), ``call_thread`` awaits the call (``maybe_async``, as mode's
  method queue does), and ``_gather_remaining_tasks`` (which, in a thread, cancels every
  task left on the thread's loop: here, the whole app's) does nothing.
* **The outputs producer** (``new_producer``): faust's aiokafka driver builds it
  (``Producer._new_producer``), so it carries the app's producer settings.
* **A producer's wait for a broker's answer** (``bound_request_waits``): every producer
  the driver builds gets its connections' request timeout (``AIOKafkaClient.
  _request_timeout_ms``) bounded apart from its batches' life, so that a hung broker
  does not hold the worker's writes (the function says why).
* **The aiokafka consumer and its fetcher** (``aiokafka_consumer``, ``set_fetch_wait``):
  the fetch waits (``Fetcher._fetch_max_wait_ms``, ``_fetch_min_bytes``,
  ``_fetcher_timeout``; streams/worker/tuning.py says why each value).
* **Table changelog records** (``ChangelogWriter``): a batch's state records go to
  faust's producer (the driver's ``_ensure_producer``) in one step, so that faust's
  flush before every commit covers them. The tables themselves are the worker's, not
  faust's (streams/worker/state.py says why).
* **Undecodable record batches** (``guard_undecodable``): aiokafka's
  ``PartitionRecords._unpack_records`` (it decodes a batch as it hands its records
  over), over batches that turn a decoding error into one dead-letter record per offset.
* **Refused commits** (``RefusedCommits``): faust's ``AIOKafkaConsumerThread._commit``,
  with a refusal (a right revoked) logged instead of crashing the consumer.
* **The group coordination's held error** (``take_group_error``): aiokafka's
  ``GroupCoordinator._pending_exception``, ``check_errors`` and ``_coordination_task``.
* **Crash and left-over state** (``crash_reason``, ``acked_uncommitted``): the app's
  ``_consumer``, its ``_thread``, mode's ``crashed`` / ``crash_reason``, ``_acked``.
* **ACLs** (``create_acls``, ``delete_acls``, ``describe_acls``): aiokafka's admin client
  has no ACL methods, but its protocol module defines Kafka's CreateAcls, DeleteAcls and
  DescribeAcls requests; they are sent with the admin client's ``_send_request``.
* **Topic metadata without creating the topic** (``describe_topic``): aiokafka's
  ``describe_topics`` sends a Metadata request that allows auto-creation, so asking
  whether a misspelt topic exists created it; the same request with
  ``allow_auto_topic_creation=False`` (Kafka's own AdminClient sends that) goes through
  ``_send_request``.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from itertools import islice
from operator import lt
from time import monotonic

import faust.transport.consumer as faust_consumer_module
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.errors import (CommitFailedError, GroupAuthorizationFailedError,
                             TopicAuthorizationFailedError, UnsupportedCodecError)
from aiokafka.structs import OffsetAndMetadata
from faust.transport.consumer import Consumer as FaustConsumer
from faust.transport.drivers.aiokafka import SLOW_PROCESSING_STREAM_IDLE_SINCE_START, AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaDriverConsumer
from faust.transport.drivers.aiokafka import Producer as AIOKafkaDriverProducer
from faust.transport.drivers.aiokafka import ensure_aiokafka_TP
from faust.types import TP
from faust.types.tuples import ack_lock
from faust.utils.functional import consecutive_numbers
from mode.threads import ServiceThread
from mode.utils.futures import maybe_async, notify

from dpstream.agents.records import RawRecord

from .batches import send_records

log = logging.getLogger("dpstream.faust_seam")

# handover(generation, batch by dpstream topic, offsets by TP): one fetch's dpstream records
Handover = Callable[[int, dict[str, list[RawRecord]], dict], Awaitable[None]]


# ---------------------------------------------------------------- the drain loop
FETCH_RETRY = 2.0      # seconds before fetching again after a fetch the broker refused


def install_drain(app, topics: dict[str, str], handover: Handover,
                  fetch_failed: Callable[[BaseException, float], bool] | None = None) -> None:
    """Replace faust's per-record drain loop with one that hands each fetch's records of
    ``topics`` (Kafka name -> dpstream name) to ``handover``, in offset order per
    partition, with the offsets to ack once applied. A fetch that raises (the broker
    refused it: an ACL revoked while the worker runs) goes to ``fetch_failed`` with the
    seconds fetches have failed in a row, which says whether to fetch again after
    FETCH_RETRY seconds (nothing was consumed, so nothing is lost) or let faust's fetcher
    fail. Call before the worker starts (the fetcher calls the drain loop once, at
    start)."""
    consumer = app.consumer
    guard_undecodable(topics)

    async def unread(tp, offset: int) -> None:
        """Give back the records of a partition that left the active set while its fetch
        waited: aiokafka moved its position past them when it returned them, so dropping
        them (as faust's ``getmany`` does) loses them. Seen in the two-worker kill test
        (7 of 34 runs): the rebalance emptied faust's live active set during the
        wait, aiokafka (``Fetcher.fetched_records``: ``if partitions and tp not in
        partitions``) then returned every buffered partition, recovery had just sought
        a table changelog to 0, and its records were dropped here: the changelog's
        position sat at its end and recovery waited for them forever. Seeking back to
        the first of them (aiokafka returned them, so that was its position) makes the
        consumer fetch them again once faust resumes the partition. A partition revoked
        meanwhile cannot be sought; its next owner reads it from the committed offset."""
        try:
            await consumer._seek(tp, offset)
        except Exception:              # noqa: BLE001 - not assigned any more
            pass

    async def drain(fetcher) -> None:
        callback = consumer.callback
        read_offset = consumer._read_offset
        failing_since = None                       # when fetches started failing in a row
        while not (consumer._stopped.is_set() or fetcher._stopped.is_set()):
            try:
                records, active = await consumer._wait_next_records(1.0)
            except asyncio.CancelledError:
                raise
            except Exception as err:       # noqa: BLE001 - refused fetches wait, bugs do not
                now = monotonic()
                failing_since = failing_since or now
                if fetch_failed is None or not fetch_failed(err, now - failing_since):
                    raise
                await asyncio.sleep(FETCH_RETRY)
                continue
            failing_since = None
            if not records or consumer.should_stop:
                continue
            generation = app.consumer_generation_id
            batch: dict[str, list[RawRecord]] = {}
            offsets: dict = {}                     # TP -> offsets handed over, to ack
            for tp, recs in records.items():
                if active is not None and tp not in active and tp not in consumer._buffered_partitions:
                    await unread(tp, recs[0].offset)
                    continue
                name = topics.get(tp.topic)
                if name is None:                   # a topic faust reads itself: faust's path
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
                    RawRecord(name, r.partition, r.offset, r.key, r.value) if r.value else
                    raw_record(name, r) for r in kept)
            if batch:
                now, inbound = monotonic(), app.monitor.stream_inbound_time
                for tp in offsets:                 # as faust's stream would (module
                    inbound[tp] = now              # docstring: "Inbound times")
                await handover(generation, batch, offsets)

    consumer._drain_messages = drain


# ---------------------------------------------------------------- undecodable record batches
CODECS = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}       # Kafka's compression type ids
_GUARDED: set[str] = set()           # topics whose undecodable batches become dead letters


class Undecodable(bytes):
    """The value aiokafka reports for each record of a batch it could not decode: empty
    bytes that say why (``reason``). Never on the wire: a value read from the broker is a
    plain ``bytes``, so no producer can forge one."""

    reason: str

    def __new__(cls, reason: str):
        value = super().__new__(cls, b"")
        value.reason = reason
        return value


class _UndecodableRecord:
    """A record of an undecodable batch, as aiokafka's ``PartitionRecords`` reads one."""

    __slots__ = ("offset", "timestamp", "value")
    timestamp_type, key, checksum, headers = 0, None, None, ()

    def __init__(self, offset: int, timestamp: int, value: Undecodable):
        self.offset, self.timestamp, self.value = offset, timestamp, value


class _GuardedBatch:
    """One record batch: its records decoded in full on iteration, or, when decoding
    raises (a codec whose library is missing, bytes no codec accepts), one
    ``_UndecodableRecord`` per offset it covers. Everything else is the batch's own."""

    def __init__(self, batch, owner):
        self._batch, self._owner = batch, owner

    def __getattr__(self, name):
        return getattr(self._batch, name)

    def __iter__(self):
        batch = self._batch
        try:
            return iter(list(batch))
        except Exception as err:            # noqa: BLE001 - whatever the codec raised
            codec = CODECS.get(getattr(batch, "compression_type", None), "an unknown codec")
            tp = self._owner._tp
            start = max(getattr(batch, "base_offset", 0), self._owner.next_fetch_offset)
            end = batch.next_offset
            # the cause by the error's type and the codec only: a codec's message may quote
            # the bytes it choked on (aiokafka's missing-library message is its own text)
            cause = str(err) if isinstance(err, UnsupportedCodecError) else type(err).__name__
            log.error("records %d..%d of topic %s partition %d are in a record batch compressed "
                      "with %s that this worker cannot decode (%s); each becomes a dead letter "
                      "on the rejected topic, and the partition is read on", start, end - 1,
                      tp.topic, tp.partition, codec, cause)
            value = Undecodable(f"undecodable record batch: compressed with {codec}, which "
                                f"this worker cannot decode ({type(err).__name__})")
            stamp = getattr(batch, "max_timestamp", -1)
            return iter([_UndecodableRecord(o, stamp, value) for o in range(start, end)])


class _GuardedRecords:
    """A fetch's ``MemoryRecords`` whose batches are ``_GuardedBatch`` es."""

    def __init__(self, records, owner):
        self._records, self._owner = records, owner

    def has_next(self) -> bool:
        return self._records.has_next()

    def next_batch(self):
        batch = self._records.next_batch()
        return None if batch is None else _GuardedBatch(batch, self._owner)


_unpack_records = PartitionRecords._unpack_records


def _unpack_guarded(self):
    """``PartitionRecords._unpack_records`` over guarded batches for the dpstream topics."""
    if self._tp.topic in _GUARDED:
        self._records = _GuardedRecords(self._records, self)
    return _unpack_records(self)


def guard_undecodable(topics) -> None:
    """Let a record batch of ``topics`` that aiokafka cannot decode become dead letters
    instead of holding its partition for ever. aiokafka decodes a batch when it hands its
    records over (``PartitionRecords._unpack_records``, aiokafka/consumer/fetcher.py);
    when that raises (``UnsupportedCodecError`` without a codec's library,
    ``CorruptRecordException``, a codec's own error on bad bytes), the error reaches the
    consumer's caller, the position stays before the batch, and every later fetch of the
    partition returns the same batch and the same error: the issue saw a worker log
    "refused to Read topic {}" every 2 s while every later record of the models keyed to
    that partition waited for good. Guarded, such a batch yields one record per offset it
    covers (from the batch header, which is never compressed), each with an
    ``Undecodable`` value naming the codec and the error type, and the consumer reads on;
    the drain loop (``raw_record``) and ``read_range`` make them records with a
    ``problem``, which the agents dead-letter (the records are not lost from the log: a
    worker with the codec can replay them). Dead letters, not an exit: a restarted worker
    would meet the same batch, so exiting would stop every model on that partition for
    good, against the rule that a worker never stops on input. Changelog topics are not
    guarded (a table must not read an undecodable record as a deletion): faust fails
    there as before. Process-wide and idempotent."""
    _GUARDED.update(topics)
    PartitionRecords._unpack_records = _unpack_guarded


def raw_record(name: str, record) -> RawRecord:
    """A consumer record of dpstream topic ``name`` as the agents take it: an undecodable
    one (``guard_undecodable``) carries its reason as ``problem``; a tombstone (no value)
    an empty value."""
    value = record.value
    if isinstance(value, Undecodable):
        return RawRecord(name, record.partition, record.offset, record.key, b"", problem=value.reason)
    return RawRecord(name, record.partition, record.offset, record.key, value or b"")


def ack(app, tp, offsets) -> None:
    """``Consumer.ack`` for a run of offsets of one partition, without building a faust
    message per record: the same bookkeeping under the same lock (offsets at or above the
    committed one, each once, counted in ``_n_acked``; the records were never tracked as
    unacked messages, so there is nothing to discard)."""
    if not app.topics.acks_enabled_for(tp.topic):
        return
    consumer = app.consumer
    committed = consumer._committed_offset[tp]
    with ack_lock:
        index, acked = consumer._acked_index[tp], consumer._acked[tp]
        new = [o for o in offsets if (committed is None or o >= committed) and o not in index]
        index.update(new)
        acked.extend(new)
        consumer._n_acked += len(new)
    notify(consumer._waiting_for_ack)


def first_run(acked: list[int]):
    """faust's ``consecutive_numbers`` (faust/utils/functional.py) as
    ``Consumer._new_offset`` uses it: ``next()`` of it is the first run of consecutive
    offsets in ``acked``, the partition's acked offsets since the last commit, sorted.
    faust walks them one by one in Python (``groupby`` over ``enumerate`` with a lambda),
    with the loop held, for each input and log partition at every commit (every 10,000
    acked records, streams/worker/app.py): ``_new_offset`` took 1.47 ms per 10,000 offsets, 0.74
    with this (the rest is faust's sort and set updates; a /tmp probe). The bulk path
    acks whole runs, so the usual list is one run: strictly increasing (checked in C,
    ``map`` of ``operator.lt``) and spanning its length. Then the run is the list (a
    copy: faust deletes it from ``acked`` next); otherwise faust's own function decides,
    so the result is faust's in every case (tests/streams/test_faust_seam.py)."""
    if (acked and acked[-1] - acked[0] == len(acked) - 1
            and all(map(lt, acked, islice(acked, 1, None)))):
        yield list(acked)
        return
    yield from consecutive_numbers(acked)


def faster_commits() -> None:
    """Let faust's consumer find the offsets to commit with ``first_run`` (its module's
    name for ``consecutive_numbers``; the only caller there is ``_new_offset``). Process
    wide and idempotent."""
    faust_consumer_module.consecutive_numbers = first_run


def commit_due(app) -> bool:
    """Whether enough records were acked for a commit (faust's ``commit_every``); if so the
    count starts again (the caller commits, ``app.consumer.commit()``)."""
    consumer = app.consumer
    every = consumer._commit_every
    if every is None or consumer._n_acked < every:
        return False
    consumer._n_acked = 0
    return True


def read_position(app, tp) -> int | None:
    """The last offset of ``tp`` the consumer handed over (None: none since assignment)."""
    return app.consumer._read_offset.get(tp)


def set_read_position(app, tp, offset: int) -> None:
    app.consumer._read_offset[tp] = offset


def committed_position(app, tp) -> int | None:
    return app.consumer._committed_offset.get(tp)


def is_paused(app, tp) -> bool:
    """Whether faust paused ``tp`` (it then leaves the set ``_wait_next_records`` asks for)."""
    return tp in app.consumer._paused_partitions


def acked_uncommitted(app) -> dict:
    """Per partition, the first and last offset acked (applied) since its last commit
    (``Consumer._acked``); for a stopping worker's last line. Read from another thread:
    a list that changes meanwhile is read again on the next call, not here."""
    consumer = getattr(app, "_consumer", None)
    if consumer is None:
        return {}
    return {tp: (min(acked), max(acked)) for tp, acked in list(consumer._acked.items()) if acked}


def crash_reason(app) -> BaseException | None:
    """Why the app or its Kafka consumer (faust's service and the consumer thread service
    under it) crashed, or None. mode marks a crashed service and its ancestors
    (``Service.crash``); the consumer is read only once the app created it."""
    consumer = getattr(app, "_consumer", None)
    for service in (app, consumer, getattr(consumer, "_thread", None)):
        if service is not None and service.crashed:
            return service.crash_reason or RuntimeError("crashed")
    return None


def restoring(app) -> bool:
    """Whether the worker is restoring the state of partitions it was given
    (streams/worker/state.py): their records wait meanwhile."""
    state = getattr(getattr(app, "dpstream", None), "state", None)
    return state is not None and bool(state.assigned - state.ready)


def assigned_actives(app) -> set:
    """The TPs actively assigned to this worker (not standbys); empty before assignment."""
    try:
        return set(app.assignor.assigned_actives())
    except Exception:                  # noqa: BLE001 - no assignment yet
        return set()


# ---------------------------------------------------------------- producer and consumer
# How long a producer waits for one broker's answer (``bound_request_waits``). A healthy
# leader may hold an acks=all write for up to Kafka's replica.lag.time.max.ms (30 s by
# default) plus its check interval while it drops a lagging follower from its ISR; such a
# request given up is sent again (an identical duplicate), nothing is lost. A longer wait
# stalls a hung node's partitions longer: at 60 s, 4 of 5 models published nothing for 250 s
# in the broker drills' node-hung; at 30 s every model goes on within ~10-90 s.
REQUEST_WAIT_MS = 30_000


def new_producer(app):
    """A new aiokafka producer with the app's producer settings (faust's driver builds it)."""
    return app.producer._new_producer()


def bound_request_waits(app, wait_ms: int = REQUEST_WAIT_MS) -> None:
    """Make every aiokafka producer of ``app`` (faust's own, which carries the table
    changelogs, and the outputs producer, ``new_producer``) give up on a broker's answer
    after ``wait_ms``, while its batches keep the app's ``producer_request_timeout``
    (20 minutes) before they expire.

    aiokafka uses one value for both (``request_timeout_ms``): a connection's wait for an
    answer, and a batch's life. A broker that hangs (its process stopped, a network that
    drops packets) holds a produce request for that long, and aiokafka sends a node no
    other request meanwhile, so every batch of the partitions it led waited too: with one
    of three nodes hung, the worker published nothing for as long as it hung (the
    controller had moved its leaderships after ~10 s), up to 20 minutes
    (tests/streams/broker_drill.py, node-hung). With its connections' wait bounded
    (``AIOKafkaClient._request_timeout_ms``, read when a connection is made), a request
    to the hung node fails after ``wait_ms``, aiokafka closes that connection, refreshes
    its metadata and sends the batch again to the new leader, in order (a partition with
    a batch in flight takes no other, and a retried batch goes back to the head of its
    queue). The batch lives on: shortening its life instead would drop a changelog batch
    while a later one of the same partition is delivered, and a restore would then mix
    newer and older state. The worker's producers are not idempotent (at-least-once:
    faust turns idempotence on only for transactions), so a batch the hung broker had
    written and is sent again is an identical duplicate, as a retry after a broken
    connection already was; readers drop those. The same bound applies to a connection's
    set-up and to a send's wait for a partition's metadata (then a retriable
    UnknownTopicOrPartitionError, which the worker's batches retry, bulk.py)."""
    class Producer(AIOKafkaDriverProducer):
        def _new_producer(self, transactional_id=None):
            producer = super()._new_producer(transactional_id)
            producer.client._request_timeout_ms = wait_ms
            return producer

    app.transport.Producer = Producer


def aiokafka_consumer(app):
    """The aiokafka consumer under faust's (exists once partitions are assigned)."""
    return app.consumer._thread._ensure_consumer()


async def take_group_error(app) -> tuple[BaseException, bool] | None:
    """The error aiokafka's group coordination holds for its user, taken (so that the
    coordination tries again), and whether that coordination is dead for good; None when
    it holds none (or the consumer has not started).

    aiokafka's group coordinator hands the errors of its background task (a refused
    FindCoordinator, JoinGroup or heartbeat: GroupAuthorizationFailedError) to the next
    ``getmany``, and waits until one takes it before it tries again (aiokafka/consumer/
    group_coordinator.py ``_push_error_to_user``, ``check_errors``). faust's fetcher calls
    ``getmany`` only once partitions are assigned, so a worker started while its group
    rights were revoked never joined, not even once they were granted again (it waited
    for an assignment, seen in the revoke test). A coordination task that ended
    (``_coordination_task.done()``) re-raises its error for ever: dead for good. Run on
    the consumer's own loop (``call_thread``: its thread, with ``--consumer-thread``)."""
    try:
        thread = app.consumer._thread
        consumer = thread._ensure_consumer()
    except Exception:                  # noqa: BLE001 - not started yet
        return None
    return await thread.call_thread(_take_group_error, consumer)


def _take_group_error(consumer) -> tuple[BaseException, bool] | None:
    coordinator = consumer._coordinator
    if getattr(coordinator, "_coordination_task", None) is None:     # none, or no group
        return None
    dead = coordinator._coordination_task.done()
    if coordinator._pending_exception is None and not dead:
        return None
    try:
        coordinator.check_errors()
    except Exception as err:           # noqa: BLE001 - the error it held
        return err, dead
    return None


def set_fetch_wait(consumer, *, max_wait_ms: int, min_bytes: int, idle_timeout_s: float | None = None) -> None:
    """An aiokafka consumer's fetch requests wait on the broker for ``min_bytes`` at most
    ``max_wait_ms``; ``idle_timeout_s``: how long the fetch routine sleeps when it has
    nothing to send. The fetcher reads these fields for every request it builds
    (aiokafka/consumer/fetcher.py ``_get_actions_per_node``), so a change takes effect
    from the next one."""
    fetcher = consumer._fetcher
    fetcher._fetch_max_wait_ms = max_wait_ms
    fetcher._fetch_min_bytes = min_bytes
    if idle_timeout_s is not None:
        fetcher._fetcher_timeout = idle_timeout_s


class RefusedCommits:
    """faust's aiokafka consumer service (a mixin before ``AIOKafkaConsumerThread``), whose
    offset commits the broker refuses for want of a right are logged, not fatal.

    faust's ``AIOKafkaConsumerThread._commit`` crashes the service on any error but a
    rebalance. A worker whose Read on an input topic or whose group rights were revoked
    (an admin's mistake, a rotation) had its periodic commit fail with
    TopicAuthorizationFailedError, its consumer crashed, and the worker then neither
    worked nor exited: it retried its batch for ever, even after the right came back
    (issue 41). A refused commit is instead reported to ``on_refused`` (one line saying
    which right is missing) and the commit counts as not done, as faust's own answer to a
    rebalanced group is: offsets acked meanwhile go with the next commit, and anything
    left uncommitted is re-read after a restart, where the agents skip it as handled
    (idempotent by log position). Every other error keeps faust's handling. The body is
    faust 0.15's ``_commit`` (``contract()`` checks its text has not changed)."""

    on_refused: Callable[[BaseException], None] = staticmethod(lambda err: None)

    async def _commit(self, offsets) -> bool:
        consumer = self._ensure_consumer()
        now = monotonic()
        assigned = self.assignment()
        commitable = {tp: offset for tp, offset in offsets.items() if tp in assigned}
        try:
            aiokafka_offsets = {ensure_aiokafka_TP(tp): OffsetAndMetadata(offset, "")
                                for tp, offset in commitable.items()}
            self.tp_last_committed_at.update({tp: now for tp in commitable})
            await consumer.commit(aiokafka_offsets)
        except (TopicAuthorizationFailedError, GroupAuthorizationFailedError) as exc:
            self.on_refused(exc)
            return False
        except CommitFailedError as exc:
            if "already rebalanced" in str(exc):
                return False
            self.log.exception("Committing raised exception: %r", exc)
            await self.crash(exc)
            return False
        except Exception as exc:            # noqa: BLE001 - faust's handling
            self.log.exception("Got exception: %r\nCurrent assignment: %r", exc, self.assignment())
            await self.crash(exc)
            return False
        return True


class QuietIdleStreams:
    """faust's aiokafka consumer service (a mixin before ``AIOKafkaConsumerThread``) whose
    livelock check reports a partition this worker has not handed over once since it
    started ("Stream has not started processing TP(...)") as WARNING, and as INFO while
    the worker restores state, instead of ERROR.

    With the drain's inbound times (module docstring) the check only says so for a
    partition with a backlog that no batch of this process has taken yet: in normal work,
    one assigned by a rebalance whose state is still being restored (faust pauses every
    partition meanwhile, and skips the check only while the rebalance itself runs).
    Nothing is lost there (its offsets are not committed) and a restore that fails is
    retried in place (streams/worker/state.py), so it is not an error; outside a restore
    it is worth a look, so it stays a warning. Every other message of
    the check keeps faust's ERROR ("Stream stopped processing, or is slow" included)."""

    def _log_slow_processing_stream(self, msg: str, *args) -> None:
        if msg != SLOW_PROCESSING_STREAM_IDLE_SINCE_START:
            return super()._log_slow_processing_stream(msg, *args)
        level = logging.INFO if restoring(self.consumer.app) else logging.WARNING
        self.log.log(level, f"{msg} No batch of this worker has taken it yet; nothing is "
                            "lost (its offsets are not committed).", *args)


class ThreadConsumerThread(QuietIdleStreams, RefusedCommits, AIOKafkaConsumerThread):
    """faust's aiokafka consumer service in its own thread (``--consumer-thread``)."""


class InLoopConsumerThread(QuietIdleStreams, RefusedCommits, AIOKafkaConsumerThread):
    """faust's aiokafka consumer service, served on the caller's loop (no thread)."""

    def __init__(self, consumer, *, loop=None, **kwargs):
        loop = loop or asyncio.get_event_loop()
        super().__init__(consumer, loop=loop, thread_loop=loop, **kwargs)
        self._close_thread_loop_on_stop = False     # the loop is the worker's
        self._serving: asyncio.Future | None = None

    async def start(self) -> None:
        assert not self._thread_started.is_set()
        self._thread_started.set()
        self._thread_running = self.parent_loop.create_future()
        self._serving = asyncio.ensure_future(self._serve())
        try:
            # _serve notifies _thread_running once started; a failed start ends _serve
            done, _ = await asyncio.wait({self._thread_running, self._serving},
                                         return_when=asyncio.FIRST_COMPLETED)
            if self._serving in done:
                self._serving.result()              # re-raise the start's error
        finally:
            self._thread_running = None

    async def call_thread(self, fun, *args, **kwargs):
        """The call, awaited here (some callers pass plain functions, as the method
        queue allows: ``maybe_async``, as mode's ``MethodQueue`` does)."""
        return await maybe_async(fun(*args, **kwargs))

    async def _gather_remaining_tasks(self) -> None:
        """Nothing: on a thread's own loop this cancels every task left there; on the
        worker's loop those are the app's (its own futures are stopped by mode)."""


def use_consumer(app, *, in_loop: bool, on_refused: Callable[[BaseException], None]) -> None:
    """Make ``app`` (before the worker starts) run its Kafka consumer on its own loop
    (``in_loop``) or in faust's thread, with refused commits going to ``on_refused``
    (``RefusedCommits``)."""
    thread_class = InLoopConsumerThread if in_loop else ThreadConsumerThread

    class Consumer(AIOKafkaDriverConsumer):
        def _new_consumer_thread(self):
            thread = thread_class(self, loop=self.loop, beacon=self.beacon)
            thread.on_refused = on_refused
            return thread

    app.transport.Consumer = Consumer


# ---------------------------------------------------------------- tables
class ChangelogWriter:
    """The tables' changelog records, appended to faust's producer a step at a time.

    A table write (streams/worker/state.py ``TableView``) gives its record here (the
    table itself changes at once). Records are appended, in write order, as one aiokafka
    batch per changelog partition (streams/worker/batches.py) to faust's own producer
    (``Producer._ensure_producer``), all in one step, so records written together leave
    in one produce request: at the end of an ``async with writer.held():`` block, or, for
    records written outside one or by a view that is not ``deferrable``, on the loop's
    next turn (a task). Inside ``held()`` a ``deferrable`` view's records wait for the
    block's end. (faust's own path, ``Collection.send_changelog``, cost the loop ~0.14 ms
    per record and sent a batch's writes to two tables in 2.5-2.9 requests:
    bench/throughput.py --batch-cost, 106-record batches.) Encoded by the table
    (``Table.encode``).

    Why the path is safe: faust's ``Producer.flush`` flushes this aiokafka producer, and
    faust calls it before every commit, so a committed input offset never runs ahead of
    the state records its batch wrote. Steps run one at a time (a lock), so a
    partition's records keep their order. A failed step keeps the records it did not
    append for the next, each key's last write only (the table holds them already; a
    write the agents would skip as done must still reach the changelog); ``drop`` forgets
    those of partitions this worker lost (their next owner restored without them)."""

    def __init__(self, app, send=None):
        self.app = app
        # send(topic, partition, [(key bytes, value bytes or None)]): one step's records of
        # one changelog partition (tests may collect them instead)
        self.send = send or self._send_to_faust
        self._depth = 0
        self._pending: list[tuple[object, int, str, object]] = []
        self._lock = asyncio.Lock()
        self._soon: asyncio.Task | None = None
        self._gone: set[int] = set()        # partitions dropped since (until written again)

    def add(self, table, partition: int, key: str, value, *, deferrable: bool = False) -> None:
        """Keep a record for the next step (which is at once scheduled, unless the record
        is ``deferrable`` and a ``held`` block is open)."""
        self._gone.discard(partition)
        self._pending.append((table, partition, key, value))
        if not (deferrable and self._depth) and (self._soon is None or self._soon.done()):
            self._soon = asyncio.get_running_loop().create_task(self._flush_soon())

    def drop(self, partitions: set[int]) -> None:
        """Forget the unsent records of ``partitions`` (lost in a rebalance), also those of
        a step under way that fails (it would keep them for the next)."""
        self._gone |= set(partitions)
        self._pending = [r for r in self._pending if r[1] not in partitions]

    @contextlib.asynccontextmanager
    async def held(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                await self.flush()

    async def _flush_soon(self) -> None:
        try:
            await self.flush()
        except Exception as err:            # noqa: BLE001 - kept for the next step
            log.warning("table changelog records not sent yet (%s); kept for the next "
                        "batch", type(err).__name__)

    async def flush(self) -> None:
        async with self._lock:
            if not self._pending:
                return
            pending, self._pending = self._pending, []
            sent: set[tuple[str, int]] = set()
            try:
                groups: dict[tuple[str, int], list[tuple[bytes | None, bytes | None]]] = {}
                for table, partition, key, value in pending:
                    groups.setdefault((table.topic, partition), []).append(table.encode(key, value))
                for where, records in groups.items():
                    await self.send(*where, records)
                    sent.add(where)
            except BaseException:                  # the unsent go again with the next step
                self._pending[:0] = [r for r in pending
                                     if (r[0].topic, r[1]) not in sent and r[1] not in self._gone]
                # bounded while the broker is away: a key's last write only (what
                # compaction and a restore keep), each at its last place, so order holds
                last = {(id(t), p, k): i for i, (t, p, k, _) in enumerate(self._pending)}
                self._pending = [r for i, r in enumerate(self._pending)
                                 if last[(id(r[0]), r[1], r[2])] == i]
                raise

    async def _send_to_faust(self, topic: str, partition: int, records: list) -> None:
        for delivery, _ in await send_records(self.app.producer._ensure_producer(), topic,
                                              partition, records):
            delivery.add_done_callback(_log_undelivered)


def _log_undelivered(delivery) -> None:
    """A changelog batch the broker never acknowledged (aiokafka gave up retrying): a
    restart would restore that partition's older state and re-read more of its log (the
    agents' gap re-reads, idempotent by offset); say so, with the error's name only."""
    if not delivery.cancelled() and delivery.exception() is not None:
        log.warning("table changelog records were not delivered (%s); a restart re-reads "
                    "more of the log", type(delivery.exception()).__name__)


# ---------------------------------------------------------------- ACLs
async def create_acls(admin, acls) -> list[str]:
    """Create ``acls`` (``Acl``s of streams/tools/acls.py: ``request_fields()`` and ``describe()``)
    through a started aiokafka admin client; the error messages of those the broker refused
    (empty: all created)."""
    from aiokafka.protocol.admin import CreateAclsRequest
    errors = []
    for acl in acls:
        request = CreateAclsRequest(*acl.request_fields())
        response = await admin._send_request(request)
        for code, message in response.creation_responses:
            if code:
                errors.append(f"{acl.describe()}: error {code} {message or ''}".strip())
    return errors


async def delete_acls(admin, acls) -> list[str]:
    """Delete ``acls`` (each matched exactly); the error messages of refused deletions."""
    from aiokafka.protocol.admin import DeleteAclsRequest
    errors = []
    for acl in acls:
        request = DeleteAclsRequest(*acl.request_fields())
        response = await admin._send_request(request)
        for code, message, _ in response.filter_responses:
            if code:
                errors.append(f"{acl.describe()}: error {code} {message or ''}".strip())
    return errors


async def describe_acls(admin, permission: int = 1) -> list[tuple]:
    """Every ACL on the cluster: (resource type, name, pattern, principal, operation);
    ``permission``: only those that ALLOW (3) or DENY (2), default any (1)."""
    from aiokafka.protocol.admin import DescribeAclsRequest
    any_type, any_pattern, any_op = 1, 1, 1
    response = await admin._send_request(DescribeAclsRequest(any_type, None, any_pattern, None, None,
                                                             any_op, permission))
    if response.error_code:
        raise PermissionError(f"DescribeAcls failed: error {response.error_code} {response.error_message or ''}")
    out = []
    for resource_type, name, pattern, acls in response.resources:
        out.extend((resource_type, name, pattern, principal, op) for principal, _, op, _ in acls)
    return out


# ---------------------------------------------------------------- topic metadata
async def describe_topic(admin, name: str) -> dict:
    """The metadata of one topic (``error_code``, ``partitions``) through a started aiokafka
    admin client, never creating it: error 3 when it does not exist, 29 when the principal
    may not describe it."""
    from aiokafka.protocol.metadata import MetadataRequest
    response = await admin._send_request(MetadataRequest([name], allow_auto_topic_creation=False))
    (topic,) = [t for t in response.to_object()["topics"] if t["topic"] == name]
    return topic


# ---------------------------------------------------------------- the contract
# (owner, name, parameter names or None for an attribute, where it is defined)
_METHODS = [
    (FaustConsumer, "_drain_messages", ("self", "fetcher")),
    (FaustConsumer, "_wait_next_records", ("self", "timeout")),
    (FaustConsumer, "_to_message", ("self", "tp", "record")),
    (FaustConsumer, "_add_gap", ("self", "tp", "offset_from", "offset_to")),
    (FaustConsumer, "wait_first", None),
    (FaustConsumer, "pause_partitions", ("self", "tps")),
    (FaustConsumer, "resume_partitions", ("self", "tps")),
    (FaustConsumer, "seek_wait", ("self", "partitions")),
    (FaustConsumer, "_seek", ("self", "partition", "offset")),
    (FaustConsumer, "commit", None),
    (FaustConsumer, "_new_offset", ("self", "tp")),
    (AIOKafkaDriverConsumer, "_new_consumer_thread", ("self",)),
    (AIOKafkaDriverProducer, "_new_producer", ("self", "transactional_id")),
    (AIOKafkaDriverProducer, "_ensure_producer", ("self",)),
    (AIOKafkaConsumerThread, "_ensure_consumer", ("self",)),
    (AIOKafkaConsumerThread, "call_thread", None),
    (AIOKafkaConsumerThread, "_log_slow_processing_stream", ("self", "msg", "args")),
    (ServiceThread, "_serve", ("self",)),
    (ServiceThread, "_gather_remaining_tasks", ("self",)),
]
_ADMIN_METHODS = [("_send_request", ("self", "request", "node_id"))]
_CONSUMER_FIELDS = ("_read_offset", "_committed_offset", "_acked_index", "_acked", "_n_acked",
                    "_waiting_for_ack", "_commit_every", "_paused_partitions",
                    "_buffered_partitions", "_stopped", "suspend_flow", "callback")
_THREAD_FIELDS = ("_thread_started", "_thread_running", "parent_loop", "thread_loop",
                  "_close_thread_loop_on_stop")
_FETCHER_FIELDS = ("_fetch_max_wait_ms", "_fetch_min_bytes", "_fetcher_timeout")


def contract() -> list[str]:
    """What this module relies on that the installed faust, mode and aiokafka lack (empty:
    all present). Builds a throwaway app and consumer; needs no broker."""
    import faust
    from aiokafka.consumer.fetcher import Fetcher

    problems = []
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol import admin as protocol
    for name in ("CreateAclsRequest", "DescribeAclsRequest", "DeleteAclsRequest"):
        if not hasattr(protocol, name):
            problems.append(f"aiokafka.protocol.admin.{name} is gone")
    from aiokafka.protocol.metadata import MetadataRequest
    if "allow_auto_topic_creation" not in inspect.signature(MetadataRequest).parameters:
        problems.append("aiokafka MetadataRequest no longer takes allow_auto_topic_creation")
    for owner, name, params in [*_METHODS, *((AIOKafkaAdminClient, n, p) for n, p in _ADMIN_METHODS)]:
        fn = getattr(owner, name, None)
        if fn is None:
            problems.append(f"{owner.__module__}.{owner.__qualname__}.{name} is gone")
        elif params is not None and tuple(inspect.signature(fn).parameters) != params:
            problems.append(f"{owner.__qualname__}.{name}{inspect.signature(fn)} no longer takes {params}")
    fetcher_source = inspect.getsource(Fetcher.__init__) + inspect.getsource(Fetcher)
    problems += [f"aiokafka Fetcher.{f} is gone" for f in _FETCHER_FIELDS
                 if f"self.{f}" not in fetcher_source]
    from aiokafka.client import AIOKafkaClient
    if inspect.getsource(AIOKafkaClient._get_conn).count("request_timeout_ms=self._request_timeout_ms") != 1:
        problems.append("aiokafka AIOKafkaClient._get_conn no longer makes its connections with "
                        "request_timeout_ms=self._request_timeout_ms")
    from aiokafka.producer.producer import AIOKafkaProducer
    if "self.client = AIOKafkaClient(" not in inspect.getsource(AIOKafkaProducer.__init__):
        problems.append("aiokafka AIOKafkaProducer no longer keeps its client in self.client")
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    coordination = inspect.getsource(GroupCoordinator)
    for name in ("self._pending_exception", "self._coordination_task", "def check_errors(self)"):
        if name not in coordination:
            problems.append(f"aiokafka GroupCoordinator no longer has {name}")
    unpack = inspect.getsource(_unpack_records)
    if "records = self._records" not in unpack or "self.next_fetch_offset" not in unpack:
        problems.append("aiokafka PartitionRecords._unpack_records no longer reads self._records "
                        "and self.next_fetch_offset")
    commit = inspect.getsource(AIOKafkaConsumerThread._commit)
    for line in ("await consumer.commit(aiokafka_offsets)", "self.tp_last_committed_at.update",
                 "if tp in self.assignment()", '"already rebalanced" in str(exc)'):
        if line not in commit:
            problems.append(f"faust AIOKafkaConsumerThread._commit no longer has {line!r}")
    from faust.sensors.monitor import Monitor
    if "self.stream_inbound_time[tp] = monotonic()" not in inspect.getsource(Monitor.on_stream_event_in):
        problems.append("faust Monitor.on_stream_event_in no longer sets stream_inbound_time[tp] "
                        "to monotonic()")
    verify = inspect.getsource(AIOKafkaConsumerThread.verify_event_path)
    for line in ("inbound = monitor.stream_inbound_time.get(tp)", "secs_since_stream = now - inbound"):
        if line not in verify:
            problems.append(f"faust AIOKafkaConsumerThread.verify_event_path no longer has {line!r}")
    if not re.search(r"self\._log_slow_processing_stream\(\s*SLOW_PROCESSING_STREAM_IDLE_SINCE_START,", verify):
        problems.append("faust AIOKafkaConsumerThread.verify_event_path no longer reports an idle "
                        "stream with _log_slow_processing_stream(SLOW_PROCESSING_STREAM_IDLE_SINCE_START")
    if "now = monotonic()" not in inspect.getsource(FaustConsumer.verify_all_partitions_active):
        problems.append("faust Consumer.verify_all_partitions_active no longer uses monotonic()")
    if hasattr(FaustConsumer, "_new_offset") and \
            "next(consecutive_numbers(acked))" not in inspect.getsource(FaustConsumer._new_offset):
        problems.append("faust Consumer._new_offset no longer takes next(consecutive_numbers(acked))")
    for name in ("acks_enabled_for",):
        if not hasattr(faust.App("dpstream-contract").topics, name):
            problems.append(f"faust Conductor.{name} is gone")
    app = faust.App("dpstream-contract", broker="kafka://127.0.0.1:1")
    app.finalize()
    consumer = app.consumer
    problems += [f"faust Consumer.{f} is gone" for f in (*_CONSUMER_FIELDS, "_thread")
                 if not hasattr(consumer, f)]
    for name in ("consumer_generation_id", "rebalancing", "in_recovery", "assignor", "_consumer",
                 "crashed", "crash_reason", "should_stop", "in_worker"):
        if not hasattr(app, name):
            problems.append(f"faust App.{name} is gone")
    if not inspect.iscoroutinefunction(getattr(app, "crash", None)):
        problems.append("faust App.crash is no longer a coroutine function")
    from faust.transport.consumer import Fetcher as FaustFetcher
    if not hasattr(FaustFetcher(app), "_stopped"):
        problems.append("faust Fetcher._stopped is gone")
    loop = asyncio.new_event_loop()
    try:
        thread = InLoopConsumerThread(consumer, loop=loop)
        problems += [f"mode ServiceThread.{f} is gone" for f in _THREAD_FIELDS if not hasattr(thread, f)]
    finally:
        loop.close()
    return problems
