"""Broker fault drills: the worker through the failures of a three-node KRaft cluster
(``scripts/kafka.sh cluster``, driven by tests/streams/cluster.py), while examples and
queries flow through two workers in one group whose bootstrap lists all three nodes.

    .venv/bin/python -m tests.streams.broker_drill --drill all             # plaintext cluster
    .venv/bin/python -m tests.streams.broker_drill --drill all --secure    # SASL_SSL, ACLs
    .venv/bin/python -m tests.streams.broker_drill --drill controller --runs 3

The drills run back to back on one cluster, one topic prefix and one pair of workers;
examples (150/s, ``--rate``) and queries (a fifth of that) flow through each fault:

  examples-leader  kill -9 the node leading ``examples`` in the partition of most models
  log-leader       kill -9 the node leading that partition of ``model-events``
  ledger-leader    kill -9 the node leading that partition of ``ledger``
  node-hung        SIGSTOP the node leading that partition of ``model-events``: a hung
                   broker (its connections stay open, nothing answers: a stalled disk, a
                   long GC pause, a network that drops packets), until the worker got
                   past it; then SIGCONT
  rolling-restart  each node in turn: clean stop, start, every replica back in its ISR
  controller       kill -9 the active KRaft controller (the metadata quorum's leader)
  node-down        kill -9 the group coordinator's node and keep it down for twice the
                   worker's longest client timeout (``worker_timeouts``), then start it

A killed or stopped node is started again (a hung one continued) before the drill
ends, and the drill waits until every replica of the prefix's topics (and of
``__consumer_offsets``) is back in its ISR. With one node down, replication 3 and
``min.insync.replicas`` 2 still take ``acks=all`` writes, so the worker must go on:
each down window must see every model answer a query sent after the node went down,
before the node is back.

After each drill, on everything sent so far: every prediction, answer, ledger entry and
release equals the embedded runtime's on the same inputs (tests/streams/drill_checks.py:
none missing, extra or conflicting; identical duplicates are counted apart), no dead
letter, no worker exited by itself, ``dpstream replay`` with the key reproduces every
release. The embedded runtime takes the inputs that landed in ``examples`` and
``queries`` (read back: a send that failed may still have landed), in the order the
sequencer logged them: a model's examples and queries sit on two topics, so only the
log fixes how they interleave. The log itself is checked: every input landed in it, each
model's examples and queries in the order they sit in their topic, and nothing else did.

One line per drill: PASS or FAIL, what was done, inputs and outputs, identical
duplicates, the time to the first output after the fault, to the first answer to a
query sent after it, the longest pause between outputs, progress while a node was
down, the checks, and the drill's seconds. The topics the worker created are described
first (replication and ``min.insync.replicas`` of the state topics: 3 and 2 on this
cluster). tests/streams/test_broker_drills.py runs them all in the test suite.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.worker.faust_seam import REQUEST_WAIT_MS
from dpstream.streams.worker.kafka import running
from dpstream.streams.worker.observe import model_partition
from dpstream.streams.worker.state import TABLES, changelog_name
from dpstream.streams.worker.topics import ALL, DEFAULT_PARTITIONS, STATE_TOPICS

from .cluster import NODES, Cluster
from .drill_checks import Checks, Published, Read, Workers, interleaved, judge, replay
from .kafka_helpers import KEY_HEX, ROOT, client_args, produce, read_all
from .workload import examples, models, queries

RATE = 150.0                 # examples per second while a drill runs (queries: a fifth of it)
WAIT = 240.0                 # s: the bound on every wait for the cluster or the worker
COMPARED = ("predictions", "answers", "ledger", "releases")
DRILLS = ("examples-leader", "log-leader", "ledger-leader", "node-hung", "rolling-restart", "controller",
          "node-down")
KILL, STOP, HANG = "kill -9", "clean stop", "SIGSTOP"     # how a node goes down
ROLES = ("worker", "producer", "querier")    # a secured drill's users: its prefix + each
STATE_REPLICATION, STATE_MIN_INSYNC = 3, 2   # what the state topics must have on a 3-node cluster
MODEL_IDS = frozenset(m["model_id"] for m in models())


# ---------------------------------------------------------------- what a drill found
@dataclass
class Down:
    """One node down: from ``at`` (killed or stopped) to ``back`` (started, in the
    cluster again), and what the worker did meanwhile."""
    node: int
    how: str                       # KILL, STOP or HANG
    at: float                      # wall clock (s), as the records' timestamps
    back: float = 0.0
    answered: set[str] = field(default_factory=set)   # models that answered a query sent after ``at``
    outputs: int = 0               # predictions published while it was down

    @property
    def seconds(self) -> float:
        return self.back - self.at

    @property
    def progressed(self) -> bool:
        """Every model answered a query sent after the node went down, while it was down."""
        return self.answered >= MODEL_IDS


@dataclass
class LogCheck:
    """The sequenced log (``model-events``) against the inputs that landed."""
    missing: int = 0               # inputs never logged
    invented: int = 0              # log events whose source is no input that landed
    out_of_order: int = 0          # inputs logged before an earlier one of their model and topic

    @property
    def clean(self) -> bool:
        return self.missing == self.invented == self.out_of_order == 0


@dataclass
class DrillResult:
    name: str
    what: str = ""                  # the fault, in words
    checks: Checks = field(default_factory=Checks)
    log: LogCheck = field(default_factory=LogCheck)
    examples: int = 0               # inputs that landed during the drill
    queries: int = 0
    outputs: int = 0                # distinct predictions published during the drill
    duplicates: int = 0             # identical duplicates published during the drill (all topics)
    failed_sends: int = 0           # input sends the producer reported failed (landed or not)
    first_output: float | None = None     # s from the fault to the first prediction published after it
    first_answer: float | None = None     # s from the fault to the first answer to a query sent after it
    longest_pause: float = 0.0            # s, the longest time without a prediction while inputs flowed
    downs: list[Down] = field(default_factory=list)
    seconds: float = 0.0
    spent: dict[str, float] = field(default_factory=dict)   # s per step (``timed``)

    @property
    def ok(self) -> bool:
        return self.checks.ok and self.log.clean and all(d.progressed for d in self.downs)

    def line(self) -> str:
        def secs(v):
            return "none" if v is None else f"+{v:.1f} s"
        downs = "; ".join(f"node {d.node} down {d.seconds:.0f} s ({d.how}): "
                          f"{'progress' if d.progressed else 'NO PROGRESS'}, {d.outputs} predictions, "
                          f"{len(d.answered)}/{len(MODEL_IDS)} models answered queries sent after it went down"
                          for d in self.downs)
        log = "" if self.log.clean else (f"; LOG: {self.log.missing} inputs missing, {self.log.invented} "
                                         f"invented, {self.log.out_of_order} out of order")
        return (f"{self.name}: {'PASS' if self.ok else 'FAIL'}: {self.what}; {self.examples} examples and "
                f"{self.queries} queries in, {self.outputs} predictions out, identical duplicates "
                f"{self.duplicates}, failed sends {self.failed_sends}; first output after the fault "
                f"{secs(self.first_output)}, first answer to a query sent after it {secs(self.first_answer)}, "
                f"longest pause between outputs {self.longest_pause:.1f} s; {downs}; all outputs so far: "
                f"{self.checks.text()}"
                f"{log}; {self.seconds:.0f} s")


@contextlib.contextmanager
def timed(result: DrillResult, step: str):
    """Add the time the block takes to ``result.spent[step]``."""
    began = time.monotonic()
    try:
        yield
    finally:
        result.spent[step] = result.spent.get(step, 0.0) + time.monotonic() - began


# ---------------------------------------------------------------- the inputs
class Flow:
    """Examples at ``rate`` per second and queries at a fifth of that while a drill runs,
    by idempotent ``acks=all`` producers (``examples_as`` and ``queries_as``: bootstrap
    strings, or ``Kafka`` settings of the users who may write them). Every query carries
    a query id of its own, and the time it was sent (``sent_at``), so that an answer tells
    when its question was asked."""

    CHUNK = 10_000          # workload.examples(n) rounds per chunk: 33,300 examples, 10,000 queries

    def __init__(self, prefix: str, examples_as, queries_as, *, rate: float = RATE):
        self.prefix, self.examples_as, self.queries_as, self.rate = prefix, examples_as, queries_as, rate
        self.examples: list[dict] = []
        self.queries: list[dict] = []
        self.chunks = 0
        self.next_example = self.next_query = 0
        self.sent_at: dict[str, float] = {}
        self.model_of: dict[str, str] = {}
        self.failed = 0
        self._more()

    def _more(self) -> None:
        """Another chunk of the workload (each chunk its own draws: workload.examples(n)
        draws from a stream named by n)."""
        n = self.CHUNK + self.chunks
        self.chunks += 1
        self.examples += interleaved(examples(n))
        for q in interleaved(queries(n // 5)):
            q["query_id"] = f"q{len(self.queries)}"
            self.model_of[q["query_id"]] = q["model_id"]
            self.queries.append(q)

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set, then flush."""
        ex = AIOKafkaProducer(**client_args(self.examples_as), acks="all", enable_idempotence=True)
        qu = AIOKafkaProducer(**client_args(self.queries_as), acks="all", enable_idempotence=True)
        await ex.start()
        await qu.start()
        try:
            begun, sent_e, sent_q = time.monotonic(), 0, 0
            while not stop.is_set():
                due = time.monotonic() - begun
                while sent_e < due * self.rate:
                    if self.next_example == len(self.examples):
                        self._more()
                    await self._send(ex, "examples", self.examples[self.next_example])
                    self.next_example += 1
                    sent_e += 1
                while sent_q < due * self.rate / 5:
                    if self.next_query == len(self.queries):
                        self._more()
                    q = self.queries[self.next_query]
                    self.sent_at[q["query_id"]] = time.time()
                    await self._send(qu, "queries", q)
                    self.next_query += 1
                    sent_q += 1
                await asyncio.sleep(0.02)
            await asyncio.gather(ex.flush(), qu.flush())
        finally:
            await asyncio.gather(ex.stop(), qu.stop())

    async def _send(self, producer, topic: str, value: dict) -> None:
        try:
            future = await producer.send(self.prefix + topic, key=value["model_id"].encode(),
                                         value=json.dumps(value).encode())
        except KafkaError:            # not sent (judged by what landed): the flow goes on
            self.failed += 1
            return
        future.add_done_callback(self._delivered)

    def _delivered(self, future) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed += 1


