"""The three-node cluster of ``scripts/kafka.sh cluster`` (tests/streams/cluster.py): every
node answers with all three brokers, topics get three replicas and min ISR 2, a killed
partition leader is replaced while an acks=all producer goes on and rejoins the ISR
when restarted, and a state directory others may open is refused; on the secured
cluster each client shape (SCRAM, PLAIN, mTLS) logs in as its own user, and ``rotate``
revokes all three of a user's old credentials."""
import asyncio
import json
import os
import shutil
import subprocess
import sys

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAuthorizationFailedError

from dpstream.streams.worker.kafka import Kafka, running

from .cluster import NODES, SCRIPT, SHAPES, kafka_cluster, secured_cluster  # noqa: F401  (pytest fixtures)
from .kafka_helpers import KEY_HEX, ROOT, client_args, read_all

pytestmark = pytest.mark.kafka


async def test_each_node_answers_with_all_three_brokers(kafka_cluster):
    nodes = kafka_cluster.nodes()
    assert sorted(nodes) == list(NODES) and all(n.running == "yes" for n in nodes.values())
    assert len({n.pid for n in nodes.values()}) == 3
    for node in nodes.values():
        assert await kafka_cluster.brokers(via=node.client) == set(NODES), node


async def test_topics_get_three_replicas_and_min_insync_two_by_default(kafka_cluster, topic_prefix):
    """Created with replication 3, and made by the broker's defaults (a producer's first
    write auto-creates it on the plaintext cluster): three replicas, all in sync, and
    min.insync.replicas 2 from the cluster's configuration."""
    made = f"{topic_prefix}-made"
    await kafka_cluster.create_topic(made, partitions=2)
    auto = f"{topic_prefix}-auto"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(auto, b"first")
    finally:
        await producer.stop()
    for topic in (made, auto):
        partitions = await kafka_cluster.partitions(topic)
        for p in partitions.values():
            assert sorted(p["replicas"]) == [1, 2, 3], (topic, p)
        await kafka_cluster.wait_isr(topic, 0, set(NODES))
    async with running(kafka_cluster.kafka().admin()) as admin:
        (answer,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, made)])
    configs = {c[0]: c[1] for c in answer.resources[0][4]}
    assert configs["min.insync.replicas"] == "2" and configs["unclean.leader.election.enable"] == "false"


async def test_a_killed_leader_is_replaced_while_acks_all_writes_go_on_and_rejoins_the_isr(kafka_cluster,
                                                                                           topic_prefix):
    """kill -9 of the node leading a partition: another in-sync replica takes over, an
    idempotent acks=all producer that never stopped sending gets every record acked, and
    the killed node, restarted on its own storage, rejoins the partition's ISR. The log
    then holds each acked record exactly once, in order."""
    topic = f"{topic_prefix}-failover"
    await kafka_cluster.create_topic(topic, partitions=1)
    await kafka_cluster.wait_isr(topic, 0, set(NODES))
    acked: list[int] = []
    stop = asyncio.Event()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, acks="all", enable_idempotence=True)
    await producer.start()

    async def produce():
        while not stop.is_set():
            await producer.send_and_wait(topic, json.dumps(len(acked)).encode(), partition=0)
            acked.append(len(acked))
            await asyncio.sleep(0.01)

    async def acked_more(than: int, timeout: float = 90):
        deadline = asyncio.get_running_loop().time() + timeout
        while len(acked) < than:
            assert not sending.done(), sending.exception()
            assert asyncio.get_running_loop().time() < deadline, f"only {len(acked)} records acked"
            await asyncio.sleep(0.1)

    sending = asyncio.create_task(produce())
    try:
        await acked_more(30)
        leader = await kafka_cluster.leader(topic, 0)
        kafka_cluster.kill(leader)
        assert kafka_cluster.nodes()[leader].running == "no"
        again = kafka_cluster.script("kill", str(leader))                  # idempotent
        assert again.stdout == f"kafka.sh: node {leader} is not running\n"
        before = len(acked)
        elected = await kafka_cluster.wait_partition(topic, 0, lambda p: p["leader"] not in (-1, leader),
                                                     what="new leader")
        # one change: the new leader, and the killed node out of the ISR (fenced by the controller)
        assert elected["leader"] in set(NODES) - {leader} and leader not in elected["isr"], elected
        await acked_more(before + 30)            # writes go on with two replicas (min ISR 2)
        await asyncio.to_thread(kafka_cluster.start_node, leader)
        pid = kafka_cluster.nodes()[leader].pid
        await asyncio.to_thread(kafka_cluster.start_node, leader)          # idempotent: the same JVM
        assert kafka_cluster.nodes()[leader].pid == pid
        await kafka_cluster.wait_isr(topic, 0, set(NODES))
        await acked_more(len(acked) + 10)
    finally:
        stop.set()
        try:
            await sending
        finally:
            await producer.stop()
    values = await read_all(kafka_cluster.bootstrap, topic, until=len(acked), timeout=60)
    assert values == list(range(len(acked)))


