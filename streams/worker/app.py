"""The faust-streaming app of one dpstream worker: topics, tables, and the agents wired to
Kafka through the bulk path.

    inputs (models, examples, queries) --sequencer--> model-events --processor-->
        predictions, ledger, releases   (and rejected, from either)

Both agents are the runtime-agnostic functions of ``agents/``; the tables are their
state mappings. Every topic is keyed by model id, and all topics and tables share one
partition count, so a model's inputs, log and state live in the same partition number
and move together between workers (faust co-partitioning). The table changelog records
go to the partition of the event being processed.

The bulk path (streams/worker/bulk.py) reads whole fetches; ``apply_fetch`` runs each through
the sequencer, and hands the log records it appended straight to the processor once the
broker acknowledged them (their offsets come from the acknowledgement), so an event
costs one trip through Kafka, not two; the same records, read back from
``model-events`` later, sit below the processor's position and are dropped unparsed.
The log stays the source of truth: a crash between appending and applying leaves a
backlog the processor reads first (streams/worker/logread.py).

Tables: ``sequencer-state`` (model configs, last input offset per input partition) and
``model-state``, one record per key ``model/<id>/...`` (agents/kinds/storage.py), the
worker's own (streams/worker/state.py): restored from their compacted changelogs before
any record of their partition is applied. Changelogs and ``model-events`` carry raw
features: they are as sensitive as the input topics (restrict them the same way;
dpstream never logs them).

Crash safety: every agent writes a table only after the outputs of the event are
acknowledged by the broker (agents/records.py), and faust flushes the producer before
it commits input offsets (faust/transport/consumer.py, Consumer._commit_offsets), so
neither the changelog nor the committed offsets can run ahead of the outputs. Both
agents also check that offsets arrive without gaps and re-read any range the runtime
dropped straight from the broker (streams/worker/logread.py; counted in
``dpstream_gap_records_total``).

Settings (faust facts: docs/architecture.md, "The faust seam"): ``web_tables_enabled=False`` (the
default /table view would serve private state over HTTP); ``at_least_once`` with
idempotent agents, since correctness must not depend on exactly-once; each topic's
replication, retention and partitions come from the topic plan (streams/worker/topic_plan.py),
which ``dpstream worker`` checks, and creates where it may, before the app starts.
"""
from __future__ import annotations

import gc
import logging
import time
from pathlib import Path

import faust
from mode import Service

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import last_handled, sequence_batch
from dpstream.mechanisms.randomness import KEY_ENV, KEY_FILE_ENV, KeyedRandomness

from . import faust_seam as seam
from .bulk import RELEASE_AFTER, BulkPath
from .kafka import KEY_PASSWORD_ENV, SASL_PASSWORD_ENV, Kafka, running
from .logread import read_range
from .observe import WEB_BIND, Metrics, collect_status, model_partition
from .outputs import OutputsProducer
from .state import CHANGELOG_COMPACTION, TABLES, WorkerState, changelog_name
from .topics import INPUTS, METADATA_MAX_AGE_MS, MODEL_EVENTS, OUTPUTS
from .tuning import FULL_GC_AT_MOST, FULL_GC_CHECK, pace_fetches, shorten_fetch_wait
from .watchdog import StopGuard

BATCH = 500                         # events per agent call at most
TAIL_CHECK = 5.0                    # seconds without a fetch before the worker checks the log ends
PACE_IDLE_AFTER = 1.0               # seconds without a batch before fetches answer at once again
TAIL_READ = 8_000                   # records per partition it reads from the log per check
GROUP_CHECK = 2.0                   # seconds between looks at the group coordination's errors
logger = logging.getLogger("dpstream.app")


