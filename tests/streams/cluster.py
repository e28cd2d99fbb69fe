"""A three-node Kafka cluster for tests and fault drills: ``scripts/kafka.sh cluster``
driven from Python, and two session fixtures to import into a test module.

    from .cluster import kafka_cluster, secured_cluster  # noqa: F401  (pytest fixtures)

    async def test_failover(kafka_cluster, topic_prefix):
        topic = topic_prefix + "-t"
        await kafka_cluster.create_topic(topic, partitions=1)
        leader = await kafka_cluster.leader(topic, 0)
        kafka_cluster.kill(leader)                            # kill -9 of its JVM
        new = await kafka_cluster.wait_leader(topic, 0, not_in={leader})
        await asyncio.to_thread(kafka_cluster.start_node, leader)   # back in the cluster
        await kafka_cluster.wait_isr(topic, 0, {1, 2, 3})

Node control (``kill``, ``stop_node``, ``start_node``, ``start``, ``stop``) is synchronous:
each is one ``kafka.sh cluster`` command that returns when it is done (``start_node``:
the node answers metadata listing itself; its replicas then rejoin the ISRs on their
own). Inside a test whose clients run on the event loop, call the slow ones (``start``,
``start_node``, ``stop_node``) through ``asyncio.to_thread``. Metadata questions
(``brokers``, ``topics``, ``partitions``, ``leader``, ``isr``, ``wait_partition``,
``wait_leader``, ``wait_isr``) are coroutines over an aiokafka client, as the cluster's
admin on a secured one; ``as_(user, shape)`` gives a user's connection settings in one
of the secured cluster's client shapes (scram, plain, mtls).

One cluster of each kind per session: the fixtures start it in a temporary state
directory on free ports and stop it after the last test that uses it, or use the
running one a state directory names (``DPSTREAM_KAFKA_CLUSTER_STATE`` for the plaintext
cluster, ``DPSTREAM_SECURE_KAFKA_CLUSTER_STATE`` for the secured one), which they leave
running. Without Java and Maven they skip; with ``DPSTREAM_REQUIRE_KAFKA=1`` (CI) they
fail."""
from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpstream.streams.worker.kafka import Kafka, running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "kafka.sh")
NODES = (1, 2, 3)
SHAPES = {"scram": "", "plain": ".plain", "mtls": ".mtls"}   # client config shape: file suffix
OFFSETS = (0, 100, 200, 300, 400)                            # the listeners' ports above the base


@dataclass(frozen=True)
class Node:
    """One line of ``kafka.sh cluster status``."""
    id: int
    running: str                 # yes (holds its client port), starting, no
    pid: int | None
    client: str                  # 127.0.0.1:PORT of its client listener (SASL_SSL SCRAM when secured)
    controller: str
    plain: str | None = None     # the secured cluster's PLAIN and mTLS listeners
    mtls: str | None = None


class ClusterError(RuntimeError):
    """A ``kafka.sh cluster`` command failed; the message ends with its stderr."""


