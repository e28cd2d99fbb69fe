"""The consumer's fetch wait (streams/app.py shorten_fetch_wait), against a real broker.

The situation the worker meets on every batch: records of a busy partition are still
in the consumer's buffer when its fetcher builds the next request, so that request
names only an idle partition and the broker holds it for the fetch wait; a record
produced to the busy partition meanwhile cannot be fetched before the request returns.
"""
import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from dpstream.streams.app import FETCH_MAX_WAIT_MS, shorten_fetch_wait

FAUST_FETCH_WAIT_MS = 1_500      # what faust gives its consumer (faust/transport/drivers/aiokafka.py)


async def _seconds_until_a_new_record_arrives(bootstrap: str, topic: str, shorten: bool) -> float:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    busy, idle = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=FAUST_FETCH_WAIT_MS)
    await producer.start()
    await consumer.start()
    try:
        if shorten:
            shorten_fetch_wait(consumer)
            # and the fetch routine's sleep when it sends nothing is bounded the same way
            # (aiokafka's lost wake-up: shorten_fetch_wait's docstring)
            assert consumer._fetcher._fetcher_timeout <= FETCH_MAX_WAIT_MS / 1000
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


def test_a_record_on_a_busy_partition_is_not_held_behind_a_long_poll_of_idle_ones(
        kafka_bootstrap, topic_prefix):
    assert FETCH_MAX_WAIT_MS <= 100
    held = asyncio.run(_seconds_until_a_new_record_arrives(kafka_bootstrap, topic_prefix + "-a", False))
    prompt = asyncio.run(_seconds_until_a_new_record_arrives(kafka_bootstrap, topic_prefix + "-b", True))
    # faust's setting: the new record waits out most of the 1.5 s long poll on `idle`
    assert held > 0.8, held
    assert prompt < 0.4, prompt
