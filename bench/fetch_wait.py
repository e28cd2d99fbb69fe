"""The consumer's fetch settings (streams/worker/tuning.py), measured side by side on a real broker.

1. ``shorten_fetch_wait``: records of a busy partition are still in the consumer's buffer
   when its fetcher builds the next request, so that request names only an idle
   partition and the broker holds it for the fetch wait; a record produced to the busy
   partition meanwhile cannot be fetched before the request returns. Prints the seconds
   until such a record arrives with faust's 1.5 s wait and with the worker's.
2. ``pace_fetches``: fetch requests sent while a record arrives every millisecond for
   1.5 s, with one-byte fetches and with paced ones (the fetcher's requests are counted
   by wrapping its request method: a bench may look inside aiokafka; the product does it
   only through streams/worker/faust_seam.py).

    scripts/kafka.sh start && .venv/bin/python bench/fetch_wait.py [--runs 3]
"""
from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dpstream.streams.worker import topics
from dpstream.streams.worker.kafka import Kafka
from dpstream.streams.worker.tuning import BUSY_FETCH_MAX_WAIT_MS, FETCH_MAX_WAIT_MS, shorten_fetch_wait


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    await topics.create_topic(Kafka(bootstrap), topic, partitions)


FAUST_FETCH_WAIT_MS = 1_500      # what faust gives its consumer (faust/transport/drivers/aiokafka.py)


async def _seconds_until_a_new_record_arrives(bootstrap: str, topic: str, shorten: bool) -> float:
    await create_topic(bootstrap, topic, 2)
    busy, idle = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=FAUST_FETCH_WAIT_MS)
    await producer.start()
    await consumer.start()
    try:
        if shorten:
            shorten_fetch_wait(consumer)
        for i in range(3):
            await producer.send_and_wait(topic, b"%d" % i, partition=0)
        consumer.assign([busy, idle])        # after the sends: the first fetch returns all three
        first = await consumer.getmany(busy, timeout_ms=10_000, max_records=1)
        assert sum(map(len, first.values())) == 1          # two records stay buffered
        await asyncio.sleep(0.3)     # past the fetcher's prefetch backoff: it asks for `idle` only
        rest = await consumer.getmany(busy, timeout_ms=1_000)
        assert sum(map(len, rest.values())) == 2
        await producer.send_and_wait(topic, b"new", partition=0)
        start = time.monotonic()
        while True:
            got = await consumer.getmany(busy, timeout_ms=5_000)
            if got:
                return time.monotonic() - start
    finally:
        await consumer.stop()
        await producer.stop()


async def _fetches_while_records_stream_in(bootstrap: str, topic: str, paced: bool) -> tuple[int, int]:
    """(fetch requests sent, records received) while a producer sends a record every
    millisecond or so for 1.5 s and the consumer takes whatever has arrived."""
    from dpstream.streams.worker.tuning import pace_fetches
    await create_topic(bootstrap, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await producer.start()
    await consumer.start()
    fetcher, fetches = consumer._fetcher, []
    original = fetcher._proc_fetch_request

    async def counted(*args, **kwargs):
        fetches.append(time.monotonic())
        return await original(*args, **kwargs)

    fetcher._proc_fetch_request = counted
    try:
        shorten_fetch_wait(consumer)
        pace_fetches(consumer, paced)
        sent, received = 0, 0

        async def send():
            nonlocal sent
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                await producer.send(topic, b"x" * 100)
                sent += 1
                await asyncio.sleep(0.001)
            await producer.flush()

        sender = asyncio.ensure_future(send())
        await asyncio.sleep(0.2)
        fetches.clear()
        while not sender.done() or received < sent:
            got = await consumer.getmany(timeout_ms=200)
            received += sum(map(len, got.values()))
        await sender
        return len(fetches), received
    finally:
        await consumer.stop()
        await producer.stop()



def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    for run in range(args.runs):
        prefix = f"fetchbench-{uuid.uuid4().hex[:8]}"
        held = asyncio.run(_seconds_until_a_new_record_arrives(args.bootstrap, prefix + "-a", False))
        prompt = asyncio.run(_seconds_until_a_new_record_arrives(args.bootstrap, prefix + "-b", True))
        eager, n_eager = asyncio.run(_fetches_while_records_stream_in(args.bootstrap, prefix + "-e", False))
        paced, n_paced = asyncio.run(_fetches_while_records_stream_in(args.bootstrap, prefix + "-p", True))
        print(f"run {run + 1}: new record on a busy partition arrives after {held:.3f} s with "
              f"faust's {FAUST_FETCH_WAIT_MS} ms wait, {prompt:.3f} s with {FETCH_MAX_WAIT_MS} ms "
              f"({held / max(prompt, 1e-9):.1f}x); fetch requests for ~1,500 records in 1.5 s: "
              f"{eager} one-byte, {paced} paced ({paced / max(eager, 1):.2f}x; pacing bound "
              f"{1.5 / (BUSY_FETCH_MAX_WAIT_MS / 1000):.0f}); records {n_eager} / {n_paced}")


if __name__ == "__main__":
    main()
