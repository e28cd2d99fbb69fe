"""Models whose privacy unit is a person, on a real broker: the worker's outputs equal the
embedded runtime's event for event, replay checks the bound, no ID reaches any topic (the
log and the changelogs included), and after a kill -9 the restarted worker restores every
person's record from its changelog, so nobody gets past the bound."""
import asyncio
import json
from urllib.request import urlopen

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.cli.commands import _export_kafka
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.tools.replay import replay
from dpstream.streams.worker.kafka import Kafka

from .kafka_helpers import KEY_HEX, Worker, per_model, produce, read_all
from .test_kafka_pipeline import free_port

pytestmark = pytest.mark.kafka

RNG = KeyedRandomness(bytes.fromhex(KEY_HEX))
PEOPLE = [f"KFK-person-{i:02d}" for i in range(11)]
MODELS = [
    {"model_id": "per-ftrl", "budget": {"epsilon": 4.0, "delta": 1e-6},
     "params": {"kind": "dp_ftrl", "horizon": 400, "block": 4},
     "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
                  {"type": "categorical", "name": "channel", "vocabulary": ["web", "app"]}],
     "privacy_unit": {"id_field": "customer_id", "max_contributions": 3}},
    {"model_id": "per-winnow", "dimension": 20, "budget": {"epsilon": 1e6, "delta": 1e-6},
     "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 100, "K": 30, "L": 2.0},
     "privacy_unit": {"max_contributions": 2}},
]


def examples(a: int, b: int) -> list[dict]:
    """Examples a..b-1 of both models; person i % 11 (every person past the bound early)."""
    out = []
    s = RNG.stream("kafka-privacy-unit", "rows", 0)
    rows = s.uniform(2 * b).reshape(b, 2)
    for i in range(a, b):
        amount, c = rows[i]
        out.append({"model_id": "per-ftrl", "features": {"amount": round(float(amount) * 100, 2),
                                                         "channel": "web" if c < 0.5 else "app",
                                                         "customer_id": PEOPLE[i % 11]},
                    "y": 1 if amount > 0.5 else -1})
        act = sorted({i % 20, (i * 7) % 20})
        out.append({"model_id": "per-winnow", "active": act, "y": 1 if min(act) < 3 else -1,
                    "privacy_id": PEOPLE[(i * 3) % 11]})
    return out


def queries(n: int = 20) -> list[dict]:
    return [q for i in range(n) for q in (
        {"model_id": "per-ftrl", "features": {"amount": 5.0 * i, "channel": "app"}, "query_id": f"f{i}"},
        {"model_id": "per-winnow", "active": [i % 20], "query_id": f"w{i}"})]


def embedded(parts: list[list[dict]]) -> dict:
    rt = EmbeddedRuntime(RNG)

    async def go():
        for p in MODELS:
            await rt.feed("models", p)
        for part in parts:
            for e in part:
                await rt.feed("examples" if "y" in e else "queries", e)
    asyncio.run(go())
    return rt.outputs


async def _feed(bootstrap, prefix, topic, payloads, outputs_so_far):
    await produce(bootstrap, prefix + topic, payloads)
    return await read_all(bootstrap, prefix + "predictions", until=outputs_so_far + len(payloads), timeout=180)