class Cluster:
    """A cluster's state directory and the script's commands on it."""

    def __init__(self, state: Path):
        self.state = Path(state)
        env = (self.state / "cluster.env").read_text()
        self.secure = re.search(r"^secure=1$", env, re.M) is not None
        self.started = None          # the command lines seen while the fixture started it (CommandLines)
        self._bootstrap: str | None = None

    # ------------------------------------------------------------ the script
    @property
    def env(self) -> dict:
        """The environment in which scripts/kafka.sh means this cluster (its ports and
        whether it is secured come from its state directory)."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("KAFKA_SECURE", "KAFKA_CLUSTER_PORT", "DPSTREAM_KAFKA_CONFIG")}
        return {**env, "DPSTREAM_KAFKA_CLUSTER_STATE": str(self.state), "PYTHON": sys.executable}

    def script(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """``scripts/kafka.sh cluster ARGS``; ClusterError when it fails and ``check``."""
        done = subprocess.run([SCRIPT, "cluster", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise ClusterError(f"kafka.sh cluster {' '.join(args)} failed: {done.stderr[-2000:]}")
        return done

    @classmethod
    def start_new(cls, base: Path, *, secure: bool = False) -> "Cluster":
        """Start one in ``base``/cluster on free ports (``kafka.sh cluster start``)."""
        state = base / "cluster"
        env = {k: v for k, v in os.environ.items() if k != "DPSTREAM_KAFKA_CONFIG"}
        env.update(DPSTREAM_KAFKA_CLUSTER_STATE=str(state), PYTHON=sys.executable,
                   KAFKA_SECURE="1" if secure else "0", KAFKA_CLUSTER_PORT=str(free_base(secure)))
        done = subprocess.run([SCRIPT, "cluster", "start"], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise ClusterError(f"could not start a Kafka cluster: {done.stderr[-2000:]}")
        return cls(state)

    # ------------------------------------------------------------ the nodes
    def nodes(self) -> dict[int, Node]:
        """Each node's line of ``status``, by node id."""
        out = {}
        for line in self.script("status", check=False).stdout.splitlines():
            if line.startswith("node="):
                fields = dict(f.split("=", 1) for f in line.split())
                out[int(fields["node"])] = Node(
                    id=int(fields["node"]), running=fields["running"],
                    pid=None if fields["pid"] == "-" else int(fields["pid"]), client=fields["client"],
                    controller=fields["controller"], plain=fields.get("plain"), mtls=fields.get("mtls"))
        return out

    @property
    def bootstrap(self) -> str:
        """The three client listeners, comma-separated (a cluster keeps its ports)."""
        if self._bootstrap is None:
            self._bootstrap = ",".join(self.nodes()[n].client for n in NODES)
        return self._bootstrap

    def kill(self, node: int) -> None:
        """kill -9 of the node's JVM (it is gone when this returns)."""
        self.script("kill", str(node))

    def stop_node(self, node: int) -> None:
        """SIGTERM (a controlled shutdown), and wait until it has exited."""
        self.script("stop-node", str(node))

    def start_node(self, node: int) -> None:
        """Start it on its own storage; returns once it is back in the cluster."""
        self.script("start-node", str(node))

    def start(self) -> None:
        """Start the nodes that are not running; returns when all three answer."""
        self.script("start")

    def stop(self) -> None:
        self.script("stop", check=False)

    # ------------------------------------------------------------ clients
    def config(self, user: str, shape: str = "scram") -> str:
        """The secured cluster's client config of ``user`` in ``shape`` (scram, plain, mtls)."""
        return str(self.state / "clients" / f"{user}{SHAPES[shape]}.properties")

    def as_(self, user: str, shape: str = "scram") -> Kafka:
        return Kafka.from_settings(None, self.config(user, shape), environ={})

    def kafka(self, via: str | None = None) -> Kafka:
        """Connection settings as the cluster's admin (plaintext: anyone), to all three
        nodes or only to ``via`` (one node's address)."""
        if self.secure:
            return Kafka.from_settings(via, self.config("admin"), environ={})
        return Kafka(via or self.bootstrap)

    def passwords(self) -> list[str]:
        """Every SASL password of the client configs (SCRAM and PLAIN)."""
        return [line.split("=", 1)[1] for path in (self.state / "clients").glob("*.properties")
                for line in path.read_text().splitlines() if line.startswith("sasl.password=")]

    # ------------------------------------------------------------ metadata
    async def brokers(self, via: str | None = None) -> set[int]:
        """The live brokers a metadata answer lists: the answer of ``via`` (one node's
        address) itself when given (the client's first request goes to its bootstrap
        address), else of any node."""
        from aiokafka.client import AIOKafkaClient
        client = AIOKafkaClient(**self.kafka(via).client_args(), request_timeout_ms=10000)
        try:
            await client.bootstrap()
            return {b.nodeId for b in client.cluster.brokers()}
        finally:
            await client.close()

    async def topics(self) -> set[str]:
        async with running(self.kafka().admin(request_timeout_ms=10000)) as admin:
            return set(await admin.list_topics())

    async def create_topic(self, name: str, partitions: int = 1, replication: int = 3) -> None:
        from aiokafka.admin import NewTopic
        async with running(self.kafka().admin(request_timeout_ms=10000)) as admin:
            await admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication)])

    async def partitions(self, topic: str) -> dict[int, dict]:
        """The topic's partitions as a metadata answer gives them (``leader``, ``replicas``,
        ``isr``), by partition; a node that is down is skipped for a live one."""
        async with running(self.kafka().admin(request_timeout_ms=10000)) as admin:
            (described,) = await admin.describe_topics([topic])
        return {p["partition"]: p for p in described["partitions"]}

    async def leader(self, topic: str, partition: int) -> int:
        """The node leading the partition (-1: none)."""
        return (await self.partitions(topic))[partition]["leader"]

    async def isr(self, topic: str, partition: int) -> set[int]:
        return set((await self.partitions(topic))[partition]["isr"])

    async def wait_partition(self, topic: str, partition: int, holds, *, what: str = "the condition",
                             timeout: float = 60) -> dict:
        """The partition (``partitions``) once ``holds(partition)`` is true, asked again every
        0.5 s (a node that is down, or an answer that fails, is asked past);
        TimeoutError naming ``what`` and the last answer after ``timeout`` s."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                last = (await self.partitions(topic))[partition]
                if holds(last):
                    return last
            except Exception as err:           # noqa: BLE001 - a node going down: asked again
                last = repr(err)
            await asyncio.sleep(0.5)
        raise TimeoutError(f"{topic}[{partition}]: no {what} within {timeout} s (last: {last})")

    async def wait_leader(self, topic: str, partition: int, *, not_in: set[int] = frozenset(),
                          timeout: float = 60) -> int:
        """The partition's leader once it is one not in ``not_in`` (a new election)."""
        found = await self.wait_partition(topic, partition, lambda p: p["leader"] >= 0 and p["leader"] not in not_in,
                                          what=f"leader other than {sorted(not_in)}", timeout=timeout)
        return found["leader"]

    async def wait_isr(self, topic: str, partition: int, nodes: set[int], *, timeout: float = 90) -> set[int]:
        """The partition's ISR once it holds every node of ``nodes``."""
        found = await self.wait_partition(topic, partition, lambda p: nodes <= set(p["isr"]),
                                          what=f"ISR with {sorted(nodes)}", timeout=timeout)
        return set(found["isr"])


