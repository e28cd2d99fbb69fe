"""The faust agents in faust's own test harness (agent.test_context(), no broker):
the same runtime-agnostic agents, driven through faust streams, tables and events."""
import asyncio
import json

import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.app import make_app

MODEL = {"type": "model", "model_id": "w1", "dimension": 10,
         "budget": {"epsilon": 100.0, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 50, "K": 5, "L": 2.0}}


@pytest.fixture
def app_and_outputs():
    collected = []

    async def collect(topic, key, value):
        collected.append((topic, key, value))

    app = make_app(broker="127.0.0.1:1", rng=KeyedRandomness(b"faust-agent-tests-key-0000000000"),
                   emit_override=collect, app_id="dpstream-test")
    app.finalize()
    app.conf.store = "memory://"
    app.flow_control.resume()
    return app, collected


async def test_sequencer_agent_forwards_valid_events_and_dead_letters_the_rest(app_and_outputs):
    app, out = app_and_outputs
    async with app.dpstream["sequencer"].test_context() as agent:
        await agent.put(key=b"w1", value=json.dumps(MODEL).encode())
        await agent.put(key=b"w1", value=json.dumps(
            {"type": "example", "model_id": "w1", "active": [1, 4], "y": 1}).encode())
        await agent.put(key=b"w1", value=b"{broken")
        await agent.put(key=b"w1", value=json.dumps(
            {"type": "query", "model_id": "w1", "active": [12]}).encode())
    topics = [t for t, _, _ in out]
    assert topics == ["model-events", "model-events", "rejected", "rejected"]
    assert out[1][2]["event"]["active"] == [1, 4] and out[1][1] == "w1"
    assert out[2][2]["reason"] == "malformed JSON" and "broken" not in json.dumps(out[2][2])
    assert "wrong dimension" in out[3][2]["reason"]


async def test_processor_agent_registers_predicts_and_charges(app_and_outputs):
    app, out = app_and_outputs
    events = [{"source": "models:0:0", "event": MODEL},
              {"source": "examples:0:0", "event": {"type": "example", "model_id": "w1",
                                                    "active": [2], "y": 1}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}}]
    async with app.dpstream["processor_agent"].test_context() as agent:
        for e in events:
            await agent.put(key=b"w1", value=json.dumps(e).encode())
        for _ in range(400):          # a registration is applied off the event loop: wait for it
            if sum(topic == "predictions" for topic, _, _ in out) >= 2:
                break
            await asyncio.sleep(0.05)
    by_topic = {}
    for topic, _, value in out:
        by_topic.setdefault(topic, []).append(value)
    assert [p["kind"] for p in by_topic["predictions"]] == ["example", "query"]   # re-delivery skipped
    assert by_topic["ledger"][0]["mechanism"] == "above_threshold"
    assert by_topic["predictions"][-1]["epsilon_spent"] == by_topic["ledger"][-1]["spent_epsilon"]