# ---------------------------------------------------------------- the drills
class BrokerDrills:
    """The drills on one cluster, one topic prefix, two workers. ``admin``: who reads
    every topic and registers the models (a ``Kafka``); ``worker_args``, ``replay_args``:
    the client config flags of the workers and of replay; ``examples_as``, ``queries_as``:
    who sends the inputs."""

    def __init__(self, cluster: Cluster, prefix: str, tmp: Path, *, app_id: str | None = None,
                 worker_args: tuple[str, ...] = (), replay_args: tuple[str, ...] = (),
                 examples_as=None, queries_as=None, down_seconds: float | None = None, rate: float = RATE,
                 log=print):
        self.cluster, self.prefix, self.tmp, self.say = cluster, prefix, tmp, log
        self.bootstrap = cluster.bootstrap
        self.admin = cluster.kafka()
        self.app_id = app_id or prefix + "app"
        self.replay_args = tuple(replay_args)
        self.workers = Workers(self.bootstrap, prefix, tmp, args=(*worker_args, "--app-id", self.app_id), log=log)
        self.flow = Flow(prefix, examples_as or self.admin, queries_as or self.admin, rate=rate)
        self.down_seconds = down_seconds
        # the busiest partition: the one holding most models (each model's inputs, log and
        # outputs share its number)
        self.partition = Counter(model_partition(m["model_id"], DEFAULT_PARTITIONS)
                                 for m in models()).most_common(1)[0][0]
        self.rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
        self.published = Published(self.admin, prefix)
        self.taken: dict[str, int] = {}                       # topic -> records of it judged already
        self.logged: set[tuple[str, int, int]] = set()        # input sources the log holds
        self.duplicates = 0
        self.topic_report: list[str] = []
        self.topic_problems: list[str] = []
        self.drill_start: dict[str, int] = {}                # topic -> its records published before the drill

    @property
    def topics(self) -> list[str]:
        """Every topic of the prefix, the tables' changelogs included."""
        return [self.prefix + t for t in ALL] + [changelog_name(self.app_id, t) for t in TABLES]

    # ------------------------------------------------------------ setup
    def setup(self) -> None:
        """Two workers, the models registered, the topics described."""
        self.say(f"broker drills: prefix {self.prefix}, bootstrap {self.bootstrap}, partition {self.partition}")
        with ThreadPoolExecutor(2) as pool:                 # both at once: each takes ~30 s here
            list(pool.map(self.workers.start, ("a", "b")))
        asyncio.run(produce(self.admin, self.prefix + "models", models()))
        asyncio.run(read_all(self.admin, self.prefix + "model-events", until=len(models()), timeout=WAIT))
        asyncio.run(self.rt.feed_all([("models", m) for m in models()]))
        asyncio.run(self._describe_topics())
        for line in self.topic_report:
            self.say(f"  {line}")
        for line in self.topic_problems:
            self.say(f"  TOPIC PROBLEM: {line}")

    async def _describe_topics(self) -> None:
        """Each topic's partitions, replication and ``min.insync.replicas`` (and whether the
        topic sets it or takes the broker's); a state topic below 3 and 2 is a problem."""
        names = self.topics
        async with running(self.admin.admin(request_timeout_ms=15000)) as admin:
            described = await admin.describe_topics(names)
            answers = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
        configs = {}
        for answer in answers:
            for resource in answer.to_object()["resources"]:
                configs[resource["resource_name"]] = {e["config_names"]: (e["config_value"], e["config_source"])
                                                     for e in resource["config_entries"]}
        state = {self.prefix + t for t in STATE_TOPICS} | {changelog_name(self.app_id, t) for t in TABLES}
        for d in described:
            name = d["topic"]
            if d["error_code"]:
                self.topic_problems.append(f"{name}: not described (error {d['error_code']})")
                continue
            rf = min(len(p["replicas"]) for p in d["partitions"])
            insync, source = configs.get(name, {}).get("min.insync.replicas", ("?", None))
            cleanup = configs.get(name, {}).get("cleanup.policy", ("?", None))[0]
            whose = "the topic's own" if source == 1 else "the broker's"
            role = "state" if name in state else "input/output"
            self.topic_report.append(f"{name}: {role}, {len(d['partitions'])} partitions, replication {rf}, "
                                     f"min.insync.replicas {insync} ({whose}), cleanup.policy {cleanup}")
            if name in state and (rf < STATE_REPLICATION or not insync.isdigit() or int(insync) < STATE_MIN_INSYNC):
                self.topic_problems.append(f"{name}: replication {rf}, min.insync.replicas {insync}; "
                                           f"a state topic needs {STATE_REPLICATION} and {STATE_MIN_INSYNC}")

    # ------------------------------------------------------------ one drill
    def run(self, name: str) -> DrillResult:
        """One drill (a name of DRILLS): the fault while inputs flow, then the checks."""
        result = DrillResult(name)
        began = time.monotonic()
        self.drill_start = {t: len(asyncio.run(self.published.read(t, timeout=WAIT))) for t in ("predictions", "answers")}
        failed = self.flow.failed
        self.workers.check_alive()
        exited = set(self.workers.exited)
        asyncio.run(self._drill(name, result))
        result.failed_sends = self.flow.failed - failed
        self._judge(result)
        result.checks.exited = [n for n in self.workers.exited if n not in exited]
        for n in result.checks.exited:       # a supervisor would restart it: the next drill has two
            self.say(f"  worker {n} restarted for the next drill")
            self.workers.start(n)
        result.seconds = time.monotonic() - began
        self.say("  time spent: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.spent.items()))
        return result

    async def _drill(self, name: str, result: DrillResult) -> None:
        stop = asyncio.Event()
        sending = asyncio.ensure_future(self.flow.run(stop))
        watching = asyncio.ensure_future(self._watch_workers())
        try:
            with timed(result, "first answers"):
                await self._answered_after(time.time(), "the flow started")
            fault = getattr(self, "_" + name.replace("-", "_"))
            await fault(result)
            with timed(result, "answers after recovery"):
                await self._answered_after(time.time(), "the cluster recovered")
        finally:
            stop.set()
            watching.cancel()
            with timed(result, "flush"):
                await sending

    async def _watch_workers(self) -> None:
        while True:
            self.workers.check_alive()
            await asyncio.sleep(1.0)

    async def _examples_leader(self, result: DrillResult) -> None:
        await self._kill_leader(result, "examples")

    async def _log_leader(self, result: DrillResult) -> None:
        await self._kill_leader(result, "model-events")

    async def _ledger_leader(self, result: DrillResult) -> None:
        await self._kill_leader(result, "ledger")

    async def _kill_leader(self, result: DrillResult, topic: str) -> None:
        node = await self.cluster.leader(self.prefix + topic, self.partition)
        result.what = f"kill -9 node {node}, leader of {topic}[{self.partition}]{await self._leads(node)}"
        await self._down(result, node, KILL)

    async def _node_hung(self, result: DrillResult) -> None:
        node = await self.cluster.leader(self.prefix + "model-events", self.partition)
        result.what = (f"SIGSTOP node {node} (hung: its connections open, nothing answers), leader of "
                       f"model-events[{self.partition}]{await self._leads(node)}, until every model "
                       "answered a query sent after it hung; then SIGCONT")
        await self._down(result, node, HANG)

    async def _rolling_restart(self, result: DrillResult) -> None:
        result.what = "rolling restart of nodes " + ", ".join(map(str, NODES)) + " (clean stop, start, ISR full)"
        for node in NODES:
            await self._down(result, node, STOP)

    async def _controller(self, result: DrillResult) -> None:
        node, epoch = self._quorum_leader()
        result.what = f"kill -9 node {node}, the active controller (quorum epoch {epoch}){await self._leads(node)}"

        async def elected():
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                new, new_epoch = self._quorum_leader()
                if new_epoch > epoch and new not in (-1, node):
                    result.what += f"; node {new} controller after {time.time() - result.downs[-1].at:.1f} s"
                    return
                await asyncio.sleep(0.2)
            result.what += f"; NO new controller within {WAIT:.0f} s"
        await self._down(result, node, KILL, meanwhile=elected)

    async def _node_down(self, result: DrillResult) -> None:
        timeouts = worker_timeouts()
        producer = timeouts.pop("producer request timeout")
        hold = self.down_seconds or 2 * max(timeouts.values())
        longest = max(timeouts, key=timeouts.get)
        async with running(self.admin.admin(request_timeout_ms=15000)) as admin:
            node = await admin.find_coordinator(self.app_id)
        result.what = (f"kill -9 node {node}, the worker group's coordinator{await self._leads(node)}, down "
                       f"{hold:.0f} s (the worker's longest client timeout that applies: {longest} "
                       f"{timeouts[longest]:.0f} s; its producers wait {REQUEST_WAIT_MS / 1000:.0f} s for a "
                       f"broker's answer, and a batch {producer:.0f} s for a leader)")
        await self._down(result, node, KILL, hold=hold)

    async def _down(self, result: DrillResult, node: int, how: str, *, hold: float = 0.0,
                    meanwhile=None) -> None:
        """Take ``node`` down (``how``: KILL, STOP or HANG), wait until every model answered a
        query sent after that (and for ``meanwhile()``, and ``hold`` s in all), bring it
        back (started, or continued), and wait until its replicas are back in every ISR."""
        self.say(f"  {how}: node {node}")
        pid = self.cluster.nodes()[node].pid
        with timed(result, how):
            if how == HANG:                  # cluster.py has no verb for it (its JVM, stopped)
                os.kill(pid, signal.SIGSTOP)
            else:
                await asyncio.to_thread(self.cluster.kill if how == KILL else self.cluster.stop_node, node)
        down = Down(node, how, time.time())
        result.downs.append(down)
        try:
            with timed(result, "answers while down"):
                if meanwhile is not None:
                    await meanwhile()
                down.answered = await self._answered_after(down.at, f"node {node} went down ({how})")
            rest = down.at + hold - time.time()
            if rest > 0:
                with timed(result, "held down"):
                    await asyncio.sleep(rest)
        finally:
            with timed(result, "back"):
                if how == HANG:
                    os.kill(pid, signal.SIGCONT)
                else:
                    await asyncio.to_thread(self.cluster.start_node, node)
        down.back = time.time()
        self.say(f"  node {node} back after {down.seconds:.0f} s")
        with timed(result, "ISR full"):
            await self._replicated()

    async def _leads(self, node: int) -> str:
        """", it led N of the prefix's M partitions" (for the drill's line)."""
        async with running(self.admin.admin(request_timeout_ms=15000)) as admin:
            described = await admin.describe_topics(self.topics)
        parts = [p for t in described for p in t["partitions"]]
        return f" (it led {sum(p['leader'] == node for p in parts)} of the prefix's {len(parts)} partitions)"

    def _quorum_leader(self) -> tuple[int, int]:
        """(leader id, epoch) of the KRaft metadata quorum, the newest any node wrote in its
        quorum-state file (a node persists each election it takes part in). The metadata
        answer's controller id is no help: in KRaft a broker names a random live broker
        there, not the active controller."""
        best = (-1, -1)
        for n in NODES:
            path = self.cluster.state / f"node{n}" / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):       # being rewritten: the others say it too
                continue
            if state.get("leaderEpoch", -1) > best[1]:
                best = (state.get("leaderId", -1), state["leaderEpoch"])
        return best

    async def _replicated(self) -> None:
        """Wait until every partition of the prefix's topics and ``__consumer_offsets`` has
        all its replicas in its ISR (at most WAIT s; then the drill goes on and says so)."""
        deadline, lagging = time.monotonic() + WAIT, None
        while time.monotonic() < deadline:
            try:
                async with running(self.admin.admin(request_timeout_ms=15000)) as admin:
                    described = await admin.describe_topics([*self.topics, "__consumer_offsets"])
                lagging = [f"{t['topic']}[{p['partition']}]" for t in described for p in t["partitions"]
                           if set(p["isr"]) != set(p["replicas"])]
                if not lagging and all(t["error_code"] == 0 for t in described):
                    return
            except Exception as err:            # noqa: BLE001 - a node still starting: asked again
                lagging = [type(err).__name__]
            await asyncio.sleep(1.0)
        self.say(f"  replicas not all back in their ISRs within {WAIT:.0f} s: {lagging[:5]}")

    async def _answered_after(self, since: float, what: str) -> set[str]:
        """The models that answered a query sent at or after ``since`` (wall clock), once
        all of them did (at most WAIT s)."""
        answered: set[str] = set()
        scanned = self.drill_start["answers"]                # answers of this drill's queries only
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                records = await self.published.read("answers", timeout=60)
                for r in records[scanned:]:
                    qid = r.value.get("query_id")
                    if self.flow.sent_at.get(qid, 0.0) >= since:
                        answered.add(self.flow.model_of[qid])
                scanned = len(records)
            except Exception as err:            # noqa: BLE001 - a leader moving: read again
                self.say(f"  (reading answers: {type(err).__name__})")
            if answered >= MODEL_IDS:
                return answered
            await asyncio.sleep(1.0)
        self.say(f"  after {what}: only {sorted(answered)} answered within {WAIT:.0f} s")
        return answered

    # ------------------------------------------------------------ the checks
    def _new(self, topic: str) -> list[Read]:
        """The records of ``topic`` published since the last call."""
        records = asyncio.run(self.published.read(topic, timeout=WAIT))
        new, self.taken[topic] = records[self.taken.get(topic, 0):], len(records)
        return new

    def _judge(self, result: DrillResult) -> None:
        landed = {}
        with timed(result, "inputs read"):
            for topic in ("examples", "queries"):
                for r in self._new(topic):
                    landed[(topic, r.partition, r.offset)] = r.value
        result.examples = sum(1 for k in landed if k[0] == "examples")
        result.queries = len(landed) - result.examples
        with timed(result, "log read"):
            order = self._log_order(landed, result.log)
        with timed(result, "embedded runtime"):
            asyncio.run(self.rt.feed_all(order))
        with timed(result, "outputs compared"):
            checks = judge(self.published, self.rt.outputs, topics=COMPARED, timeout=WAIT, log=self.say)
        total = sum(c.duplicates for c in checks.outputs.values())
        result.duplicates, self.duplicates = total - self.duplicates, total
        with timed(result, "replay"):
            checks.replay = replay(self.bootstrap, self.prefix, self.replay_args)
        result.checks = checks
        self._timings(result)

    def _log_order(self, landed: dict[tuple[str, int, int], dict], check: LogCheck) -> list[tuple[str, dict]]:
        """The inputs that landed, in the order the sequencer logged them (each first
        logging counts; later ones are re-deliveries the processor skips), then any
        input the log never took (so that its outputs count as missing)."""
        deadline = time.monotonic() + WAIT
        logged: list[tuple[str, int, int]] = []
        while True:
            for r in self._new("model-events"):
                topic, partition, offset = r.value["source"].rsplit(":", 2)
                key = (topic.removeprefix(self.prefix), int(partition), int(offset))
                if key[0] == "models" or key in self.logged:
                    continue
                self.logged.add(key)
                if key not in landed:
                    check.invented += 1
                    continue
                logged.append(key)
            if len(logged) >= len(landed) or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        last: dict[tuple[str, str], int] = {}      # (topic, model) -> the last offset logged
        for key in logged:
            where = (key[0], landed[key]["model_id"])     # one partition per model
            if key[2] < last.get(where, -1):
                check.out_of_order += 1
            last[where] = max(key[2], last.get(where, -1))
        unlogged = [k for k in sorted(landed) if k not in self.logged]
        check.missing = len(unlogged)
        return [(k[0], landed[k]) for k in logged + unlogged]

    def _timings(self, result: DrillResult) -> None:
        """The drill's numbers from the timestamps of what it published."""
        preds, answers = (self.published.records[t][self.drill_start[t]:] for t in ("predictions", "answers"))
        result.outputs = len({(r.value["model_id"], r.value["seq"]) for r in preds})
        stamps = sorted(r.timestamp / 1000 for r in preds)
        result.longest_pause = max((b - a for a, b in zip(stamps, stamps[1:])), default=0.0)
        if result.downs:
            fault = result.downs[0].at
            result.first_output = next((t - fault for t in stamps if t >= fault), None)
            asked_after = [r.timestamp / 1000 - fault for r in answers
                           if self.flow.sent_at.get(r.value.get("query_id"), 0.0) >= fault]
            result.first_answer = min(asked_after, default=None)
        for d in result.downs:
            d.outputs = sum(1 for t in stamps if d.at <= t < d.back)


