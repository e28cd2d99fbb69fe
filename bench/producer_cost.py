"""What one acknowledged produce round trip costs the worker, by client, side by side.

A stream reaches the worker in batches of ~100-150 records, and each batch waits for
two acknowledged produce requests in turn: the log append (``model-events``; the
processor needs each record's offset) and the outputs (docs/performance.md, "What a batch costs").
This script sends ``--records`` small records to one partition and awaits their
acknowledgement, ``--rounds`` times in a row, on a real broker, with:

- aiokafka's batch API as the worker uses it (``streams/batches.send_records``);
- confluent-kafka (librdkafka) with a delivery callback per record (each record's
  offset, as the log append needs: librdkafka may split a partition's records over
  several message sets, so consecutive offsets cannot be assumed), its callbacks served
  by a polling thread that hands the result to the event loop;
- confluent-kafka's ``produce_batch`` (one call per round trip, a callback per record).

Both clients with acks=all and no linger (a linger adds its wait to every batch's round
trip, streams/worker/app.py). Per round trip it prints the wall time, the process's CPU (every
thread: librdkafka's own threads count) and the event loop thread's CPU, interleaved
``--pairs`` times (the machine is noisy: compare within a pair).

    scripts/kafka.sh start
    .venv/bin/pip install confluent-kafka     # not a dependency of dpstream
    .venv/bin/python bench/producer_cost.py [--records 140] [--rounds 400] [--pairs 3]

Without confluent-kafka installed it measures aiokafka only.
"""
from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid

from aiokafka import AIOKafkaProducer

from dpstream.streams.worker import topics
from dpstream.streams.worker.batches import send_records
from dpstream.streams.worker.kafka import Kafka

BROKER = "127.0.0.1:9092"
VALUE = b'{"model":"m1","offset":123456,"label":1,"score":0.12345,"epoch":3,"spent":0.0123}'
KEY = b"m1"
WARM_UP = 50


async def measure(round_trip, rounds: int) -> tuple[float, float, float]:
    """Wall, process CPU and this thread's CPU, microseconds per ``await round_trip()``."""
    for _ in range(WARM_UP):
        await round_trip()
    cpu, thread, wall = time.process_time(), time.thread_time(), time.perf_counter()
    for _ in range(rounds):
        await round_trip()
    return tuple(1e6 * d / rounds for d in (time.perf_counter() - wall,
                                             time.process_time() - cpu,
                                             time.thread_time() - thread))


async def aiokafka_cost(topic: str, records: int, rounds: int):
    producer = AIOKafkaProducer(bootstrap_servers=BROKER, acks="all", linger_ms=0,
                                max_batch_size=1 << 20)
    await producer.start()
    batch = [(KEY, VALUE)] * records

    async def round_trip():
        for future, _ in await send_records(producer, topic, 0, batch):
            await future
    try:
        return await measure(round_trip, rounds)
    finally:
        await producer.stop()


class Librdkafka:
    """A confluent-kafka producer whose delivery callbacks (run by a polling thread)
    resolve asyncio futures on the loop."""

    def __init__(self, confluent_kafka, loop):
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": BROKER, "acks": "all", "linger.ms": 0,
            "enable.idempotence": True})
        self.loop, self.running = loop, True
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while self.running:
            self.producer.poll(0.05)

    def close(self) -> None:
        self.running = False
        self.thread.join()
        self.producer.flush()

    def _collector(self, n: int):
        future, offsets = self.loop.create_future(), []

        def delivered(err, msg):
            offsets.append(err or msg.offset())
            if len(offsets) == n:
                self.loop.call_soon_threadsafe(future.set_result, offsets)
        return future, delivered

    async def each(self, topic: str, records: int):
        future, delivered = self._collector(records)
        for _ in range(records):
            self.producer.produce(topic, VALUE, KEY, partition=0, on_delivery=delivered)
        return await future

    async def batch(self, topic: str, records: int):
        future, delivered = self._collector(records)
        self.producer.produce_batch(topic, [{"key": KEY, "value": VALUE}] * records,
                                    partition=0, on_delivery=delivered)
        return await future


async def librdkafka_cost(confluent_kafka, topic: str, records: int, rounds: int, how: str):
    client = Librdkafka(confluent_kafka, asyncio.get_running_loop())
    try:
        return await measure(lambda: getattr(client, how)(topic, records), rounds)
    finally:
        client.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=140)
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--pairs", type=int, default=3)
    args = ap.parse_args()
    try:
        import confluent_kafka
    except ImportError:
        confluent_kafka = None
        print("confluent-kafka is not installed (pip install confluent-kafka): aiokafka only")
    topic = f"pc{uuid.uuid4().hex[:6]}"
    await topics.create_topic(Kafka(BROKER), topic, 1)
    clients = [("aiokafka send_records", lambda: aiokafka_cost(topic, args.records, args.rounds))]
    if confluent_kafka is not None:
        clients += [(f"librdkafka {confluent_kafka.libversion()[0]}, produce per record",
                     lambda: librdkafka_cost(confluent_kafka, topic, args.records, args.rounds, "each")),
                    ("librdkafka, produce_batch",
                     lambda: librdkafka_cost(confluent_kafka, topic, args.records, args.rounds, "batch"))]
    print(f"one acknowledged round trip of {args.records} records, {args.rounds} in a row "
          f"(microseconds: wall, process CPU, event loop thread CPU)")
    for pair in range(args.pairs):
        for name, run in clients if pair % 2 == 0 else clients[::-1]:
            wall, cpu, loop_cpu = await run()
            print(f"pair {pair + 1}, {name}: wall {wall:,.0f}, CPU {cpu:,.0f}, loop thread {loop_cpu:,.0f}",
                  flush=True)


if __name__ == "__main__":
    asyncio.run(main())