def free_base(secure: bool) -> int:
    """A port base whose every cluster port (base + offset + node - 1) is free now."""
    offsets = OFFSETS if secure else OFFSETS[:2]
    for _ in range(200):
        base = random.randrange(20000, 60000)
        if all(_free(base + o + n) for o in offsets for n in range(3)):
            return base
    raise ClusterError("no free block of ports for a cluster")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# ---------------------------------------------------------------- the session fixtures
_SESSION: dict[bool, Cluster | str] = {}      # one per kind: the cluster, or why there is none


def _session_cluster(request, tmp_path_factory, secure: bool) -> Cluster:
    """The session's cluster of that kind (secured or not), started once however many
    modules import the fixtures, stopped at the end of the session if started here."""
    if secure not in _SESSION:
        _SESSION[secure] = _given(secure) or _started(request, tmp_path_factory, secure)
    found = _SESSION[secure]
    if isinstance(found, str):
        if os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1":
            pytest.fail(found)
        pytest.skip(found)
    return found


def _given(secure: bool) -> Cluster | None:
    given = os.environ.get("DPSTREAM_SECURE_KAFKA_CLUSTER_STATE" if secure else "DPSTREAM_KAFKA_CLUSTER_STATE")
    if not given or not (Path(given) / "cluster.env").exists():
        return None
    cluster = Cluster(Path(given))
    if cluster.secure != secure or any(n.running != "yes" for n in cluster.nodes().values()):
        return None
    return cluster


def _started(request, tmp_path_factory, secure: bool) -> Cluster | str:
    from .secure_broker import CommandLines
    try:
        with CommandLines() as seen:
            cluster = Cluster.start_new(tmp_path_factory.mktemp("secure-cluster" if secure else "cluster"),
                                        secure=secure)
    except (ClusterError, subprocess.TimeoutExpired) as err:
        return str(err)
    cluster.started = seen                 # command lines seen while it started
    request.config.add_cleanup(cluster.stop)
    users = [item.nodeid for item in request.session.items if request.fixturename in item.fixturenames]
    if users:
        request.config.pluginmanager.register(_StopAfter(cluster, users[-1]))
    return cluster


class _StopAfter:
    """Stops a cluster the fixture started once the last test of the session that uses
    it has finished (the session's end may be long after): three idle nodes take about
    a fifth of a core here, which every later test would pay for."""

    def __init__(self, cluster: Cluster, nodeid: str):
        self.cluster, self.nodeid = cluster, nodeid

    def pytest_runtest_logfinish(self, nodeid, location):
        if nodeid == self.nodeid:
            self.cluster.stop()


@pytest.fixture(scope="session")
def kafka_cluster(request, tmp_path_factory) -> Cluster:
    """A plaintext three-node cluster (``scripts/kafka.sh cluster start``)."""
    return _session_cluster(request, tmp_path_factory, secure=False)


@pytest.fixture(scope="session")
def secured_cluster(request, tmp_path_factory) -> Cluster:
    """A secured three-node cluster (``KAFKA_SECURE=1 scripts/kafka.sh cluster start``):
    SCRAM, PLAIN and mTLS client listeners, ACLs, the users of scripts/kafka.sh."""
    return _session_cluster(request, tmp_path_factory, secure=True)
