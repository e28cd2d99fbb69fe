"""The repo's broker script gives a real, working Kafka (produce, consume, keyed order)."""
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from .kafka_helpers import create_topic

pytestmark = pytest.mark.kafka


async def test_keyed_records_round_trip_in_order_through_the_broker(kafka_bootstrap, topic_prefix):
    topic = f"{topic_prefix}-roundtrip"
    await create_topic(kafka_bootstrap, topic, 3)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for i in range(300):
            await producer.send(topic, key=f"model-{i % 5}".encode(), value=str(i).encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    seen: dict[bytes, list[int]] = {}
    try:
        while sum(map(len, seen.values())) < 300:
            batch = await consumer.getmany(timeout_ms=5000)
            assert batch, "broker stopped delivering before all records arrived"
            for records in batch.values():
                for rec in records:
                    seen.setdefault(rec.key, []).append(int(rec.value))
    finally:
        await consumer.stop()
    assert len(seen) == 5
    for key, values in seen.items():          # per-key order is preserved (one partition per key)
        assert values == sorted(values) and len(values) == 60
