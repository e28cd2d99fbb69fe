"""A label is a JSON number equal to -1 or +1, the same at every edge: the worker's agents
(here on the embedded runtime, which runs them over raw bytes), ``dpstream produce``'s
local check, and the exported JSON Schema."""
import asyncio
import json

import jsonschema
import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import LabeledExample
from dpstream.streams.cli.commands import check_record
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"labels-tests-key-000000000000000")
MODEL = {"model_id": "m", "dimension": 4, "budget": {"epsilon": 4.0, "delta": 1e-6},
         "params": {"kind": "continual_winnow", "max_active": 2, "block": 10, "horizon": 40}}


def example(y: str) -> bytes:
    return b'{"model_id": "m", "active": [1], "y": ' + y.encode() + b"}"


def fed(lines: list[bytes]) -> EmbeddedRuntime:
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", MODEL)] + [("examples", line) for line in lines]))
    return rt


def test_a_label_written_as_a_double_is_the_integer_it_equals_at_every_edge():
    """Before: the worker dead-lettered y = 1.0 (what Java's Jackson writes for a double)
    with "invalid: y: int_type", while `dpstream produce` and `run` mapped the same file and
    the exported schema {"type": "integer", "enum": [-1, 1]} accepts 1.0 (JSON Schema
    compares numbers by value)."""
    written = ["1.0", "-1.0", "1e0", "-1.00"]
    rt = fed([example(y) for y in written])
    assert rt.outputs["rejected"] == []
    assert [r["value"]["event"]["y"] for r in rt.log[1:]] == [1, -1, 1, -1]   # logged as integers
    assert all(type(r["value"]["event"]["y"]) is int for r in rt.log[1:])
    schema = jsonschema.Draft202012Validator(LabeledExample.model_json_schema())
    for y in written:
        assert check_record("examples", example(y)) is None
        assert schema.is_valid(json.loads(example(y)))


@pytest.mark.parametrize("y", ["true", '"1"', "2", "2.0", "0", "0.0", "0.5", "null"])
def test_labels_that_are_not_numbers_equal_to_one_stay_refused_at_every_edge(y):
    rt = fed([example(y)])
    assert len(rt.outputs["rejected"]) == 1 and rt.outputs["predictions"] == []
    assert rt.outputs["rejected"][0]["reason"].startswith("invalid: y: ")
    assert check_record("examples", example(y)) is not None
    schema = jsonschema.Draft202012Validator(LabeledExample.model_json_schema())
    assert not schema.is_valid(json.loads(example(y)))

