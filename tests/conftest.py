import pytest

from dpstream.mechanisms.randomness import KeyedRandomness

TEST_KEY = b"dpstream-test-key-not-for-production"


@pytest.fixture(scope="session")
def rng() -> KeyedRandomness:
    return KeyedRandomness(TEST_KEY)


def pytest_collection_modifyitems(items):
    """A test that asks for a broker is a Kafka test (``-m "not kafka"`` leaves it out)."""
    for item in items:
        if "kafka_bootstrap" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