def test_a_cluster_state_directory_others_may_open_is_refused_before_anything_runs(tmp_path):
    """The cluster's state directory is judged as the broker's is (kafka.sh safe_dir):
    one others may read, and one that is not a cluster's, are refused in one line."""
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o755)
    opened.chmod(0o755)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / "notes").write_text("mine\n")
    env = {**os.environ, "PYTHON": sys.executable}
    for state, verb, said in ((opened, "start", f"refusing the cluster's state directory {opened} (owner uid"),
                              (other, "start", f"{other} is not empty and holds no cluster"),
                              (other, "reset", f"{other} holds no cluster (no cluster.env): not deleting it")):
        done = subprocess.run([SCRIPT, "cluster", verb], env={**env, "DPSTREAM_KAFKA_CLUSTER_STATE": str(state)},
                              capture_output=True, text=True, timeout=60)
        lines = done.stderr.splitlines()
        assert done.returncode == 1 and len(lines) == 1 and said in lines[0], done.stderr
    assert (other / "notes").read_text() == "mine\n" and not (opened / "cluster.env").exists()


# ---------------------------------------------------------------- the secured cluster
def dpstream(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSTREAM_SECRET_KEY": KEY_HEX}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "dpstream.streams.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


async def write(kafka: Kafka, topic: str) -> str:
    """One acks=all write as ``kafka``'s principal: "ok", or the refusal's name."""
    producer = AIOKafkaProducer(**client_args(kafka), acks="all", request_timeout_ms=15000)
    await producer.start()
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, b"x"), 30)
        return "ok"
    except TopicAuthorizationFailedError as err:
        return type(err).__name__
    finally:
        await producer.stop()


async def test_each_client_shape_logs_in_as_its_own_user(secured_cluster):
    """The producer's ACLs (``dpstream acls --role producer --apply``, as the admin) allow
    User:producer to write ``examples``: through each shape of the producer's client
    config (SCRAM, PLAIN, a client certificate mapped to User:producer) the write is
    taken, and through each shape of the consumer's it is refused, so each shape's
    principal is its user. No password was on a command line while the cluster started."""
    if secured_cluster.started:                # started by the fixture, not a running one reused
        seen = secured_cluster.started.seen
        assert any("kafka.Kafka" in line for line in seen)
        assert not [p for p in secured_cluster.passwords() if any(p in line for line in seen)]
    topic = "examples"
    done = dpstream("acls", "--role", "producer", "--apply", "--client-config", secured_cluster.config("admin"))
    assert done.returncode == 0 and "ACLs created" in done.stderr, done.stderr
    if topic not in await secured_cluster.topics():
        await secured_cluster.create_topic(topic)
    for shape in SHAPES:
        assert await write(secured_cluster.as_("producer", shape), topic) == "ok", shape
        assert await write(secured_cluster.as_("consumer", shape), topic) == "TopicAuthorizationFailedError", shape


async def logs_in(kafka: Kafka) -> bool:
    from aiokafka.client import AIOKafkaClient
    client = AIOKafkaClient(**kafka.client_args(), request_timeout_ms=5000)
    try:
        await asyncio.wait_for(client.bootstrap(), 20)
        return True
    except Exception:                 # noqa: BLE001 - refused, whichever way
        return False
    finally:
        await client.close()


async def test_rotate_refuses_all_three_old_credentials_and_takes_the_new(secured_cluster, tmp_path):
    """``kafka.sh cluster rotate``: the SCRAM password changes at once, the PLAIN password
    and the client certificate (a new tag in its subject) with a rolling restart; after
    it, the user's old configs of every shape are refused and the new ones log in."""
    user = "auditor"
    old = tmp_path / "old"
    old.mkdir(mode=0o700)
    clients = secured_cluster.state / "clients"
    for path in clients.glob(f"{user}.*"):
        (old / path.name).write_text(path.read_text().replace(str(clients), str(old)))
        (old / path.name).chmod(0o600)
    kept = {shape: Kafka.from_settings(None, str(old / f"{user}{suffix}.properties"), environ={})
            for shape, suffix in SHAPES.items()}
    assert [await logs_in(k) for k in kept.values()] == [True, True, True]
    done = await asyncio.to_thread(secured_cluster.script, "rotate", user)
    assert "new credentials for auditor" in done.stdout, done.stderr
    assert [await logs_in(k) for k in kept.values()] == [False, False, False]
    assert [await logs_in(secured_cluster.as_(user, shape)) for shape in SHAPES] == [True, True, True]
    assert all(n.running == "yes" for n in secured_cluster.nodes().values())
    shutil.rmtree(old)
