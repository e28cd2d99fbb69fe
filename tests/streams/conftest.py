"""Kafka fixtures. Tests about Kafka run against a real broker (scripts/kafka.sh).
Without one they skip, unless DPSTREAM_REQUIRE_KAFKA=1 (CI), where they fail."""
import asyncio
import os
import uuid

import pytest

BOOTSTRAP = os.environ.get("DPSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


async def _broker_answers() -> bool:
    from aiokafka.admin import AIOKafkaAdminClient
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP, request_timeout_ms=3000)
    try:
        await asyncio.wait_for(admin.start(), 5)
        await admin.list_topics()
        return True
    except Exception:
        return False
    finally:
        try:
            await admin.close()
        except Exception:
            pass


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    if not asyncio.run(_broker_answers()):
        msg = f"no Kafka broker answers at {BOOTSTRAP}; start one with scripts/kafka.sh start"
        if os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return BOOTSTRAP


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"
