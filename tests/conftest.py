import pytest

from dpstream.mechanisms.randomness import KeyedRandomness

TEST_KEY = b"dpstream-test-key-not-for-production"


@pytest.fixture(scope="session")
def rng() -> KeyedRandomness:
    return KeyedRandomness(TEST_KEY)
