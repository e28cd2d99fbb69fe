import pytest

from dpstream.mechanisms.randomness import KeyedRandomness

TEST_KEY = b"dpstream-test-key-not-for-production"


@pytest.fixture(scope="session")
def rng() -> KeyedRandomness:
    return KeyedRandomness(TEST_KEY)


# The session fixtures that start brokers of their own, each shared by the tests that ask
# for it: under pytest-xdist (``-n N --dist loadgroup``, the README's test command) the
# tests of one such fixture run in one worker process, so each starts once per run.
SHARED_BROKERS = ("kafka_cluster", "secured_cluster", "secured")


def _uses_module_fixture(item) -> bool:
    """Whether the test asks for a module-scoped fixture: such tests share what it holds
    (a deployment, a worker, data sent by an earlier test), so they run in one process."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs and defs[-1].scope == "module"
                                    for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)     # before pytest-xdist's, which reads xdist_group
def pytest_collection_modifyitems(items):
    """A test that asks for a broker is a Kafka test (``-m "not kafka"`` leaves it out); a
    test that asks for a broker started by a session fixture joins that fixture's group,
    one that asks for a module-scoped fixture its module's group. The order: Kafka tests,
    slow tests, the rest (each in collection order)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "kafka_bootstrap" in names:
            item.add_marker(pytest.mark.kafka)
        shared = next((name for name in SHARED_BROKERS if name in names), None)
        if shared is None and _uses_module_fixture(item):
            shared = item.nodeid.split("::", 1)[0]      # one module's state, one process
        if shared is not None:
            item.add_marker(pytest.mark.xdist_group(shared))
    # The Kafka tests first, then the slow ones: Kafka tests mostly wait (for workers to
    # start, groups to rebalance, brokers to fail over), so under xdist the quick tests fill
    # the cores beside them instead of the waits coming last, one after another.
    items.sort(key=lambda item: (item.get_closest_marker("kafka") is None,
                                 item.get_closest_marker("slow") is None))

