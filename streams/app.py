"""The faust-streaming app: topics, tables, and the two agents wired to Kafka.

    inputs (models, examples, queries) --sequencer--> model-events --processor-->
        predictions, ledger, releases   (and rejected, from the sequencer)

Both agents are the runtime-agnostic functions of ``agents/``; the tables are their
state mappings. Every topic is keyed by model id, and all topics and tables share
one partition count, so a model's inputs, log and state live in the same partition
number and move together between workers (faust co-partitioning). The table
changelog records go to the partition of the event being processed.

On the bulk path (the default, streams/bulk.py) the log records a fetch's inputs
become are handed straight to the processor once the broker acknowledged them (their
offsets come from the acknowledgement), so an event costs one trip through Kafka, not
two; the same records, read back from ``model-events`` later, sit below the processor's
position and are dropped unparsed. The log stays the source of truth: a crash between
appending and applying leaves a backlog the processor reads first (streams/logread.py).

Tables: ``sequencer-state`` (model configs, last input offset per input partition) and
``model-state``, one record per key ``model/<id>/...`` (see agents/handlers.py):
``head`` holds the round counters, AboveThreshold / BetweenThresholds state, hard-query
set and ledger sums (small, written once per batch); ``weights/<k>``, ``hyp/<epoch>/<version>/<j>``,
``buffer/<epoch>/<j>`` and ``release/<v>`` hold weights, hypotheses, epoch samples (the
predictor's blocks are their keyed partition) and released lists, written only when
they change. Changelogs and ``model-events`` carry raw features: they are as sensitive
as the input topics (restrict them the same way; dpstream never logs them).

Crash safety: every agent writes a table only after the outputs of the event are
acknowledged by the broker (agents/records.py), and faust flushes the producer before
it commits input offsets (faust/transport/consumer.py, Consumer._commit_offsets), so
neither the changelog nor the committed offsets can run ahead of the outputs. Both
agents also check that offsets arrive without gaps and re-read any range the runtime
dropped straight from the broker (streams/logread.py; counted in
``dpstream_gap_records_total``).

Settings (faust facts from design.md section 3): ``web_tables_enabled=False`` (the
default /table view would serve private state over HTTP); ``at_least_once`` with
idempotent agents, since correctness must not depend on exactly-once; memory store,
restored from the changelogs on start; replication factor 1 for a one-broker dev
cluster (raise it in production).
"""
from __future__ import annotations

import gc
import logging
import time
from pathlib import Path

import faust
import orjson
from aiokafka.partitioner import DefaultPartitioner

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import last_handled, sequence_batch
from dpstream.mechanisms.randomness import KeyedRandomness

from .bulk import install as install_bulk
from .inloop import install as consume_in_loop
from .logread import read_range
from .observe import Metrics, collect_status, model_partition
from .topics import INPUTS, METADATA_MAX_AGE_MS, MODEL_EVENTS, OUTPUTS
from .tuning import FULL_GC_AT_MOST, FULL_GC_CHECK, pace_fetches, shorten_fetch_wait


