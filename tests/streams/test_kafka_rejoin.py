"""A rebalance between a batch's outputs and its state (tests/streams/rejoining_worker.py).
Before, a test that counted raw prediction records failed under load with 5,860 records
for 5,850 inputs: the batch in flight when its one worker's group rebalanced was applied
again, and its outputs published again, identical, as the at-least-once design says.
What holds: every input is answered once by (model, seq), every copy is identical, and
the outputs equal the embedded runtime's."""
import asyncio

import pytest

from .kafka_helpers import Worker, produce, read_all
from .reference import assert_same_as_embedded
from .workload import examples, models, queries

pytestmark = pytest.mark.kafka


def test_a_rebalance_between_outputs_and_state_publishes_only_identical_copies(kafka_bootstrap, topic_prefix, tmp_path):
    prefix = topic_prefix + "-"
    ex, qs = examples(), queries()
    worker = Worker(kafka_bootstrap, prefix, tmp_path,
                    command=("-m", "tests.streams.rejoining_worker", "3")).start()
    try:
        asyncio.run(produce(kafka_bootstrap, prefix + "models", models()))
        asyncio.run(read_all(kafka_bootstrap, prefix + "model-events", until=len(models()), timeout=60))
        asyncio.run(produce(kafka_bootstrap, prefix + "examples", ex))
        asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=len(ex), timeout=240))
        asyncio.run(produce(kafka_bootstrap, prefix + "queries", qs))
        preds = asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=len(ex) + len(qs), timeout=240))
        ledger = asyncio.run(read_all(kafka_bootstrap, prefix + "ledger", idle=3))
        releases = asyncio.run(read_all(kafka_bootstrap, prefix + "releases", idle=2))
        assert worker.proc.poll() is None
    finally:
        worker.stop()
    assert "a rebalance started" in worker.log.read_text()          # the fault hit
    by_key: dict = {}
    for p in preds:
        by_key.setdefault((p["model_id"], p["seq"]), []).append(p)
    assert len(by_key) == len(ex) + len(qs) < len(preds)    # one answer per input, some published twice
    assert all(all(c == copies[0] for c in copies) for copies in by_key.values())
    assert_same_as_embedded(preds, ledger, releases)
