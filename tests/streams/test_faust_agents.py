"""The worker's faust app without a broker: the bulk path's ``apply_fetch`` (what the
worker runs on every fetch) over faust's own tables in memory, with outputs collected
instead of produced."""
import asyncio
import json

import pytest

from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.app import WorkerApp
from dpstream.streams.kafka import Kafka

MODEL = {"type": "model", "model_id": "w1", "dimension": 10,
         "budget": {"epsilon": 100.0, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 50, "K": 5, "L": 2.0}}


@pytest.fixture
def worker():
    collected = []

    async def collect(topic, key, value):
        collected.append((topic, key, value))

    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"faust-agent-tests-key-0000000000"),
                  emit_override=collect, app_id="dpstream-test")
    w.app.finalize()
    w.app.conf.store = "memory://"
    return w, collected


def record(topic, offset, value, key=b"w1"):
    return RawRecord(topic, 0, offset, key, json.dumps(value).encode() if isinstance(value, dict) else value)


async def test_the_bulk_path_sequences_valid_inputs_and_dead_letters_the_rest(worker):
    w, out = worker
    assert await w.apply_fetch({
        "models": [record("models", 0, MODEL)],
        "examples": [record("examples", 0, {"model_id": "w1", "active": [1, 4], "y": 1}),
                     record("examples", 1, b"{broken")],
        "queries": [record("queries", 0, {"model_id": "w1", "active": [12]})]})
    topics = [t for t, _, _ in out]
    assert topics == ["model-events", "model-events", "rejected", "rejected"]
    assert out[1][2]["event"]["active"] == [1, 4] and out[1][1] == "w1"
    assert out[2][2]["reason"] == "malformed JSON" and "broken" not in json.dumps(out[2][2])
    assert "wrong dimension" in out[3][2]["reason"]
    assert w.sequencer_view.get("src/examples:0") == 1      # state written through the table


async def test_the_bulk_path_applies_the_log_registers_predicts_and_charges(worker):
    w, out = worker
    events = [{"source": "models:0:0", "event": MODEL},
              {"source": "examples:0:0", "event": {"type": "example", "model_id": "w1",
                                                    "active": [2], "y": 1}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}}]
    assert await w.apply_fetch({"model-events": [record("model-events", i, e) for i, e in enumerate(events)]})
    await w.settled()                               # outputs durable, then the state written
    by_topic = {}
    for topic, _, value in out:
        by_topic.setdefault(topic, []).append(value)
    assert [p["kind"] for p in by_topic["predictions"]] == ["example", "query"]   # re-delivery skipped
    assert by_topic["ledger"][0]["mechanism"] == "above_threshold"
    assert by_topic["predictions"][-1]["epsilon_spent"] == by_topic["ledger"][-1]["spent_epsilon"]
    assert w.model_view.get("log/0") == 4           # the processor's next log offset
    assert w.status()["models"]["w1"]["events"] == 3      # the registration, the example, the query


class Gated:
    """An emitter (the ``many`` contract of agents/records.py) whose ``model-events``
    appends are durable at once, at consecutive offsets of partition 0, and whose
    predictions wait for ``gate``; ``fail`` makes the next predictions delivery fail."""

    def __init__(self):
        self.items, self.gate, self.next_offset, self.fail = [], asyncio.Event(), 0, 0

    async def __call__(self, topic, key, value):
        (future, _), = await self.many([(topic, key, value)])
        return future

    async def many(self, items):
        from types import SimpleNamespace
        self.items.extend(items)
        out = []
        for topic in dict.fromkeys(t for t, _, _ in items):
            indices = [i for i, (t, _, _) in enumerate(items) if t == topic]
            future = asyncio.get_running_loop().create_future()
            if topic == "predictions":
                failing, self.fail = self.fail > 0, max(0, self.fail - 1)
                asyncio.ensure_future(self._later(future, failing))
            else:
                future.set_result(SimpleNamespace(partition=0, offset=self.next_offset))
            if topic == "model-events":
                self.next_offset += len(indices)
            out.append((future, indices))
        return out

    async def _later(self, future, failing):
        await self.gate.wait()
        if failing:
            future.set_exception(ConnectionError("delivery failed"))
        else:
            future.set_result(None)

    def predictions(self):
        return [v for t, _, v in self.items if t == "predictions"]


@pytest.fixture
def gated(monkeypatch):
    emit = Gated()
    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"faust-agent-tests-key-0000000000"),
                  emit_override=emit, app_id="dpstream-test")
    w.app.finalize()
    w.app.conf.store = "memory://"
    monkeypatch.setattr(w, "assigned_log_partitions", lambda: {0})    # no broker, no assignment
    monkeypatch.setattr(type(w.app), "consumer_generation_id", 1, raising=False)
    return w, emit


def example(offset, y=1):
    return record("examples", offset, {"model_id": "w1", "active": [2], "y": y})


async def test_the_next_batch_is_sequenced_while_outputs_settle_but_applied_only_after(gated):
    w, emit = gated
    emit.gate.set()
    assert await w.apply_fetch({"models": [record("models", 0, MODEL)]})
    await w.settled()
    emit.gate.clear()
    assert await w.apply_fetch({"examples": [example(0)]})
    assert len(emit.predictions()) == 1 and w.model_view.get("log/0") == 1   # sent, not settled
    second = asyncio.ensure_future(w.apply_fetch({"examples": [example(1, -1)]}))
    await asyncio.sleep(0.1)
    appended = [v["source"] for t, _, v in emit.items if t == "model-events"]
    assert appended == ["models:0:0", "examples:0:0", "examples:0:1"]      # sequenced meanwhile
    assert not second.done() and len(emit.predictions()) == 1              # not applied yet
    assert w.sequencer_view.get("src/examples:0") == 1
    emit.gate.set()
    assert await second
    await w.settled()
    assert [p["seq"] for p in emit.predictions()] == [1, 2]
    assert w.model_view.get("log/0") == 3


async def test_a_batch_whose_outputs_fail_is_applied_again_with_the_same_outputs(gated, monkeypatch):
    import dpstream.streams.app as app_module
    monkeypatch.setattr(app_module, "RETRY_PAUSE", 0.01)
    w, emit = gated
    emit.gate.set()
    assert await w.apply_fetch({"models": [record("models", 0, MODEL)]})
    emit.fail = 1
    assert await w.apply_fetch({"examples": [example(0), example(1, -1)]})
    await w.settled()
    first, again = emit.predictions()[:2], emit.predictions()[2:]
    assert len(first) == 2 and again == first          # re-applied: identical outputs
    assert w.model_view.get("log/0") == 3 and w.status()["models"]["w1"]["events"] == 3
