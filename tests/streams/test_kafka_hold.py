"""The worker's own log appends are held back, not read back (streams/worker/bulk.py
``BulkPath.hold``), on a real broker: the consumer hands over (almost) none of the
``model-events`` records the worker appended and applied itself, the group's offsets
still reach the end of the log, and a record another writer appends to a held
partition is applied without waiting for the idle tail check."""
import asyncio
import json
import re
import time
from urllib.request import urlopen

import pytest
from aiokafka import AIOKafkaProducer

from dpstream.streams.worker.app import TAIL_CHECK
from dpstream.streams.worker.bulk import RELEASE_AFTER

from .kafka_helpers import Worker, produce, read_all
from .test_kafka_pipeline import free_port, uncommitted

pytestmark = pytest.mark.kafka

MODEL = {"model_id": "hold", "dimension": 30, "budget": {"epsilon": 1e6, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 300, "K": 50, "L": 2.0}}
N = 3_000


def _log_records_handed_over(port: int) -> float:
    text = urlopen(f"http://127.0.0.1:{port}/metrics/", timeout=10).read().decode()
    found = re.search(r'dpstream_events_in_total\{topic="model-events"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


async def _append_as_another_writer(bootstrap: str, topic: str, record: dict) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, json.dumps(record).encode(),
                                     key=record["event"]["model_id"].encode())
    finally:
        await producer.stop()


def test_own_log_appends_are_held_back_and_a_foreign_append_still_applies(
        kafka_bootstrap, topic_prefix, tmp_path):
    prefix, port = topic_prefix + "-", free_port()
    worker = Worker(kafka_bootstrap, prefix, tmp_path, web_port=port).start()
    examples = [{"model_id": "hold", "active": [i % 30, (7 * i + 3) % 30], "y": 1 if i % 3 else -1}
                for i in range(N)]
    try:
        async def feed():
            await produce(kafka_bootstrap, prefix + "models", [MODEL])
            await read_all(kafka_bootstrap, prefix + "model-events", until=1, timeout=60)
            # several fetches and batches, with pauses well below RELEASE_AFTER: a partition
            # released between two chunks may hand over the next chunk's first batch again
            producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
            await producer.start()
            try:
                for a in range(0, N, 500):
                    for e in examples[a:a + 500]:
                        await producer.send(prefix + "examples", json.dumps(e).encode(), key=b"hold")
                    await producer.flush()
                    await asyncio.sleep(RELEASE_AFTER / 5)
            finally:
                await producer.stop()
            return await read_all(kafka_bootstrap, prefix + "predictions", until=N, timeout=180)
        preds = asyncio.run(feed())
        assert len({p["source"] for p in preds}) == N
        # every input and log record is acked, though the log ones were never handed over
        assert asyncio.run(uncommitted(kafka_bootstrap, prefix)) == {}
        read_back = _log_records_handed_over(port)
        # Before the hold, a worker read back nearly every record it appended (30,618
        # log records for 31,694 inputs in a fetch trace); held, at most the first
        # batch's, appended before the partition was held.
        assert read_back <= 600, read_back

        # Another writer (a sequencer that took an input keyed other than by its model
        # id) appends to the held partition; the worker appends nothing more to it.
        log = asyncio.run(read_all(kafka_bootstrap, prefix + "model-events", until=N + 1, timeout=60))
        foreign = dict(log[-1], source="examples:0:999999")
        time.sleep(RELEASE_AFTER / 2)
        start = time.monotonic()
        asyncio.run(_append_as_another_writer(kafka_bootstrap, prefix + "model-events", foreign))
        got = asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=N + 1, timeout=60))
        took = time.monotonic() - start
    finally:
        worker.stop()
    assert any(p["source"] == "examples:0:999999" for p in got)
    # released after RELEASE_AFTER s without an own append, not found by the tail check
    # (which waits TAIL_CHECK s of idleness)
    assert took < TAIL_CHECK - 0.5, took
