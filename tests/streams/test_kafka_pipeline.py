"""End to end on a real broker: the worker's outputs equal the embedded runtime's,
event for event; kill -9 and restart loses nothing and changes nothing; two workers
give the single-worker result; bad input on every topic is dead-lettered."""
import asyncio
import json
import socket
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.cli.commands import _export_kafka
from dpstream.streams.worker.kafka import Kafka
from dpstream.streams.tools.replay import replay, verify_public

from .kafka_helpers import KEY_HEX, Worker, per_model, produce, read_all
from .reference import assert_same_as_embedded, expected
from .workload import examples, models, queries

pytestmark = pytest.mark.kafka


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def feed_in_phases(bootstrap, prefix, on_examples=None):
    await produce(bootstrap, prefix + "models", models())
    await read_all(bootstrap, prefix + "model-events", until=len(models()), timeout=60)
    ex = examples()
    await produce(bootstrap, prefix + "examples", ex)
    if on_examples is not None:
        await on_examples()
    await read_all(bootstrap, prefix + "predictions", until=len(ex), timeout=180)
    await produce(bootstrap, prefix + "queries", queries())
    total = len(ex) + len(queries())
    preds = await read_all(bootstrap, prefix + "predictions", until=total, timeout=180)
    ledger = await read_all(bootstrap, prefix + "ledger", idle=3)
    releases = await read_all(bootstrap, prefix + "releases", idle=2)
    return preds, ledger, releases