class WorkerApp:
    """One worker's faust app and what it runs: the tables, the outputs producer, the
    processor, the bulk path, the timers (fetch pacing, the tail check, the collector's
    full passes) and the web pages (``/status/``, ``/metrics/``).

    ``emit_override`` (tests, benches) replaces the outputs producer: every output goes
    to it instead of Kafka."""

    def __init__(self, *, kafka: Kafka, rng: KeyedRandomness, partitions: int = 4,
                 app_id: str = "dpstream", data_dir: str | Path = "/tmp/dpstream-worker",
                 web_port: int | None = None, web_bind: str = WEB_BIND, replication: int = 1,
                 prefix: str = "",
                 emit_override=None, latency_metrics: bool = False, consumer_thread: bool = False,
                 faust_settings: dict | None = None):
        self.kafka, self.rng, self.partitions, self.prefix = kafka, rng, partitions, prefix
        self.app = app = faust.App(
            app_id,
            broker=kafka.faust_broker(),
            broker_credentials=kafka.faust_credentials(),     # TLS / SASL (streams/worker/kafka.py)
            store="memory://",
            datadir=str(data_dir),
            topic_partitions=partitions,
            topic_replication_factor=replication,
            processing_guarantee="at_least_once",
            web_enabled=web_port is not None,
            web_port=web_port or 6066,
            web_bind=web_bind,                # 127.0.0.1 unless told otherwise (observe.py)
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
            # A rebalance does not wait for the current batch; a batch that finishes after
            # its partition was revoked writes none of its state (Processor.owns, fed by
            # faust's rebalance signals below), and its outputs are identical duplicates.
            stream_wait_empty=False,
            stream_publish_on_commit=False,     # table changelog writes are sent at once
            # Bulk settings (bench/throughput.py measures them): many records per poll,
            # large producer batches; no linger (it would add its wait to every batch's
            # round trip). acks stay "all" (faust's default producer_acks=-1): durability
            # of each output is what the crash order relies on.
            broker_max_poll_records=4 * BATCH,
            producer_linger=0.0,
            producer_max_batch_size=1 << 20,
            # A consumer whose group join ran before the broker's metadata showed the topics
            # (a broker that just restarted answers "unknown topic" for seconds) gets no
            # partitions and notices only at its next metadata refresh: 5 minutes by default.
            consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **(faust_settings or {}),
            # faust lets ~80 environment variables override the settings given here
            # ($BROKER_URL, $BROKER_CREDENTIALS, $WEB_BIND, ...: faust/types/settings/
            # base.py ``_init_settings``): a stray one would silently move the worker to
            # another broker or put its pages on every interface. The worker's settings
            # are its flags and its client config alone (observe.py, streams/worker/kafka.py).
            env={},
        )
        # the Kafka consumer on this loop unless asked otherwise (faust_seam.py), its
        # commits refused for want of a right logged, not fatal
        seam.use_consumer(app, in_loop=not consumer_thread, on_refused=self._commit_refused)
        seam.bound_request_waits(app)    # a hung broker holds no write for long (faust_seam.py)
        seam.faster_commits()            # what to commit, found without a walk per offset
        self.log_name = prefix + MODEL_EVENTS
        self.names = {topic: prefix + topic for topic in (MODEL_EVENTS, *OUTPUTS)}
        self.metrics = Metrics(latency=latency_metrics)
        self._declare()
        self.outputs = OutputsProducer(app, self.names, self.metrics.observe_emits)
        self.emit = emit_override if emit_override is not None else self.outputs
        self.revoked: set[int] = set()       # model-events partitions taken away, not yet back
        self.generation: int | None = None   # the consumer generation of the last assignment
        self._homes: dict[str, int] = {}      # model id -> partition (``home``)
        self.changelog = seam.ChangelogWriter(app)   # a chunk's table writes in one step
        self.state = WorkerState(app.conf.id, kafka, self.changelog)
        self.state.declare = self._declare_changelogs
        self.model_view = self.state.view("model-state")
        # the sequencer's records (input offsets, registrations) may wait for the end of
        # its chunk, to leave with the processor's (apply_fetch says why that is safe)
        self.sequencer_view = self.state.view("sequencer-state", deferrable=True)
        self.processor = Processor(rng, self.model_view, self.emit, self.fetch, offload=True,
                                   owns=self.writes_to)
        self.dp_topics = {prefix + t: t for t in (*INPUTS, MODEL_EVENTS)}
        self.bulk = BulkPath(app, self.dp_topics, self.apply_fetch, log_topic=self.log_name,
                             log_positions=self.log_positions, on_batch=self.on_batch,
                             explain=kafka.explain)
        self._fetching = None                # aiokafka's consumer under faust's, once known
        self._paced = False                  # fetches wait for BUSY_FETCH_MIN_BYTES (pace_fetches)
        self._last_full_gc = time.monotonic()
        # the process ends soon after SIGTERM, SIGINT or a crash (installed at start)
        self.stop_guard = StopGuard(self.left_over, lambda: seam.crash_reason(app),
                                    on_stop=self.bulk.stop)
        self._wire()

    # ------------------------------------------------------------ topics and tables
    def _declare(self) -> None:
        app, prefix = self.app, self.prefix
        # internal=True: the worker declares (creates) every topic with the shared
        # partition count at start, so producers and consumers never race auto-creation.
        raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                   partitions=self.partitions, internal=True)
        self.inputs = app.topic(*(prefix + t for t in INPUTS), **raw)
        self.log = app.topic(self.log_name, **raw)
        self.output_topics = {name: app.topic(prefix + name, **raw) for name in OUTPUTS}
        # The tables' changelogs (streams/worker/state.py): compacted, declared by the
        # worker before its first restore; no agent reads them (faust's consumer does not
        # subscribe them), the worker's restore reads them with a consumer of its own.
        self.changelogs = {t: app.topic(changelog_name(app.conf.id, t),
                                        compacting=True, deleting=False,
                                        config=CHANGELOG_COMPACTION, **raw) for t in TABLES}

    async def _declare_changelogs(self) -> None:
        """Create the tables' changelogs where missing (before a restore reads them)."""
        for topic in self.changelogs.values():
            await topic.maybe_declare()

    # ------------------------------------------------------------ partitions
    def owns(self, partition: int) -> bool:
        """False once faust revoked the partition (until it is assigned back): a worker
        that lost it mid-batch must not write its state (mode's signals, faust/app/base.py
        _on_partitions_revoked / _on_partitions_assigned)."""
        return partition not in self.revoked

    def home(self, model_id: str) -> int:
        """The partition of ``model_id``'s records (Kafka's default partitioner; cached)."""
        partition = self._homes.get(model_id)
        if partition is None:
            if len(self._homes) >= 100_000:
                self._homes.clear()
            partition = self._homes[model_id] = model_partition(model_id, self.partitions)
        return partition

    def writes_to(self, partition: int) -> bool:
        """Whether a batch may write ``partition``'s state now: owned, and restored (one
        lost while the batch ran, even if regained, is not: streams/worker/state.py)."""
        return self.owns(partition) and self.state.is_ready(partition)

    def assignment_current(self) -> bool:
        """Whether the worker took in the consumer's current assignment (faust sets the
        generation before it signals the assignment: a fetch in between must wait, not be
        filtered by the previous assignment and left unacked)."""
        return self.generation == self.app.consumer_generation_id

    def assigned_log_partitions(self) -> set[int]:
        """The ``model-events`` partitions assigned to this worker now. An input keyed
        other than by its model id can sit on an input partition this worker owns while
        its model's log partition belongs to another worker: only the owner applies it."""
        return {tp.partition for tp in seam.assigned_actives(self.app) if tp.topic == self.log_name}

    def log_positions(self) -> dict[int, int]:
        """Per owned log partition, the processor's next offset (all below applied)."""
        return {p: self.model_view.get(f"log/{p}", 0) for p in self.assigned_log_partitions()
                if self.owns(p) and self.state.is_ready(p)}

    async def _on_revoked(self, sender, tps, **kwargs) -> None:
        revoked = {tp.partition for tp in tps if tp.topic == self.log_name}
        self.revoked.update(revoked)
        if revoked:
            # (the text varies, so that the log's repeat filter never holds one back)
            logger.info(f"a rebalance started (generation {self.app.consumer_generation_id}): "
                        f"partition(s) {', '.join(map(str, sorted(revoked)))} revoked until the "
                        "new assignment")

    async def _on_assigned(self, sender, tps, **kwargs) -> None:
        self.revoked.difference_update(tp.partition for tp in tps if tp.topic == self.log_name)
        # every partition number of a dpstream topic (co-partitioned with the changelogs):
        # its state is restored before any of its records is applied. A generation
        # skipped means this worker was out of the group (evicted): another may have
        # written its partitions meanwhile, so none counts as kept.
        generation = self.app.consumer_generation_id
        fresh = self.generation is not None and generation != self.generation + 1
        self.generation = generation
        self.state.assign({tp.partition for tp in tps if tp.topic in self.dp_topics}, fresh=fresh)
        try:                                 # the consumer exists once partitions are assigned
            consumer = seam.aiokafka_consumer(self.app)
            shorten_fetch_wait(consumer)
            pace_fetches(consumer, False)    # unpaced until the next batch (no 16 KiB wait
            self._fetching = consumer        # behind the 50 ms poll just set)
            self._paced = False
        except Exception as err:             # noqa: BLE001 - a faust without these internals
            logger.warning("could not shorten the consumer's fetch wait (%s)", type(err).__name__)

    def on_batch(self) -> None:
        if self._fetching is not None and not self._paced:
            pace_fetches(self._fetching, True)
            self._paced = True

    def _commit_refused(self, err: BaseException) -> None:
        """An offset commit the broker refused (a right revoked): one line, and the worker
        goes on (faust_seam.RefusedCommits)."""
        logger.error("%s; offsets are committed again once it is granted (a restart meanwhile "
                     "re-reads the uncommitted records, nothing is lost)",
                     self.bulk.say(err, "Read", "the group's offsets"))

    def left_over(self) -> str:
        """What this worker leaves uncommitted and unapplied, for the stop's log line: a
        restart re-reads it from the last committed offsets (the agents skip what they
        already handled), so nothing is lost."""
        parts = [f"{tp.topic}[{tp.partition}] {first}..{last}"
                 for tp, (first, last) in sorted(seam.acked_uncommitted(self.app).items())]
        return (f"{len(parts)} partition(s) with records applied but not committed"
                f"{' (' + ', '.join(parts) + ')' if parts else ''}; {self.bulk.left_over()}; "
                "a restarted worker reads them again from the last committed offsets, "
                "nothing is lost")

    # ------------------------------------------------------------ applying
    async def fetch(self, topic: str, partition: int, start: int, end: int) -> list[RawRecord]:
        records = await read_range(self.kafka, topic, partition, start, end, name=self.prefix + topic)
        self.metrics.gap_records.labels(topic).inc(len(records))
        return records

    async def apply_fetch(self, batch: dict[str, list[RawRecord]]) -> bool:
        """One batch of the bulk path: inputs through the sequencer (registrations first),
        BATCH at a time, each chunk's appended log records straight on through the
        processor (their offsets are the producer's acknowledgements), then the batch's
        own ``model-events`` records (those other writers appended, or a backlog left by
        a crash). Each chunk keeps only partitions this worker still owns: a rebalance
        during a long batch must not leave it working through (and re-reading the gaps
        of) a partition whose new owner is already processing it. Returns False when it
        skipped any record: then no record of the batch may be acked (the partitions'
        next owner, maybe this worker again, re-reads them from the committed offsets).

        One stage, not a pipeline: measured, sequencing the next fetch while this one's
        outputs are in flight made batches smaller and latency worse (p50 80-135 ms
        against 47-60 ms at 3,000 examples/s): on two shared cores the worker is
        CPU-bound, and a batch's fixed cost is paid once per batch. Tried again on
        2026-12-01 with the appends on a producer of their own and the processor's
        settle (outputs acknowledged, state written) overlapping the next batch's
        sequencing (commit 66ce28d, reverted): interleaved with this code at the same
        rates (bench/throughput.py --half-at 12000 8000 --compare-with), 4-11% more
        worker CPU per record for DP-Winnow (63.6-71.4 us against 59.8-67.2) and p99 no
        better (34 / 44 / 35 ms against 30 / 98 / 30).

        Requests per batch: a stream brings batches of ~100 records, and an aiokafka
        request costs the loop ~0.3 ms of CPU on this machine (a produce round trip, a
        /tmp probe), so requests, not records, set a stream's cost per record. The
        tables' changelog records go through ``ChangelogWriter``: the processor's on the
        loop's next turn, as faust's own path would send them (so its ``owns`` fence is
        unchanged), the sequencer's held until its chunk ends, right after the
        processor's last state write, so that both leave in one request (where faust's
        path took 2.5-2.9 requests per batch and ~0.14 ms of loop time per record).
        Holding the sequencer's is safe: they are still appended before the batch is
        acked (so before any commit, which flushes faust's producer), and at worst they
        land later than before; a restarted owner that finds older input offsets re-appends
        inputs the processor then skips as applied (``LogEvent.already_applied``), and a
        registration sent again is identical."""
        # The handoff invariant (streams/worker/state.py): no record is applied before
        # its partition's state is restored; records of a partition still restoring
        # wait here, whatever faust did between the assignment and its pause.
        await self.state.restored({r.partition for recs in batch.values() for r in recs},
                                  self.owns, lambda: self.bulk.stopping or self.app.should_stop,
                                  current=self.assignment_current)
        inputs = [r for name in INPUTS for r in batch.get(name, ())]
        events = batch.get(MODEL_EVENTS, [])
        for name, recs in batch.items():
            self.metrics.events_in.labels(name).inc(len(recs))
        with self.state.applying():
            return await self._apply_chunks(inputs, events)

    async def _apply_chunks(self, inputs: list[RawRecord], events: list[RawRecord]) -> bool:
        complete = True
        for stage, records in (("sequencer", inputs), ("processor", events)):
            for a in range(0, len(records), BATCH):
                chunk = records[a:a + BATCH]
                parts = {r.partition for r in chunk}
                ready = {p for p in parts if self.owns(p) and self.state.is_ready(p)}
                if ready != parts:
                    chunk, complete = [r for r in chunk if r.partition in ready], False
                if not chunk:
                    continue
                with self.metrics.timer(stage):
                    async with self.changelog.held():
                        if stage == "processor":
                            await self.processor.handle_batch(chunk)
                            continue
                        appended = await sequence_batch(chunk, self.sequencer_view, self.emit,
                                                        self.fetch, self.home, rng=self.rng)
                        mine = self.assigned_log_partitions()
                        appended = [r for r in appended if r.partition in mine
                                    and self.owns(r.partition) and self.state.is_ready(r.partition)]
                        if appended:
                            self.bulk.hold({r.partition for r in appended})   # not read back
                            await self.processor.handle_batch(appended)
        return complete

    # ------------------------------------------------------------ timers
    async def unpace_fetches(self) -> None:
        """Back to one-byte fetches once no batch has run for PACE_IDLE_AFTER s."""
        if self._paced and self._fetching is not None and self.bulk.idle() >= PACE_IDLE_AFTER:
            pace_fetches(self._fetching, False)
            self._paced = False

    async def tail_check(self) -> None:
        """The safety net for a consumer that stops delivering. Under heavy load we saw
        faust's consumer hand over nothing more for minutes while records waited in
        partitions it owned, and the worker sat idle. So, after TAIL_CHECK seconds without
        a fetch, compare each owned partition's end offset with what the agents handled
        (the sequencer's last input offset, the processor's next log position) and apply
        what is missing straight from the log (read_range). Idempotent by the agents' own
        rules; nothing is acked for it, so the consumer's offsets stay faust's."""
        if self.bulk.idle() < TAIL_CHECK:
            return
        try:                                  # a failed check must not stop the worker
            actives = [tp for tp in seam.assigned_actives(self.app) if tp.topic in self.dp_topics
                       and self.owns(tp.partition) and self.state.is_ready(tp.partition)]
            batch = await self._missing(actives) if actives else {}
        except Exception as err:              # noqa: BLE001 - the next check retries
            logger.warning("tail check failed (%s)", type(err).__name__)
            return
        if batch:
            logger.warning("no fetch for %.0f s while %d record(s) waited in owned partitions; "
                           "applying them from the log", self.bulk.idle(),
                           sum(len(r) for r in batch.values()))
            await self.bulk.inject(batch)

    async def _missing(self, actives) -> dict[str, list[RawRecord]]:
        async with running(self.kafka.consumer(group_id=None, enable_auto_commit=False,
                                               request_timeout_ms=10_000)) as reader:
            ends = await reader.end_offsets(actives)
        batch: dict[str, list[RawRecord]] = {}
        for tp in actives:
            name = self.dp_topics[tp.topic]
            start = (self.model_view.get(f"log/{tp.partition}", 0) if name == MODEL_EVENTS else
                     last_handled(self.sequencer_view, name, tp.partition) + 1)
            if ends[tp] > start:            # bounded per check: a backlog takes several
                records = await self.fetch(name, tp.partition, start, min(ends[tp], start + TAIL_READ))
                if records:
                    batch.setdefault(name, []).extend(records)
        return batch

    async def full_collection(self) -> None:
        """The collector's full pass, held back by ``tuning.hold_full_collections``: when
        the bulk path has worked and then been idle for a second, or at least every
        FULL_GC_AT_MOST s."""
        if gc.get_threshold()[2] < 1_000_000_000:
            return                                 # automatic full passes still on
        now = time.monotonic()
        idle = self.bulk.idle() >= 1.0 and self.bulk.last_fetch > self._last_full_gc
        if idle or now - self._last_full_gc >= FULL_GC_AT_MOST:
            gc.collect()
            self._last_full_gc = time.monotonic()

    async def watch_group(self) -> None:
        """Take an error aiokafka's group coordination holds (a group right refused), so
        that it tries again: say which right is missing; exit for the supervisor when the
        coordination ended for good (faust_seam.take_group_error says why)."""
        taken = await seam.take_group_error(self.app)
        if taken is None:
            return
        err, dead = taken
        if dead:
            logger.critical("%s, and the consumer's group coordination ended; stopping the worker "
                            "so that its supervisor restarts it",
                            self.bulk.say(err, "Join", "the consumer group"))
            await self.app.crash(err)
            return
        logger.error("%s; the worker joins its group once it is granted, nothing is lost",
                     self.bulk.say(err, "Join", "the consumer group"))

    async def release_idle(self) -> None:
        """Release held log partitions when no batch runs (an idle worker)."""
        if self.bulk.held:
            try:
                await self.bulk.release_idle(time.monotonic())
            except Exception as err:            # noqa: BLE001 - the next tick retries
                logger.warning("releasing held log partitions failed (%s)", type(err).__name__)

    # ------------------------------------------------------------ pages
    def status(self) -> dict:
        """Per model this worker actively owns: kind, epoch, rounds, updates or hard
        queries, budget (observe.status_of)."""
        actives = seam.assigned_actives(self.app)

        def active(model_id: str) -> bool:
            if not actives:
                return True                        # before the first assignment
            p = model_partition(model_id, self.partitions)
            return any(tp.topic == self.log_name and tp.partition == p for tp in actives)

        return {"models": collect_status(self.model_view, active)}

    # ------------------------------------------------------------ wiring
    def _wire(self) -> None:
        app, w = self.app, self
        app.on_partitions_revoked.connect(self._on_revoked)
        app.on_partitions_assigned.connect(self._on_assigned)

        # The agents receive nothing (the bulk path takes their records); they stay so
        # that faust subscribes and assigns their topics, co-partitioned with the tables.
        @app.agent(self.inputs, name="dpstream.sequencer")
        async def sequencer(stream):
            async for _ in stream:
                pass

        @app.agent(self.log, name="dpstream.processor")
        async def processor(stream):
            async for _ in stream:
                pass

        @app.task
        async def bulk_applier() -> None:
            await w.bulk.run()

        @app.task
        async def declare_outputs():
            for topic in w.output_topics.values():   # no agent reads them: declare them
                await topic.maybe_declare()

        @app.on_before_shutdown.connect
        async def stop_outputs_producer(sender, **kwargs) -> None:
            await w.state.stop()
            await w.outputs.stop()

        for interval, method in ((PACE_IDLE_AFTER, self.unpace_fetches), (TAIL_CHECK, self.tail_check),
                                 (FULL_GC_CHECK, self.full_collection), (RELEASE_AFTER, self.release_idle)):
            app.timer(interval, name=f"dpstream.{method.__name__}")(_call(method))
        app.add_dependency(FromTheStart(self))

        async def status_view(web, request):
            return web.json(w.status())

        async def metrics_view(web, request):
            for model_id, status in w.status()["models"].items():   # restored models too
                w.metrics.spent.labels(model_id).set(status["spent_epsilon"])
            return web.bytes(w.metrics.text(), content_type="text/plain; version=0.0.4")

        for path, view in (("/status/", status_view), ("/status", status_view),
                           ("/metrics/", metrics_view), ("/metrics", metrics_view)):
            app.page(path, name=f"dpstream{path.replace('/', '-')}")(view)
        app.dpstream = self


