"""Re-applying an embedded run's ``model-events`` log in batches of any size."""
import asyncio
import json

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord


def apply_log(log, batch, rng):
    """Apply ``log`` (an EmbeddedRuntime's) with a fresh Processor, ``batch`` records at a
    time; returns (outputs in emit order as (topic, value), final state)."""
    out, state = [], {}

    async def emit(topic, key, value):
        out.append((topic, value))

    proc = Processor(rng, state, emit)
    records = [RawRecord("model-events", 0, r["offset"], r["value"]["event"]["model_id"].encode(),
                         json.dumps(r["value"]).encode()) for r in log]

    async def go():
        for a in range(0, len(records), batch):
            await proc.handle_batch(records[a:a + batch])
    asyncio.run(go())
    return out, state


def by_topic(out):
    """Outputs per topic (a batch delivers its ledger records first: order is per topic)."""
    return {t: [v for u, v in out if u == t] for t in ("ledger", "predictions", "rejected")}


def assert_batches_apply_as_one_at_a_time(log, rng, batches):
    """Break one example of ``log`` (an index out of range, as a writer behind the
    sequencer's back could), then check that applying the log ``batch`` records at a
    time, for each of ``batches``, gives the outputs and state of one record at a time.
    Returns (the one-at-a-time outputs per topic, the broken record's source)."""
    log = json.loads(json.dumps(log))
    at = next(i for i in range(300, 400) if log[i]["value"]["event"]["type"] == "example")
    log[at]["value"]["event"]["active"] = [999]
    one, state_one = apply_log(log, 1, rng)
    for batch in batches:
        many, state_many = apply_log(log, batch, rng)
        assert by_topic(many) == by_topic(one), batch
        assert state_many == state_one, batch
    return by_topic(one), log[at]["value"]["source"]