def encode(value: dict) -> bytes:
    """An output value as JSON (orjson: numpy scalars as numbers, non-string keys as
    strings, as ``json.dumps`` would write them)."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


BATCH, BATCH_WITHIN = 500, 0.005    # events per batch at most; seconds to wait for more
IDLE_WITHIN = 1.0                   # the same wait for the agents the bulk path bypasses
TAIL_CHECK = 5.0                    # seconds without a fetch before the worker checks the log ends
PACE_IDLE_AFTER = 1.0               # seconds without a batch before fetches answer at once again
TAIL_READ = 8_000                   # records per partition it reads from the log per check
logger = logging.getLogger("dpstream.app")
CHANGELOG_COMPACTION = {"segment.ms": "60000", "segment.bytes": str(16 * 1024 * 1024),
                        "min.cleanable.dirty.ratio": "0.1"}


def make_app(*, broker: str, rng: KeyedRandomness, partitions: int = 4, app_id: str = "dpstream",
             data_dir: str | Path = "/tmp/dpstream-worker", web_port: int | None = None,
             replication: int = 1, prefix: str = "", emit_override=None,
             latency_metrics: bool = False, bulk: bool = False,
             consumer_thread: bool = False) -> faust.App:
    app = faust.App(
        app_id,
        broker=f"kafka://{broker}",
        store="memory://",
        datadir=str(data_dir),
        topic_partitions=partitions,
        topic_replication_factor=replication,
        processing_guarantee="at_least_once",
        web_enabled=web_port is not None,
        web_port=web_port or 6066,
        web_tables_enabled=False,
        key_serializer="raw",
        value_serializer="raw",
        # Offsets commit every 10,000 acked records (and every broker_commit_interval,
        # 2.8 s): a commit flushes the producer and costs a round trip and CPU on the
        # loop. At 1,000 the worker committed 40 times a second at 25,000 examples/s,
        # and the applier was busy 79-87% of the time (27-30 us of CPU per record, p99
        # 48-58 ms) against 73-78% (25-26.5 us, p99 30-32 ms) at 10,000 (a traced
        # worker, /tmp probe, 3 runs each). A crash re-reads at most this many more
        # records per partition, skipped as handled (agents are idempotent by offset).
        broker_commit_every=10_000,
        # a dead worker's partitions move after 10 s instead of faust's default 60 s
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        # A rebalance does not wait for the agents' current batch; a batch that finishes
        # after its partition was revoked writes none of its state (Processor.owns, fed by
        # faust's rebalance signals below), and its outputs are identical duplicates.
        stream_wait_empty=False,
        stream_publish_on_commit=False,     # send now: emit must return the delivery future
        # Bulk settings (bench/throughput.py measures them): many records per poll (the
        # fetches streams/bulk.py applies), room for them in the per-record path's stream
        # buffers, large producer batches; no linger (it would add its wait to every
        # batch's round trip). acks stay "all" (faust's default producer_acks=-1):
        # durability of each output is what the crash order relies on.
        stream_buffer_maxsize=16 * BATCH,
        broker_max_poll_records=4 * BATCH,
        producer_linger=0.0,
        producer_max_batch_size=1 << 20,
        # A consumer whose group join ran before the broker's metadata showed the topics
        # (a broker that just restarted answers "unknown topic" for seconds) gets no
        # partitions and notices only at its next metadata refresh: 5 minutes by default.
        consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
    )
    if not consumer_thread:          # the Kafka consumer on this loop (streams/inloop.py)
        consume_in_loop(app)
    # internal=True: the worker declares (creates) every topic with the shared partition
    # count at start, so producers and consumers never race topic auto-creation.
    raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
               partitions=partitions, internal=True)
    inputs = app.topic(*(prefix + t for t in INPUTS), **raw)
    log = app.topic(prefix + MODEL_EVENTS, **raw)
    outputs = {name: app.topic(prefix + name, **raw) for name in OUTPUTS}
    # key_type=bytes makes faust use the raw codec for keys on write *and* on recovery
    # (a Schema only covers writes); values are JSON (faust's fallback codec).
    # Heads are rewritten on every batch, so an uncompacted changelog grows with history
    # and a restart would replay all of it. Kafka compacts closed segments only (topic
    # configs segment.ms / segment.bytes / min.cleanable.dirty.ratio): short segments keep
    # each changelog near one record per key, so a restarted worker restores state, not
    # history (measured by bench/pipeline.py's recovery step).
    sequencer_state = app.Table("sequencer-state", partitions=partitions, key_type=bytes,
                                extra_topic_configs=CHANGELOG_COMPACTION)
    model_state = app.Table("model-state", partitions=partitions, key_type=bytes,
                            extra_topic_configs=CHANGELOG_COMPACTION)
    names = {topic: prefix + topic for topic in (MODEL_EVENTS, *OUTPUTS)}
    metrics = Metrics(latency=latency_metrics)

    async def emit(topic: str, key: str | None, value: dict):
        """Enqueue on the app's producer; return the delivery future (agents/records.py's
        contract: agents await it before writing state). faust's Producer.send returns
        the aiokafka send future (faust/transport/drivers/aiokafka.py); it is the producer
        faust flushes before committing offsets, reached without Topic.send's per-record
        Channel and FutureMessage layers."""
        metrics.observe_emit(topic, value)
        if emit_override is not None:
            return await emit_override(topic, key, value)
        return await app.producer.send(names[topic], key.encode() if key else None,
                                       encode(value), None, None, None)

    placement: dict[tuple[str, str], tuple[str, bytes, int]] = {}   # (topic, key) -> emit_many's slot
    partitioner = DefaultPartitioner()
    own: list = []                       # the outputs producer, once started

    async def outputs_producer():
        """The bulk path's own producer for outputs and log records, built by faust's
        producer driver with the app's settings (acks, auth, sizes). Why a second one:
        aiokafka keeps one request in flight per broker connection (its Sender skips a
        node with a request outstanding), so on faust's producer a batch's log append
        and predictions waited behind the table changelog writes of the batch before,
        up to five round trips per batch where two are needed. Safe: changelog writes
        keep their order on faust's producer (which faust flushes before a commit), and
        every output sent here is acknowledged before the batch writes state or acks
        its inputs."""
        if not own:
            producer = app.producer._new_producer()
            await producer.start()
            if own:                          # another caller started one meanwhile
                await producer.stop()
            else:
                own.append(producer)
        return own[0]

    @app.on_before_shutdown.connect
    async def _stop_outputs_producer(sender, **kwargs) -> None:
        while own:
            await own.pop().stop()

    async def emit_many(items: list[tuple[str, str | None, dict]]) -> list:
        """Enqueue many outputs as one aiokafka batch per topic partition; return
        ``(delivery future, indices)`` per batch (records.deliver's fast path: one future
        per partition instead of one per record; a batch's future resolves to the
        placement of its first record, the rest follow at consecutive offsets).
        Partitions are those ``send`` would choose: aiokafka's DefaultPartitioner over the
        topic's partitions (murmur2 of the key), memoised per key. Order within a
        partition is call order (one producer, ``outputs_producer``)."""
        producer = await outputs_producer()
        groups: dict[tuple[str, bytes | None, int], list[int]] = {}      # slot -> item indices
        encoded = []
        for i, (topic, key, value) in enumerate(items):
            slot = placement.get((topic, key)) if key else None     # (name, key bytes, partition)
            if slot is None:
                name, kb = names[topic], key.encode() if key else None
                parts = sorted(await producer.partitions_for(name))
                slot = (name, kb, partitioner(kb, parts, parts))
                if kb is not None:
                    if len(placement) >= 100_000:
                        placement.clear()
                    placement[(topic, key)] = slot
            groups.setdefault(slot, []).append(i)
            encoded.append(encode(value))
        metrics.observe_emits(items)
        out = []
        for (name, kb, where), indices in groups.items():
            batch, members = producer.create_batch(), []
            for i in indices:
                vb = encoded[i]
                if batch.append(key=kb, value=vb, timestamp=None) is None:      # batch full
                    out.append((await producer.send_batch(batch, name, partition=where), members))
                    batch, members = producer.create_batch(), []
                    if batch.append(key=kb, value=vb, timestamp=None) is None:
                        raise ValueError("an output record is larger than the producer batch size")
                members.append(i)
            out.append((await producer.send_batch(batch, name, partition=where), members))
        return out

    if bulk and emit_override is None:
        emit.many = emit_many

    async def fetch(topic: str, partition: int, start: int, end: int):
        records = await read_range(broker, topic, partition, start, end, name=prefix + topic)
        metrics.gap_records.labels(topic).inc(len(records))
        return records

    log_name = prefix + MODEL_EVENTS
    revoked: set[int] = set()            # model-events partitions taken away, not yet given back

    @app.on_partitions_revoked.connect
    async def _on_revoked(sender, tps, **kwargs) -> None:
        revoked.update(tp.partition for tp in tps if tp.topic == log_name)

    fetching: list = []                  # aiokafka's consumer under faust's, once known
    paced = [False]                      # fetches wait for BUSY_FETCH_MIN_BYTES (pace_fetches)

    @app.on_partitions_assigned.connect
    async def _on_assigned(sender, tps, **kwargs) -> None:
        revoked.difference_update(tp.partition for tp in tps if tp.topic == log_name)
        try:                                 # the consumer exists once partitions are assigned
            consumer = app.consumer._thread._ensure_consumer()
            shorten_fetch_wait(consumer)
            pace_fetches(consumer, False)    # unpaced until the next batch (no 16 KiB wait
            fetching[:] = [consumer]         # behind the 50 ms poll just set)
            paced[0] = False
        except Exception as err:             # noqa: BLE001 - a faust without these internals
            logger.warning("could not shorten the consumer's fetch wait (%s)", type(err).__name__)

    def on_batch() -> None:
        if fetching and not paced[0]:
            pace_fetches(fetching[0], True)
            paced[0] = True

    def owns(partition: int) -> bool:
        """False once faust revoked the partition (until it is assigned back): a worker
        that lost it mid-batch must not write its state (mode's signals, faust/app/base.py
        _on_partitions_revoked / _on_partitions_assigned)."""
        return partition not in revoked

    def assigned_log_partitions() -> set[int]:
        """The ``model-events`` partitions assigned to this worker now. An input keyed
        other than by its model id can sit on an input partition this worker owns while
        its model's log partition belongs to another worker: only the owner applies it."""
        try:
            return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == log_name}
        except Exception:                  # noqa: BLE001 - no assignment yet: apply none here
            return set()

    model_view = _TableView(model_state)
    processor = Processor(rng, model_view, emit, fetch, offload=True, owns=owns)
    app.dpstream = {"emit": emit, "processor": processor, "metrics": metrics}

    def records(events) -> list[RawRecord]:
        out = []
        for event in events:
            m = event.message
            topic = m.topic[len(prefix):] if m.topic.startswith(prefix) else m.topic
            metrics.events_in.labels(topic).inc()
            out.append(RawRecord(topic, m.partition, m.offset, m.key, m.value or b""))
        return out

    # Batches: stream.take_events yields up to BATCH events (or what arrived within
    # BATCH_WITHIN s) and acks them after the body returns (faust/streams.py). Inside
    # it no event is current, so the table views write with explicit partitions.
    # On the bulk path these agents receive nothing (streams/bulk.py takes their
    # records) and stay only so that faust subscribes and assigns their topics: their
    # batch timer then wakes once a second, not 200 times.
    within = IDLE_WITHIN if bulk else BATCH_WITHIN
    @app.agent(inputs, name="dpstream.sequencer")
    async def sequencer(stream):
        view = _TableView(sequencer_state)
        async for events in stream.take_events(BATCH, within=within):
            batch = records(events)
            with metrics.timer("sequencer"):
                await sequence_batch(batch, view, emit, fetch)

    @app.agent(log, name="dpstream.processor")
    async def model_processor(stream):
        async for events in stream.take_events(BATCH, within=within):
            batch = records(events)
            with metrics.timer("processor"):
                await processor.handle_batch(batch)

    sequencer_view = _TableView(sequencer_state)
    bulk_path = None

    async def apply_fetch(batch: dict[str, list[RawRecord]]) -> bool:
        """One fetch of the bulk path (streams/bulk.py): inputs through the sequencer
        (registrations first), BATCH at a time, each chunk's appended log records straight
        on through the processor (their offsets are the producer's acknowledgements; the
        same records read back later from ``model-events`` are then below the processor's
        position and dropped unparsed), then the fetch's own ``model-events`` records
        (those other writers appended, or a backlog left by a crash).
        Each chunk keeps only partitions this worker still owns: a rebalance during a
        long fetch must not leave it working through (and re-reading the gaps of) a
        partition whose new owner is already processing it. Returns False when it
        skipped any record: then no record of the fetch may be acked (the partitions'
        next owner, maybe this worker again, re-reads them from the committed offsets).

        One stage, not a pipeline: measured, sequencing the next fetch while this one's
        outputs are in flight made batches smaller and latency worse (p50 80-135 ms
        against 47-60 ms at 3,000 examples/s): on two shared cores the worker is
        CPU-bound, and a batch's fixed cost is paid once per batch."""
        inputs = [r for name in INPUTS for r in batch.get(name, ())]
        events = batch.get(MODEL_EVENTS, [])
        for name, recs in batch.items():
            metrics.events_in.labels(name).inc(len(recs))
        complete = True
        for stage, records in (("sequencer", inputs), ("processor", events)):
            for a in range(0, len(records), BATCH):
                chunk = [r for r in records[a:a + BATCH] if owns(r.partition)]
                complete = complete and len(chunk) == len(records[a:a + BATCH])
                if not chunk:
                    continue
                with metrics.timer(stage):
                    if stage == "processor":
                        await processor.handle_batch(chunk)
                        continue
                    appended = await sequence_batch(chunk, sequencer_view, emit, fetch)
                    mine = assigned_log_partitions()
                    appended = [r for r in appended if r.partition in mine and owns(r.partition)]
                    if appended:
                        if bulk_path is not None:     # not read back: applied right here
                            bulk_path.hold({r.partition for r in appended})
                        await processor.handle_batch(appended)
        return complete

    if bulk:
        dp_topics = {prefix + t: t for t in (*INPUTS, MODEL_EVENTS)}

        def log_positions() -> dict[int, int]:
            """Per owned log partition, the processor's next offset (all below applied)."""
            return {p: model_view.get(f"log/{p}", 0) for p in assigned_log_partitions() if owns(p)}

        bulk_path = install_bulk(app, dp_topics, apply_fetch, log_topic=log_name,
                                 log_positions=log_positions, on_batch=on_batch)

        @app.timer(PACE_IDLE_AFTER)
        async def unpace_fetches() -> None:
            """Back to one-byte fetches once no batch has run for PACE_IDLE_AFTER s."""
            if paced[0] and fetching and bulk_path.idle() >= PACE_IDLE_AFTER:
                pace_fetches(fetching[0], False)
                paced[0] = False

        @app.timer(TAIL_CHECK)
        async def tail_check() -> None:
            """The safety net for a consumer that stops delivering. Under heavy load we
            saw faust's consumer (aiokafka in faust's consumer thread) hand over nothing
            more for minutes while records waited in partitions it owned, and the worker
            sat idle. So, after TAIL_CHECK seconds without a fetch, compare each owned
            partition's end offset with what the agents handled (the sequencer's last
            input offset, the processor's next log position) and apply what is missing
            straight from the log (read_range). Idempotent by the agents' own rules;
            nothing is acked for it, so the consumer's offsets stay faust's."""
            if bulk_path.idle() < TAIL_CHECK or app.tables.recovery.in_recovery:
                return
            try:                                  # a failed check must not stop the worker
                actives = [tp for tp in app.assignor.assigned_actives() if tp.topic in dp_topics
                           and owns(tp.partition)]
                batch = await _missing(actives) if actives else {}
            except Exception as err:              # noqa: BLE001 - the next check retries
                logger.warning("tail check failed (%s)", type(err).__name__)
                return
            if batch:
                logger.warning("no fetch for %.0f s while %d record(s) waited in owned "
                               "partitions; applying them from the log", bulk_path.idle(),
                               sum(len(r) for r in batch.values()))
                await bulk_path.inject(batch)

        async def _missing(actives) -> dict[str, list[RawRecord]]:
            from aiokafka import AIOKafkaConsumer
            reader = AIOKafkaConsumer(bootstrap_servers=broker, group_id=None,
                                      enable_auto_commit=False, request_timeout_ms=10_000)
            await reader.start()
            try:
                ends = await reader.end_offsets(actives)
            finally:
                await reader.stop()
            batch: dict[str, list[RawRecord]] = {}
            for tp in actives:
                name = dp_topics[tp.topic]
                start = (model_view.get(f"log/{tp.partition}", 0) if name == MODEL_EVENTS else
                         last_handled(sequencer_view, name, tp.partition) + 1)
                if ends[tp] > start:            # bounded per check: a backlog takes several
                    records = await fetch(name, tp.partition, start, min(ends[tp], start + TAIL_READ))
                    if records:
                        batch.setdefault(name, []).extend(records)
            return batch

    last_full = [time.monotonic()]

    @app.timer(FULL_GC_CHECK)
    async def full_collection() -> None:
        """The collector's full pass, held back by ``hold_full_collections``: when the
        bulk path has worked and then been idle for a second, or at least every
        FULL_GC_AT_MOST s."""
        if gc.get_threshold()[2] < 1_000_000_000:
            return                                 # automatic full passes still on
        now = time.monotonic()
        # idle after work since the last pass (the per-record path: at most, only)
        idle = bulk and bulk_path.idle() >= 1.0 and bulk_path.last_fetch > last_full[0]
        if idle or now - last_full[0] >= FULL_GC_AT_MOST:
            gc.collect()
            last_full[0] = time.monotonic()

    @app.page("/status/")
    async def status_view(web, request):
        """Per model on this worker: kind, epoch, rounds, updates or hard queries, budget."""
        def active(model_id: str) -> bool:
            try:
                actives = app.assignor.assigned_actives()
            except Exception:              # noqa: BLE001 - before the first assignment
                return True
            p = model_partition(model_id, partitions)
            return any(tp.topic == log_name and tp.partition == p for tp in actives)

        return web.json({"models": collect_status(model_state, active)})

    @app.page("/metrics/")
    async def metrics_view(web, request):
        return web.bytes(metrics.text(), content_type="text/plain; version=0.0.4")

    @app.task
    async def declare_outputs():
        for topic in outputs.values():          # no agent reads them, so declare explicitly
            await topic.maybe_declare()

    app.dpstream.update(sequencer=sequencer, processor_agent=model_processor,
                        tables=(sequencer_state, model_state))
    return app


