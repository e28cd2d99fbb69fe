"""A faust-streaming pass-through agent (one topic in, one out), for bench/throughput.py.

    python bench/faust_passthrough.py BROKER SRC DST APP_ID {default|tuned} DATA_DIR

``default``: the per-event agent a faust tutorial writes (``async for value in stream:
await dst.send(value=value)``) with faust's default settings. ``tuned``: what faust
offers for bulk work: ``stream.take_events`` batches, a large stream buffer, many
records per poll, producer linger and large batches, every send of a batch enqueued
through the app's producer and the deliveries awaited together (acks stay "all").
Prints "passthrough ready" once its consumer is assigned.
"""
from __future__ import annotations

import asyncio
import sys

import faust


def main() -> None:
    broker, src, dst, app_id, mode, data_dir = sys.argv[1:7]
    tuned = mode == "tuned"
    settings = dict(stream_buffer_maxsize=131072, broker_max_poll_records=10000,
                    producer_linger=0.005, producer_max_batch_size=1 << 20,
                    stream_publish_on_commit=False) if tuned else {}
    app = faust.App(app_id, broker=f"kafka://{broker}", store="memory://", datadir=data_dir,
                    web_enabled=False, key_serializer="raw", value_serializer="raw",
                    topic_partitions=4, **settings)
    source = app.topic(src, key_type=bytes, value_type=bytes)
    sink = app.topic(dst, key_type=bytes, value_type=bytes)

    if tuned:
        @app.agent(source)
        async def passthrough(stream):
            producer = app.producer
            async for events in stream.take_events(2000, within=0.01):
                futures = [await producer.send(dst, e.message.key, e.message.value, None, None, None)
                           for e in events]
                await asyncio.gather(*futures)
    else:
        @app.agent(source)
        async def passthrough(stream):
            async for event in stream.events():
                await sink.send(key=event.message.key, value=event.message.value)

    @app.task
    async def ready():
        print("passthrough ready", flush=True)

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