async def uncommitted(bootstrap: str, prefix: str, wait: float = 30.0) -> dict:
    """The worker group's input and log partitions whose committed offset is still below
    the end of the log after ``wait`` seconds (empty once the worker acked everything)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await admin.start()
    await reader.start()
    try:
        topics = [prefix + t for t in ("models", "examples", "queries", "model-events")]
        tps = [TopicPartition(t["topic"], p["partition"])
               for t in await admin.describe_topics(topics) for p in t["partitions"]]
        ends = await reader.end_offsets(tps)
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            committed = await admin.list_consumer_group_offsets(f"{prefix}app", partitions=tps)
            behind = {tp: (committed[tp].offset if tp in committed else None, ends[tp])
                      for tp in tps if ends[tp] > 0 and
                      (tp not in committed or committed[tp].offset < ends[tp])}
            if not behind or asyncio.get_running_loop().time() > deadline:
                return behind
            await asyncio.sleep(1.0)
    finally:
        await reader.stop()
        await admin.close()


@pytest.mark.parametrize("consumer", ["in-loop", "thread"])
def test_worker_outputs_equal_the_embedded_runtime_event_for_event(kafka_bootstrap, topic_prefix, tmp_path,
                                                                   consumer):
    """With faust's consumer on the worker's loop (the default, streams/worker/faust_seam.py) and in
    its own thread (--consumer-thread)."""
    args = ("--consumer-thread",) if consumer == "thread" else ()
    worker = Worker(kafka_bootstrap, topic_prefix + "-", tmp_path, args=args).start()
    try:
        assert (b"InLoopConsumerThread" in worker.log.read_bytes()) == (consumer == "in-loop")
        preds, ledger, releases = asyncio.run(feed_in_phases(kafka_bootstrap, topic_prefix + "-"))
        # every input and log record handled is acked: the group's offsets reach the ends
        assert asyncio.run(uncommitted(kafka_bootstrap, topic_prefix + "-")) == {}
    finally:
        worker.stop()
    assert len(preds) >= len(examples()) + len(queries())
    assert_same_as_embedded(preds, ledger, releases)
    # the audit path: export the topics, recompute every release with the key
    log, outputs = asyncio.run(_export_kafka(Kafka(kafka_bootstrap), topic_prefix + "-", 3.0))
    report = asyncio.run(replay(KeyedRandomness(bytes.fromhex(KEY_HEX)), log, outputs))
    assert report.ok and report.topics["predictions"].matched == len(examples()) + len(queries())
    assert verify_public(outputs) == []          # and the keyless checks raise no false alarm


def test_kill_9_mid_stream_then_restart_loses_and_changes_nothing(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    worker = Worker(kafka_bootstrap, prefix, tmp_path, "first").start()
    restarted = []

    async def crash_mid_stream():
        await read_all(kafka_bootstrap, prefix + "predictions", until=800, timeout=120, idle=0.5)
        worker.kill()                                         # SIGKILL, no clean shutdown
        restarted.append(Worker(kafka_bootstrap, prefix, tmp_path, "second").start())

    try:
        preds, ledger, releases = asyncio.run(feed_in_phases(kafka_bootstrap, prefix, crash_mid_stream))
    finally:
        worker.kill()
        for w in restarted:
            w.stop()
    assert restarted, "the worker was not restarted"
    assert_same_as_embedded(preds, ledger, releases)        # per_model rejects conflicting duplicates
    final = {e["model_id"]: e["spent_epsilon"] for e in sorted(ledger, key=lambda e: e["charges"])}
    exp = {e["model_id"]: e["spent_epsilon"] for e in sorted(expected()["ledger"], key=lambda e: e["charges"])}
    assert final == exp


def test_kill_9_inside_a_large_bulk_fetch_then_restart_changes_nothing(kafka_bootstrap, topic_prefix, tmp_path):
    """Every example is in the log before the worker that processes them starts, so it
    reads them in fetches of thousands of records (streams/worker/bulk.py, applied 500 at a
    time) and is killed inside the first ones; the restarted worker's outputs equal the
    embedded runtime's."""
    prefix = topic_prefix + "-"
    registrar = Worker(kafka_bootstrap, prefix, tmp_path, "registrar").start()
    workers = [registrar]
    try:
        asyncio.run(produce(kafka_bootstrap, prefix + "models", models()))
        asyncio.run(read_all(kafka_bootstrap, prefix + "model-events", until=len(models()), timeout=60))
        registrar.stop()
        ex = examples()
        asyncio.run(produce(kafka_bootstrap, prefix + "examples", ex))
        first = Worker(kafka_bootstrap, prefix, tmp_path, "first").start()
        workers.append(first)
        asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=200, timeout=120, idle=0.2))
        first.kill()
        second = Worker(kafka_bootstrap, prefix, tmp_path, "second").start()
        workers.append(second)
        asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=len(ex), timeout=180))
        asyncio.run(produce(kafka_bootstrap, prefix + "queries", queries()))
        preds = asyncio.run(read_all(kafka_bootstrap, prefix + "predictions",
                                     until=len(ex) + len(queries()), timeout=180))
        ledger = asyncio.run(read_all(kafka_bootstrap, prefix + "ledger", idle=3))
        releases = asyncio.run(read_all(kafka_bootstrap, prefix + "releases", idle=2))
    finally:
        for w in workers:
            w.kill()
    assert_same_as_embedded(preds, ledger, releases)


def test_a_consumer_that_stops_delivering_does_not_stop_the_worker(kafka_bootstrap, topic_prefix, tmp_path):
    """faust's consumer is made to hand over nothing after 300 records (fault injection by
    the test harness, tests/streams/stalling_worker.py); the worker's tail check reads the
    rest from the log itself."""
    worker = Worker(kafka_bootstrap, topic_prefix + "-", tmp_path,
                    command=("-m", "tests.streams.stalling_worker", "300")).start()
    try:
        preds, ledger, releases = asyncio.run(feed_in_phases(kafka_bootstrap, topic_prefix + "-"))
    finally:
        worker.stop()
    assert_same_as_embedded(preds, ledger, releases)
    assert "applying them from the log" in worker.log.read_text()


