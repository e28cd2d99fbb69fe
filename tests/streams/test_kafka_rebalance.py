"""A rebalance while slow fits run (issue 10): a second worker joins while the first is in
the middle of fitting thousands of LPs at several predictors' epoch starts. Whoever ends up
with each partition, no (model, seq) gets two different outputs, and every output equals
the embedded runtime's on the same events."""
import asyncio

import numpy as np
import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

from .kafka_helpers import KEY_HEX, Worker, per_model, produce, read_all

pytestmark = pytest.mark.kafka
DATA = KeyedRandomness(b"kafka-rebalance-data-not-secret0")
MODELS = [{"model_id": f"slow-{i}", "dimension": 3, "budget": {"epsilon": 4.0, "delta": 1e-6},
           "params": {"kind": "predictor", "generator": "halfspace", "k": 300, "m": 10,
                      "v_max": 8, "hard_query_weight": 1.0}} for i in range(4)]


def events():
    s = DATA.stream("rebalance", "x", 0)
    X = s.uniform(4 * 3000 * 3).reshape(4, 3000, 3) * 2 - 1
    examples = [{"model_id": m["model_id"], "x": x.tolist(), "y": 1 if x @ np.array([1.0, -0.5, 0.2]) >= 0 else -1}
                for m, rows in zip(MODELS, X) for x in rows]
    Q = s.uniform(4 * 100 * 3).reshape(4, 100, 3) * 2 - 1
    queries = [{"model_id": m["model_id"], "x": q.tolist()} for m, rows in zip(MODELS, Q) for q in rows]
    return examples, queries


def test_a_rebalance_during_slow_fits_gives_no_conflicting_outputs(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    examples, queries = events()
    rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))

    async def embedded():
        for topic, items in (("models", MODELS), ("examples", examples), ("queries", queries)):
            for p in items:
                await rt.feed(topic, p)
    asyncio.run(embedded())
    a = Worker(kafka_bootstrap, prefix, tmp_path, "a").start()
    b = Worker(kafka_bootstrap, prefix, tmp_path, "b")

    async def go():
        await produce(kafka_bootstrap, prefix + "models", MODELS)
        await read_all(kafka_bootstrap, prefix + "model-events", until=len(MODELS), timeout=60)
        await produce(kafka_bootstrap, prefix + "examples", examples)
        # Each model's last example starts its epoch: 1,000 LP fits (seconds). The second
        # worker joins while the first is still working through the examples and fits.
        await asyncio.to_thread(b.start)
        # queries after every example is answered, so the log order is the embedded one's
        await read_all(kafka_bootstrap, prefix + "predictions", until=len(examples), timeout=300)
        await produce(kafka_bootstrap, prefix + "queries", queries)
        preds = await read_all(kafka_bootstrap, prefix + "predictions",
                               until=len(examples) + len(queries), timeout=300)
        ledger = await read_all(kafka_bootstrap, prefix + "ledger", idle=3)
        return preds, ledger

    try:
        preds, ledger = asyncio.run(go())
    finally:
        a.stop()
        b.stop()
    got, want = per_model(preds), per_model(rt.outputs["predictions"])     # raises on a conflict
    for model in want:
        g, w = got.get(model, []), want[model]
        first = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), None)
        assert len(g) == len(w) and first is None, (model, len(g), len(w), first,
                                                   g[first] if first is not None else None,
                                                   w[first] if first is not None else None)
    assert per_model(ledger) == per_model(rt.outputs["ledger"])
