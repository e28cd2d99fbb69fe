"""The consumer's fetch wait (streams/tuning.py shorten_fetch_wait), against a real broker.

The situation the worker meets on every batch: records of a busy partition are still
in the consumer's buffer when its fetcher builds the next request, so that request
names only an idle partition and the broker holds it for the fetch wait; a record
produced to the busy partition meanwhile cannot be fetched before the request returns.
"""
import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dpstream.streams.tuning import FETCH_MAX_WAIT_MS, shorten_fetch_wait

from .kafka_helpers import create_topic

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


async def _fetches_while_records_stream_in(bootstrap: str, topic: str, paced: bool) -> tuple[int, int]:
    """(fetch requests sent, records received) while a producer sends a record every
    millisecond or so for 1.5 s and the consumer takes whatever has arrived."""
    from dpstream.streams.tuning import pace_fetches
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


def test_paced_fetches_wait_on_the_broker_for_records_to_gather(kafka_bootstrap, topic_prefix):
    """pace_fetches (streams/tuning.py): under load a fetch waits on the broker for
    BUSY_FETCH_MIN_BYTES or BUSY_FETCH_MAX_WAIT_MS, so a steady trickle of records costs
    at most about one fetch per BUSY_FETCH_MAX_WAIT_MS, not one per record; nothing is
    lost, and unpaced fetches answer at once again."""
    from dpstream.streams.tuning import BUSY_FETCH_MAX_WAIT_MS, BUSY_FETCH_MIN_BYTES
    assert BUSY_FETCH_MAX_WAIT_MS <= 20 and BUSY_FETCH_MIN_BYTES > 1
    eager, n_eager = asyncio.run(_fetches_while_records_stream_in(kafka_bootstrap, topic_prefix + "-e", False))
    paced, n_paced = asyncio.run(_fetches_while_records_stream_in(kafka_bootstrap, topic_prefix + "-p", True))
    assert n_eager > 300 and n_paced > 300            # every record sent arrived (the loop waits for all)
    assert paced <= 1.3 * (1.5 / (BUSY_FETCH_MAX_WAIT_MS / 1000)) + 10, paced
    assert paced < 0.6 * eager, (paced, eager)
