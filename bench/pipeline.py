"""Pipeline measurements on the local broker, side by side in one run.

    python bench/pipeline.py [--n 20000] [--history 1000000] [--rate 300]

1. Throughput: n labelled examples through the DP-Winnow worker (produce -> the
   predictions topic) against a raw aiokafka consume-and-produce loop with no
   processing (the floor any Kafka pipeline pays), both on the same broker.
2. End-to-end latency (input record timestamp -> prediction record timestamp) at a
   steady produce rate, p50 / p99.
3. Recovery: after ``history`` events, kill -9 the worker, restart it, and time until
   it answers a new event (changelog restore included).
Machine noise applies; the ratio is the number to quote.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import importlib.util  # noqa: E402

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

_spec = importlib.util.spec_from_file_location("kafka_helpers", ROOT / "tests/streams/kafka_helpers.py")
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
Worker = _helpers.Worker

BROKER = "127.0.0.1:9092"
CONNECTION: dict = {"bootstrap_servers": BROKER}      # what every client below connects with


def connect(kafka) -> None:
    """Point every client of this module at ``kafka`` (a streams.kafka.Kafka, with its TLS
    and SASL settings): the benches' SASL_SSL rows."""
    global BROKER, CONNECTION
    BROKER, CONNECTION = kafka.bootstrap, kafka.client_args()
# DP-Winnow as a user would run it at epsilon 4: the budget pays for two updates (ledger
# totals 3.85), after which the model serves its frozen hypothesis (post-processing).
MODEL = {"model_id": "bench", "dimension": 1000, "budget": {"epsilon": 4.0, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 0.5, "eta": 0.01, "m": 100, "K": 3, "L": 3.0}}


def payloads(n: int, seed: int = 0):
    from common import disjunction_rows
    rows, labels = disjunction_rows(1000, 10, 20, n, seed)
    return [json.dumps({"model_id": "bench", "active": sorted(map(int, r)), "y": int(y)}).encode()
            for r, y in zip(rows, labels)]


async def produce(topic, values, key=b"bench", rate=None, keys=None):
    """Send ``values`` (keyed ``key``, or ``keys[i]``), optionally at ``rate`` per second."""
    p = AIOKafkaProducer(**CONNECTION, linger_ms=5, max_batch_size=262144)
    await p.start()
    try:
        t0 = time.perf_counter()
        for i, v in enumerate(values):
            await p.send(topic, key=keys[i] if keys else key, value=v)
            if rate:
                delay = t0 + (i + 1) / rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
        await p.flush()
    finally:
        await p.stop()


async def produce_paced(topic, values, rate, key=b"bench", tick=0.002):
    """Send ``values`` at ``rate`` per second as a steady stream: every ``tick`` seconds,
    the records due by then, appended to one producer batch (each record's timestamp
    is taken as it is appended). A load generator that awaited one send per record
    cost a core's third at 3,000 records/s on this 2-core machine, CPU the worker
    under test then lacked."""
    p = AIOKafkaProducer(**CONNECTION, linger_ms=0, max_batch_size=1 << 20)
    await p.start()
    try:
        partition = (await p.send_and_wait(topic, key=key, value=values[0])).partition
        sent, waits, t0 = 1, [], time.perf_counter()
        while sent < len(values):
            await asyncio.sleep(tick)
            due = min(len(values), int((time.perf_counter() - t0) * rate) + 1)
            if due > sent:
                batch = p.create_batch()
                for v in values[sent:due]:
                    batch.append(key=key, value=v, timestamp=None)
                waits.append(await p.send_batch(batch, topic, partition=partition))
                sent = due
        await asyncio.gather(*waits)
    finally:
        await p.stop()


async def drain(topic, count, timeout=1800.0):
    """Read ``count`` records of ``topic`` from the start; returns (records, seconds from the
    first to the last arrival)."""
    c = AIOKafkaConsumer(topic, **CONNECTION, auto_offset_reset="earliest",
                         group_id=None, enable_auto_commit=False, fetch_max_bytes=52428800)
    await c.start()
    out, first, deadline = [], None, time.time() + timeout
    try:
        while len(out) < count and time.time() < deadline:
            batch = await c.getmany(timeout_ms=1000, max_records=10000)
            for recs in batch.values():
                if recs and first is None:
                    first = time.perf_counter()
                out.extend(recs)
    finally:
        await c.stop()
    if len(out) < count:
        raise TimeoutError(f"{topic}: {len(out)} of {count} records after {timeout}s")
    return out, (time.perf_counter() - first) if first else float("nan")


def produced_rate(records) -> float:
    """Records per second of whoever produced ``records``, from their own timestamps (the
    producer's clock, in ms): the records after the first millisecond over the span to the
    last one. The worker's throughput, measured where it works: the drain's clock starts
    only once the inputs are all produced, and the worker, reading them as they land,
    had handled a part of them by then. Timed that way, rates came out 1.09-1.29x too
    high (a DP-Winnow worker "used" 1.27 cores on one thread; /tmp probe, 2026-12-01)."""
    stamps = sorted(r.timestamp for r in records)
    later = sum(1 for t in stamps if t > stamps[0])
    return 1000.0 * later / (stamps[-1] - stamps[0]) if later else float("nan")