def test_two_workers_one_stopped_mid_stream_give_the_single_worker_result(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    a = Worker(kafka_bootstrap, prefix, tmp_path, "a").start()
    b = Worker(kafka_bootstrap, prefix, tmp_path, "b").start()

    async def stop_one():
        await read_all(kafka_bootstrap, prefix + "predictions", until=600, timeout=120, idle=0.5)
        b.kill()

    try:
        preds, ledger, releases = asyncio.run(feed_in_phases(kafka_bootstrap, prefix, stop_one))
    finally:
        a.stop()
        b.kill()
    assert_same_as_embedded(preds, ledger, releases)


def test_bad_input_on_every_topic_is_rejected_and_the_worker_keeps_going(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    port = free_port()
    worker = Worker(kafka_bootstrap, prefix, tmp_path, web_port=port).start()
    good = models()[0]
    bad = {
        "models": [b"{nope", {"model_id": "m", "dimension": -3},
                   {"model_id": "huge", "dimension": 200_000, "budget": {"epsilon": 1.0, "delta": 1e-6},
                    "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 100, "K": 5, "L": 2.0}}],
        "examples": [b"[1, 2", {"model_id": "fraud-a", "active": [99], "y": 1},
                     {"model_id": "fraud-a", "x": [float("nan")] * 30, "y": 1},
                     {"model_id": "ghost", "active": [1], "y": 1}, b"x" * 600_000,
                     b"[" * 50_000 + b"]" * 50_000,                         # issue 10's poison records
                     b'{"model_id": "fraud-a", "active": [1], "y": ' + b"9" * 5000 + b"}",
                     b'{"type": [1], "model_id": "fraud-a"}'],
        "queries": [b"\xff\xfe", {"model_id": "fraud-a", "x": [0.3] * 30},
                    {"model_id": "ghost", "active": [1]}],
    }

    async def go():
        await produce(kafka_bootstrap, prefix + "models", [good])
        await read_all(kafka_bootstrap, prefix + "model-events", until=1, timeout=60)
        for topic, payloads in bad.items():
            await produce(kafka_bootstrap, prefix + topic,
                          [p if isinstance(p, bytes) else json.dumps(p).encode() for p in payloads])
        await produce(kafka_bootstrap, prefix + "examples", [{"model_id": "fraud-a", "active": [1], "y": 1}])
        rejected = await read_all(kafka_bootstrap, prefix + "rejected", until=14, timeout=60)
        preds = await read_all(kafka_bootstrap, prefix + "predictions", until=1, timeout=60)
        return rejected, preds

    try:
        rejected, preds = asyncio.run(go())
        assert worker.proc.poll() is None, "the worker died on bad input"
        status = json.loads(urlopen(f"http://127.0.0.1:{port}/status/", timeout=10).read())
        metrics = urlopen(f"http://127.0.0.1:{port}/metrics/", timeout=10).read().decode()
        with pytest.raises(HTTPError):              # web_tables_enabled=False: no state over HTTP
            urlopen(f"http://127.0.0.1:{port}/table/model-state/", timeout=10)
    finally:
        worker.stop()
    model = status["models"]["fraud-a"]
    assert model["kind"] == "winnow" and model["events"] == 2 and model["spent_epsilon"] > 0
    assert "dpstream_rejected_total 14.0" in metrics
    assert 'dpstream_budget_spent_epsilon{model_id="fraud-a"}' in metrics
    for text in (json.dumps(status), metrics):     # counters only: no features, labels or keys
        assert "active" not in text and KEY_HEX not in text
    assert len(rejected) == 14 and len(preds) == 1     # the good example after them is answered
    reasons = " | ".join(r["reason"] for r in rejected)
    for expected_reason in ("malformed JSON", "wrong dimension", "NaN", "unknown model",
                            "oversized", "out of domain", "record limit", "nested too deeply",
                            "unknown event type"):
        assert expected_reason in reasons
    for r in rejected:
        assert set(r) == {"source", "reason"}
        assert "nan" not in r["reason"].replace("NaN", "") and "0.3" not in r["reason"]
