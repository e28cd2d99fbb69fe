"""Kafka fixtures. Tests about Kafka run against a real broker (scripts/kafka.sh).
Without one they skip, unless DPSTREAM_REQUIRE_KAFKA=1 (CI), where they fail."""
import asyncio
import os
import uuid
from pathlib import Path

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


@pytest.fixture(scope="session")
def secured(tmp_path_factory):
    """One secured broker (TLS, SASL/SCRAM, ACLs) shared by the session's tests
    (tests/streams/secure_broker.py): the one in $DPSTREAM_SECURE_KAFKA_STATE when it
    answers, else one started with ``KAFKA_SECURE=1 scripts/kafka.sh start`` on free ports
    and stopped at the end. Skips when none can run (no Java), fails instead in CI."""
    from .secure_broker import Secured
    given = os.environ.get("DPSTREAM_SECURE_KAFKA_STATE")
    if given and (Path(given) / "tls" / "broker-admin.properties").exists():
        if (found := Secured(Path(given))).answers():
            yield found
            return
    try:
        broker = Secured.start(tmp_path_factory.mktemp("secure-kafka"))
    except RuntimeError as err:
        if os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1":
            pytest.fail(str(err))
        pytest.skip(str(err))
    try:
        yield broker
    finally:
        broker.script("stop", timeout=120)