async def _every_record(bootstrap: str, prefix: str) -> bytes:
    """Keys and values of every topic of this test's deployment but the examples it was sent
    (the input holds the IDs): the log, the changelogs, the outputs, the dead letters."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix) and t != prefix + "examples"]
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(*names, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    chunks = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=3000)
            if not batch:
                break
            chunks += [(r.key or b"") + b" " + (r.value or b"") for rs in batch.values() for r in rs]
    finally:
        await consumer.stop()
    assert any(b"changelog" in n.encode() for n in names)
    return b"\n".join(chunks)


def _compare(preds, ledger, expected):
    assert per_model(preds) == per_model(expected["predictions"])
    assert per_model(ledger) == per_model(expected["ledger"])


def test_a_bounded_model_on_the_worker_equals_the_embedded_runtime_and_keeps_the_ids_in(
        kafka_bootstrap, topic_prefix, tmp_path, capsys):
    prefix = topic_prefix + "-"
    port = free_port()
    ex, qs = examples(0, 150), queries()
    worker = Worker(kafka_bootstrap, prefix, tmp_path, web_port=port).start()
    try:
        async def go():
            await produce(kafka_bootstrap, prefix + "models", MODELS)
            await read_all(kafka_bootstrap, prefix + "model-events", until=len(MODELS), timeout=60)
            await _feed(kafka_bootstrap, prefix, "examples", ex, 0)
            preds = await _feed(kafka_bootstrap, prefix, "queries", qs, len(ex))
            return preds, await read_all(kafka_bootstrap, prefix + "ledger", idle=3)
        preds, ledger = asyncio.run(go())
        status = json.loads(urlopen(f"http://127.0.0.1:{port}/status/", timeout=10).read())
        metrics = urlopen(f"http://127.0.0.1:{port}/metrics/", timeout=10).read().decode()
    finally:
        worker.stop()
    _compare(preds, ledger, embedded([ex, qs]))
    assert {status["models"][m]["privacy_unit"] for m in ("per-ftrl", "per-winnow")} == \
        {"person<=3/epoch,<=1 epochs", "person<=2/epoch,<=1 epochs"}
    from dpstream.streams.cli.commands import main
    assert main(["models", "show", "per-ftrl", "--bootstrap-server", kafka_bootstrap, "--prefix", prefix]) == 0
    shown = capsys.readouterr().out
    assert "privacy unit: one person (the ID in the raw feature 'customer_id'), at most 3 examples" in shown
    everything = asyncio.run(_every_record(kafka_bootstrap, prefix)).decode("utf-8", "replace")
    everything += json.dumps(status) + metrics + worker.log.read_text(errors="replace")
    for person in PEOPLE:
        assert person not in everything, person
    log, outputs = asyncio.run(_export_kafka(Kafka(kafka_bootstrap), prefix, 3.0))
    report = asyncio.run(replay(RNG, log, outputs))
    assert report.ok, report.summary()
    assert report.units.models == 2 and report.units.examples == len(ex)


def test_after_a_kill_9_the_restarted_worker_keeps_every_persons_record(kafka_bootstrap, topic_prefix,
                                                                       tmp_path):
    """Every person reached the bound in the first part; the worker is killed and a new one
    (another data directory: its state comes from the changelogs) takes the rest. Had it
    lost the persons' records, it would admit their next examples, and the releases (and
    the winnow's updates) would differ from the embedded runtime's over the whole stream."""
    prefix = topic_prefix + "-"
    first, rest, qs = examples(0, 120), examples(120, 240), queries(10)
    worker = Worker(kafka_bootstrap, prefix, tmp_path, "first").start()
    restarted = None
    try:
        async def part_one():
            await produce(kafka_bootstrap, prefix + "models", MODELS)
            await read_all(kafka_bootstrap, prefix + "model-events", until=len(MODELS), timeout=60)
            await _feed(kafka_bootstrap, prefix, "examples", first, 0)
        asyncio.run(part_one())
        worker.kill()
        restarted = Worker(kafka_bootstrap, prefix, tmp_path, "second").start()

        async def part_two():
            await _feed(kafka_bootstrap, prefix, "examples", rest, len(first))
            preds = await _feed(kafka_bootstrap, prefix, "queries", qs, len(first) + len(rest))
            return preds, await read_all(kafka_bootstrap, prefix + "ledger", idle=3)
        preds, ledger = asyncio.run(part_two())
    finally:
        worker.kill()
        if restarted is not None:
            restarted.stop()
    expected = embedded([first, rest, qs])
    _compare(preds, ledger, expected)
    # the comparison has power: a runtime that lost the persons' records at the restart
    # admits their later examples, and its outputs differ
    assert per_model(forgetful(first, rest + qs)["predictions"]) != per_model(expected["predictions"])


def forgetful(first: list[dict], rest: list[dict]) -> dict:
    """The embedded runtime over ``first``, then with every person's record deleted, over
    ``rest``: what a restart that lost them would publish."""
    rt = EmbeddedRuntime(RNG)

    async def go(part):
        for e in part:
            await rt.feed("examples" if "y" in e else "queries", e)
    asyncio.run(go([]))
    for p in MODELS:
        asyncio.run(rt.feed("models", p))
    asyncio.run(go(first))
    for key in [k for k in rt.state if "/unit/" in k]:
        del rt.state[key]
    asyncio.run(go(rest))
    return rt.outputs
