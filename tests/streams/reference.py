"""The embedded runtime's outputs for the shared workload (tests/streams/workload.py): the
reference a worker on a real broker must equal, event for event."""
import asyncio

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

from .kafka_helpers import KEY_HEX, per_model
from .workload import examples, models, queries


def embedded_outputs():
    rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))

    async def go():
        for topic, items in (("models", models()), ("examples", examples()), ("queries", queries())):
            for p in items:
                await rt.feed(topic, p)
    asyncio.run(go())
    return rt.outputs


EXPECTED = {}


def expected():
    if not EXPECTED:
        EXPECTED.update(embedded_outputs())
    return EXPECTED


def assert_same_as_embedded(preds, ledger, releases):
    exp = expected()
    got_p, exp_p = per_model(preds), per_model(exp["predictions"])
    assert got_p.keys() == exp_p.keys()
    for model in exp_p:
        assert got_p[model] == exp_p[model], model
    assert per_model(ledger) == per_model(exp["ledger"])
    assert per_model(releases) == per_model(exp["releases"])