SECRET_VARIABLES = (KEY_ENV, KEY_FILE_ENV, SASL_PASSWORD_ENV, KEY_PASSWORD_ENV)


def keep_secrets_from_children(environ=None) -> list[str]:
    """Remove the secret variables from this process's environment once the worker has
    read them (its key and its Kafka settings are objects by then), so that no child
    inherits them: the noise helper (a ``spawn``, mechanisms/continual.py), the
    multiprocessing resource tracker it starts, anything a library runs. None of them
    needs the key or a password: the helper gets each stream's derived key with the draw
    it is asked for, over its pipe. Before (issue 41, item 15), /proc/<helper>/environ
    held DPSTREAM_SECRET_KEY and the SASL password. Returns the names removed."""
    import os
    environ = os.environ if environ is None else environ
    return [name for name in SECRET_VARIABLES if environ.pop(name, None) is not None]


class FromTheStart(Service):
    """What runs from the app's start on: faust starts its tasks and timers only once its
    first rebalance completed (faust/app/base.py ``App.on_started``), so only after the
    worker joined its group; a child service of the app starts with it, after the
    worker installed its signal handlers (mode/worker.py ``default_on_first_start``).
    Here: the stop guard (a SIGTERM before the group is joined, or while it cannot be
    joined, ends the process too), and the look at the group coordination's errors
    (``WorkerApp.watch_group``: a worker started while its group rights were revoked
    joined only with it)."""

    def __init__(self, worker: WorkerApp, **kwargs):
        super().__init__(**kwargs)
        self.worker = worker

    async def on_start(self) -> None:
        if not self.worker.app.in_worker:    # an app a test runs in its own process: no exits
            return
        try:                                 # on the main thread, after mode's signal handlers
            self.worker.stop_guard.install()
        except ValueError as err:            # not the main thread (an app run by a test)
            logger.warning("the stop guard is not installed (%s)", err)

    @Service.timer(GROUP_CHECK)
    async def _watch_group(self) -> None:
        try:
            await self.worker.watch_group()
        except Exception as err:             # noqa: BLE001 - the next tick looks again
            logger.warning("looking at the consumer group failed (%s)", type(err).__name__)


def _call(method):
    """A plain coroutine function calling ``method`` (faust timers take functions)."""
    async def timer() -> None:
        await method()
    timer.__name__ = method.__name__
    return timer


def make_app(**kwargs) -> faust.App:
    """The faust app of a worker (``WorkerApp(**kwargs).app``; ``app.dpstream`` is the
    WorkerApp)."""
    return WorkerApp(**kwargs).app