async def raw_loop(src, dst, count):
    """Consume src and produce every record unchanged to dst: the no-processing baseline."""
    c = AIOKafkaConsumer(src, **CONNECTION, auto_offset_reset="earliest",
                         group_id=f"raw-{uuid.uuid4().hex[:6]}", enable_auto_commit=True)
    p = AIOKafkaProducer(**CONNECTION, linger_ms=5)
    await c.start()
    await p.start()
    n, t0 = 0, None
    try:
        while n < count:
            batch = await c.getmany(timeout_ms=1000, max_records=10000)
            for recs in batch.values():
                for r in recs:
                    t0 = t0 or time.perf_counter()
                    await p.send(dst, key=r.key, value=r.value)
                    n += 1
        await p.flush()
    finally:
        await c.stop()
        await p.stop()
    return time.perf_counter() - t0


async def count_records(topic) -> int:
    """Records a restarted worker has to read from ``topic`` (all partitions, from the
    log start): after compaction, far fewer than the offsets written."""
    c = AIOKafkaConsumer(topic, **CONNECTION, auto_offset_reset="earliest",
                         group_id=None, enable_auto_commit=False, fetch_max_bytes=52428800)
    await c.start()
    n = 0
    try:
        while True:
            batch = await c.getmany(timeout_ms=2000, max_records=50000)
            if not batch:
                return n
            n += sum(len(r) for r in batch.values())
    finally:
        await c.stop()


async def create(topics):
    admin = AIOKafkaAdminClient(**CONNECTION)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, 4, 1) for t in topics])
    finally:
        await admin.close()


async def delete_prefixed(prefix: str) -> None:
    """Delete every topic whose name starts with ``prefix`` (a measurement's own topics,
    its worker's changelogs included), so that later measurements in a run meet the broker
    as the first one did (three bench runs had left ~1,800 partitions behind)."""
    admin = AIOKafkaAdminClient(**CONNECTION)
    await admin.start()
    try:
        names = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--latency-n", type=int, default=3_000)
    ap.add_argument("--rate", type=float, default=300.0)
    ap.add_argument("--history", type=int, default=1_000_000)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dpstream-bench-"))
    prefix = f"b{uuid.uuid4().hex[:8]}-"

    # 1. raw baseline
    src, dst = prefix + "raw-in", prefix + "raw-out"
    asyncio.run(create([src, dst]))
    data = payloads(args.n)
    asyncio.run(produce(src, data))
    raw_secs = asyncio.run(raw_loop(src, dst, args.n))

    # 1'. the worker
    worker = Worker(BROKER, prefix, tmp, "w1").start()
    asyncio.run(produce(prefix + "models", [json.dumps(MODEL).encode()]))
    asyncio.run(drain(prefix + "model-events", 1, timeout=60))
    asyncio.run(produce(prefix + "examples", data))
    worker_rate = produced_rate(asyncio.run(drain(prefix + "predictions", args.n))[0])
    print(f"throughput over {args.n:,} examples (DP-Winnow, d=1000, 20 active):")
    print(f"  raw aiokafka consume->produce : {args.n / raw_secs:10,.0f} records/s")
    print(f"  dpstream worker (DP-Winnow)   : {worker_rate:10,.0f} examples/s")
    print(f"  ratio worker / raw            : {worker_rate * raw_secs / args.n:10.3f}")

    # 2. latency at a steady rate
    lat_data = payloads(args.latency_n, seed=1)
    asyncio.run(produce_paced(prefix + "examples", lat_data, args.rate))
    preds, _ = asyncio.run(drain(prefix + "predictions", args.n + args.latency_n))
    inputs, _ = asyncio.run(drain(prefix + "examples", args.n + args.latency_n))
    sent = {f"examples:{r.partition}:{r.offset}": r.timestamp for r in inputs}
    lat = [r.timestamp - sent[json.loads(r.value)["source"]] for r in preds[args.n:]
           if json.loads(r.value)["source"] in sent]
    print(f"end-to-end latency at {args.rate:.0f} examples/s ({len(lat):,} events): "
          f"p50 {np.percentile(lat, 50):.1f} ms, p99 {np.percentile(lat, 99):.1f} ms")

    # 3. recovery after kill -9 with a long history
    more = args.history - args.n - args.latency_n
    if more > 0:
        t0 = time.perf_counter()
        chunk = 100_000
        for a in range(0, more, chunk):
            asyncio.run(produce(prefix + "examples", payloads(min(chunk, more - a), seed=2 + a)))
        asyncio.run(drain(prefix + "predictions", args.history))
        print(f"history of {args.history:,} events processed in {time.perf_counter() - t0:.0f}s")
    worker.kill()
    for table in ("model-state", "sequencer-state"):
        name = f"{prefix}app-{table}-changelog"
        print(f"  {table} changelog: {asyncio.run(count_records(name)):,} records to restore "
              f"(what compaction left of the writes)")
    t0 = time.perf_counter()
    restarted = Worker(BROKER, prefix, tmp, "w2").start(timeout=3600)
    asyncio.run(produce(prefix + "examples", payloads(1, seed=99)))
    asyncio.run(drain(prefix + "predictions", args.history + 1))
    print(f"recovery after kill -9 with {args.history:,} events of history: "
          f"{time.perf_counter() - t0:.1f}s to the first new answer")
    restarted.stop()


if __name__ == "__main__":
    main()