class _TableView:
    """The MutableMapping surface the agents use, over a faust table (keys are str;
    the table stores them as bytes with the raw key serializer).

    ``set_partition(p)`` makes later writes (and deletions) go to changelog partition ``p``: what
    faust's Table.on_key_set does with the current event's partition, done explicitly
    (Collection.send_changelog, then the store), because batches have no current event.
    Reads go to the store (``table.data``) directly: faust's ``Table.__getitem__`` adds
    only its sensors' get counters, which nothing here reads, and cost a tenth of the
    worker's loop time at small batches (several reads per event).
    """

    def __init__(self, table):
        self.table = table
        self.partition: int | None = None

    def set_partition(self, partition: int) -> None:
        self.partition = partition

    def __getitem__(self, key: str):
        return self.table.data[key.encode()]

    def __setitem__(self, key: str, value) -> None:
        if self.partition is None:
            self.table[key.encode()] = value
            return
        self.table.send_changelog(self.partition, key.encode(), value)
        self.table.data[key.encode()] = value

    def __delitem__(self, key: str) -> None:
        """A tombstone on the changelog (faust's Table.on_key_del: value None, raw
        serializer; recovery and compaction drop the key), then the key leaves the store."""
        if self.partition is None:
            del self.table[key.encode()]
            return
        self.table.send_changelog(self.partition, key.encode(), None, value_serializer="raw")
        self.table.data.pop(key.encode(), None)

    def __contains__(self, key: str) -> bool:
        return key.encode() in self.table.data

    def get(self, key: str, default=None):
        return self.table.data.get(key.encode(), default)
