"""Issue 10: heavy work runs off the event loop, and a worker that lost a partition writes
none of its state. (The faust worker applies batches in a thread with ownership from its
consumer assignment; here the same Processor runs without a broker.)"""
import asyncio
import json
import time

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"offload-tests-key-00000000000000")
PREDICTOR = {"model_id": "p", "dimension": 3, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "predictor", "generator": "halfspace", "k": 3000, "m": 2, "v_max": 2}}


def log_records():
    s = RNG.stream("offload", "data", 0)
    X = s.uniform(3 * 6000).reshape(6000, 3)
    items = [("models", PREDICTOR)] + [
        ("examples", {"model_id": "p", "x": x.tolist(), "y": 1 if x[0] > 0.5 else -1}) for x in X]
    items += [("queries", {"model_id": "p", "x": [0.9, 0.1, 0.1]})]
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(items))
    log = [RawRecord("model-events", 0, r["offset"], b"p", json.dumps(r["value"]).encode())
           for r in rt.log]
    return log, rt.outputs


def test_an_offloaded_batch_gives_the_same_outputs_and_the_loop_keeps_ticking():
    log, expected = log_records()
    out = {"predictions": [], "ledger": [], "releases": [], "rejected": []}

    async def emit(topic, key, value):
        out[topic].append(value)

    async def go():
        gaps, stop = [], asyncio.Event()

        async def ticker():
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        p = Processor(RNG, {}, emit, offload=True)
        t0 = time.perf_counter()
        await p.handle_batch(log)                  # one batch: 3,000 LP fits at the epoch start
        busy = time.perf_counter() - t0
        stop.set()
        await tick
        return busy, max(gaps)

    busy, worst_gap = asyncio.run(go())
    assert out["predictions"] == expected["predictions"] and out["ledger"] == expected["ledger"]
    # the batch must be long against the 10 ms tick for the gap to mean anything: it took
    # 1-3 s on slower days of this shared machine, 0.49 s on a fast one
    assert busy > 0.25 and worst_gap < busy / 4, (busy, worst_gap)


def test_a_worker_that_lost_the_partition_mid_batch_writes_no_state():
    log, _ = log_records()
    state, revoked = {}, []

    async def emit(topic, key, value):
        revoked.append(topic)          # the partition is revoked while outputs are delivered
        return None

    async def go():
        p = Processor(RNG, state, emit, owns=lambda partition: not revoked)
        await p.handle_batch(log[:200])
    asyncio.run(go())
    # cold records (config, buffer chunks) went out before the outputs, while it still
    # owned the partition; no head and no log position after the revocation
    assert revoked and not [k for k in state if k.endswith("/head") or k.startswith("log/")]
    assert "model/p/config" in state
