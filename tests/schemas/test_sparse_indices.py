"""Sparse ``active`` indices are JSON numbers equal to integers, the same at every edge:
the worker's agents (on the embedded runtime, over raw bytes), ``dpstream produce``'s
local check, and the exported JSON Schema (as labels: tests/schemas/test_labels.py)."""
import asyncio
import json

import jsonschema
import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LabeledExample
from dpstream.streams.cli.commands import check_record
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"sparse-tests-key-000000000000000")
MODEL = {"model_id": "sparse", "dimension": 8, "budget": {"epsilon": 4.0, "delta": 1e-6},
         "params": {"kind": "continual_winnow", "max_active": 2, "block": 10, "horizon": 40}}
SCHEMA = jsonschema.Draft202012Validator(LabeledExample.model_json_schema())


def example(active: str) -> bytes:
    return b'{"model_id": "sparse", "active": ' + active.encode() + b', "y": 1}'


def fed(lines: list[bytes]) -> EmbeddedRuntime:
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", MODEL)] + [("examples", line) for line in lines]))
    return rt


def test_indices_written_as_whole_doubles_are_the_integers_they_equal_at_every_edge():
    """Before: the worker dead-lettered ``[3.0, 5.0]`` (what Gson writes for a list of
    Doubles) with "invalid: active.[]: int_type", and so did ``produce``'s check, while
    the exported schema ({"type": "integer"} per item) accepts it."""
    written = ["[3.0, 5.0]", "[3e0, 5]", "[0.0]"]
    rt = fed([example(a) for a in written])
    assert rt.outputs["rejected"] == []
    assert [r["value"]["event"]["active"] for r in rt.log[1:]] == [[3, 5], [3, 5], [0]]
    assert all(type(i) is int for r in rt.log[1:] for i in r["value"]["event"]["active"])
    for a in written:
        assert check_record("examples", example(a)) is None
        assert SCHEMA.is_valid(json.loads(example(a)))


@pytest.mark.parametrize("active", ["[3.5]", "[true]", '["3"]', "[3, 0.5]", "[null]"])
def test_indices_that_are_not_whole_numbers_stay_refused_at_every_edge(active):
    rt = fed([example(active)])
    assert len(rt.outputs["rejected"]) == 1 and rt.outputs["predictions"] == []
    assert rt.outputs["rejected"][0]["reason"] == "invalid: active.[]: int_type"
    assert check_record("examples", example(active)) == "invalid: active.[]: int_type"
    assert not SCHEMA.is_valid(json.loads(example(active)))