# ---------------------------------------------------------------- the worker's timeouts
def worker_timeouts() -> dict[str, float]:
    """The worker's client timeouts and retry bounds that a broker outage runs into, in
    seconds, from its own settings (a WorkerApp built in a child process, as
    ``dpstream worker`` builds it, and the modules' bounds): the consumer's request
    timeout (faust's broker_request_timeout, aiokafka's request_timeout_ms), the
    consumer group's session timeout, how long a failing batch is retried before the
    worker gives up on an error waiting cannot change (bulk.GIVE_UP_AFTER), how long a
    restore may read nothing (state.STALL). Not the producers' request timeout
    (producer_request_timeout, 20 minutes: the time a batch may wait for a partition's
    leader before it expires): a node down moves its leaderships within seconds, so no
    batch waits that long; it is returned too, as "producer request timeout", and
    reported beside the drill."""
    code = """
import json, tempfile
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.worker import bulk, state
from dpstream.streams.worker.app import WorkerApp
from dpstream.streams.worker.kafka import Kafka
conf = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(bytes(32)), data_dir=tempfile.mkdtemp()).app.conf
print(json.dumps({"consumer request timeout": conf.broker_request_timeout,
                  "group session timeout": conf.broker_session_timeout,
                  "batch give-up bound": bulk.GIVE_UP_AFTER, "restore stall bound": state.STALL,
                  "producer request timeout": conf.producer_request_timeout}))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"could not read the worker's timeouts: {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the command
def secured_drills(cluster: Cluster, prefix: str, tmp: Path, **kwargs) -> BrokerDrills:
    """Drills as a tenant of the secured cluster: users of its own (``prefix`` + worker,
    producer, querier: ``kafka.sh cluster users``, which restarts the nodes in turn so that
    they take the new PLAIN users) with the ACLs of ``prefix`` (``dpstream acls --apply``
    as the admin, LITERAL names); the admin registers the models, reads every topic and
    replays."""
    app_id = prefix + "app"
    cluster.script("users", *(prefix + role for role in ROLES), timeout=900)
    done = subprocess.run([sys.executable, "-m", "dpstream.streams.cli", "acls", "--prefix", prefix, "--app-id",
                           app_id, "--apply", "--client-config", cluster.config("admin")],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"dpstream acls --apply failed: {done.stderr[-1500:]}")
    return BrokerDrills(cluster, prefix, tmp, app_id=app_id,
                        worker_args=("--client-config", cluster.config(prefix + "worker")),
                        replay_args=("--client-config", cluster.config("admin")),
                        examples_as=cluster.as_(prefix + "producer"), queries_as=cluster.as_(prefix + "querier"),
                        **kwargs)


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    return env


def run_drills(drills: BrokerDrills, names, log=print) -> list[DrillResult]:
    """``names`` in turn on ``drills`` (set up first), the workers stopped at the end."""
    results = []
    try:
        drills.setup()
        for name in names:
            result = drills.run(name)
            log(result.line())
            results.append(result)
    finally:
        drills.workers.stop_all()
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drill", default="all", help=f"all, or one or more of {', '.join(DRILLS)} (comma-separated)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--secure", action="store_true", help="the secured cluster (KAFKA_SECURE=1)")
    ap.add_argument("--rate", type=float, default=RATE, help="examples per second (queries: a fifth)")
    ap.add_argument("--down-seconds", type=float, default=None,
                    help="node-down: how long the node stays down (default: twice the worker's longest client timeout)")
    ap.add_argument("--cluster-state", default=None,
                    help="a running cluster's state directory (else one is started on free ports and stopped)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="  %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)    # the drill's own clients: a node is down
    names = DRILLS if args.drill == "all" else tuple(args.drill.split(","))
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        ap.error(f"unknown drill(s) {', '.join(unknown)}: choose from {', '.join(DRILLS)}")
    tmp = Path(tempfile.mkdtemp(prefix="dpstream-broker-drill-"))
    cluster = Cluster(Path(args.cluster_state)) if args.cluster_state else Cluster.start_new(tmp, secure=args.secure)
    if cluster.secure != args.secure:
        ap.error(f"the cluster of {args.cluster_state} is {'' if cluster.secure else 'not '}secured")
    failed = 0
    try:
        for run in range(args.runs):
            prefix = f"bdrill{uuid.uuid4().hex[:8]}-"
            make = secured_drills if args.secure else BrokerDrills
            drills = make(cluster, prefix, tmp / prefix, down_seconds=args.down_seconds, rate=args.rate)
            for result in run_drills(drills, names, log=lambda line: print(line, flush=True)):
                failed += not result.ok
            for line in drills.topic_problems:
                failed += 1
                print(f"run {run + 1}: FAIL: topics: {line}", flush=True)
    finally:
        if not args.cluster_state:
            cluster.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
