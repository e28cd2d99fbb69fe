"""Issue 10: heavy work runs off the event loop, and a worker that lost a partition writes
none of its state. (The faust worker applies batches in a thread with ownership from its
consumer assignment; here the same Processor runs without a broker.)"""
import asyncio
import json

from dpstream.agents.processor import Processor
from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"offload-tests-key-00000000000000")
PREDICTOR = {"model_id": "p", "dimension": 3, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "predictor", "generator": "halfspace", "k": 600, "m": 10, "v_max": 2}}


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


def test_an_offloaded_batch_gives_the_same_outputs_and_the_loop_runs_meanwhile(monkeypatch):
    """A heavy batch (an epoch start: 600 LP fits) runs in a worker thread: the fits run off
    the event loop's thread, and the loop runs other tasks while a fit is in progress (a
    batch on the loop would let no task run until it ended). Outputs as without offload."""
    import threading

    from dpstream.learners.generators import Halfspaces
    log, expected = log_records()
    out = {"predictions": [], "ledger": [], "releases": [], "rejected": []}
    fitting, threads = [0], set()
    fit = Halfspaces.fit

    def watched(self, *args, **kwargs):
        fitting[0] += 1
        threads.add(threading.get_ident())
        try:
            return fit(self, *args, **kwargs)
        finally:
            fitting[0] -= 1

    monkeypatch.setattr(Halfspaces, "fit", watched)

    async def emit(topic, key, value):
        out[topic].append(value)

    async def go():
        seen, done = [0], asyncio.Event()

        async def other_task():
            while not done.is_set():
                seen[0] += fitting[0] > 0           # ran while a fit was in progress
                await asyncio.sleep(0.001)

        task = asyncio.create_task(other_task())
        await Processor(RNG, {}, emit, offload=True).handle_batch(log)
        done.set()
        await task
        return seen[0], threading.get_ident()

    seen, loop_thread = asyncio.run(go())
    assert out["predictions"] == expected["predictions"] and out["ledger"] == expected["ledger"]
    assert threads and loop_thread not in threads
    assert seen > 0


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
