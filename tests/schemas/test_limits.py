"""The public structural limits and the one decoder (schemas/limits.py, issue 42 items 1
and 4): at each limit a record is answered, one step over it is dead-lettered with a short
reason that starts with its cause, and ``dpstream produce``'s local check gives the same
verdict; a lone UTF-16 surrogate is a value, read as U+FFFD in keys and values alike."""
import asyncio
import copy
import json
import math

import pydantic_core
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.learners.features import Featuriser, bucket
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig, json_schemas, limits
from dpstream.streams.cli.commands import check_record
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"limits-tests-key-000000000000000")
CONFIG = {"model_id": "m", "budget": {"epsilon": 4.0, "delta": 1e-6},
          "params": {"kind": "continual_winnow", "block": 10, "horizon": 100},
          "features": [{"type": "categorical", "name": "merchant", "hash_buckets": 64},
                       {"type": "categorical", "name": "emoji", "vocabulary": ["\ufffd", "\U0001f600"]}]}


def _registered() -> dict:
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed("models", CONFIG))
    assert rt.outputs["rejected"] == []
    return rt.state


STATE = _registered()


def worker(payload: bytes, topic: str = "examples") -> tuple[str | None, EmbeddedRuntime]:
    """(the dead letter's reason or None, the runtime) for one record."""
    rt = EmbeddedRuntime(RNG, copy.deepcopy(STATE))
    asyncio.run(rt.feed(topic, payload))
    rejected = rt.outputs["rejected"]
    assert len(rejected) + len(rt.outputs["predictions"]) == 1
    return (rejected[0]["reason"] if rejected else None), rt


def example(features: dict) -> bytes:
    return json.dumps({"model_id": "m", "features": features, "y": 1}).encode()


def nested(levels: int) -> bytes:
    """An example whose ignored field nests arrays so that the record has ``levels`` levels
    (the record's object is 1, ``features`` 2)."""
    inner = "[" * (levels - 2) + "]" * (levels - 2)
    return b'{"model_id": "m", "y": 1, "features": {"ignored": ' + inner.encode() + b"}}"


def padded(size: int) -> bytes:
    """An example of exactly ``size`` bytes (an ignored string makes up the size)."""
    base = example({"pad": ""})
    return example({"pad": "a" * (size - len(base))})


def members(n: int) -> bytes:
    return example({"merchant": "x", "extra": {f"k{i}": i for i in range(n)}})


def integer(digits: int) -> bytes:
    return b'{"model_id": "m", "y": 1, "features": {"merchant": -' + b"9" * digits + b"}}"


@pytest.mark.parametrize("make, limit, cause", [
    (nested, limits.MAX_DEPTH, "nested too deeply"),
    (padded, limits.MAX_BYTES, "oversized payload"),
    (members, limits.MAX_MEMBERS, "too many members"),
    (integer, limits.MAX_INTEGER_DIGITS, "integer too long"),
])
def test_each_limit_answers_at_it_and_dead_letters_one_over_it_with_its_cause_first(make, limit, cause):
    """Before: an integer of 4,301 digits was "malformed JSON"; a record nested 256-999 deep
    got a 500-character reason (``invalid: features.?.?.[].?...``) cut off before its cause;
    a nested object of 1,001 members in an ignored field was accepted and 151 levels were
    refused depending on the parser a record met. Now each is one public limit, checked
    alike by the worker and by ``dpstream produce``."""
    at, over = make(limit), make(limit + 1)
    assert worker(at)[0] is None and check_record("examples", at) is None
    reason = worker(over)[0]
    assert reason.startswith(cause) and f"{limit:,}" in reason and len(reason) < 120
    assert check_record("examples", over) == reason
    assert not limits.plain(over)               # the worker's fast path leaves it to decode


@pytest.mark.parametrize("levels", [256, 600, 999, 5000, 100_000])
def test_deep_nesting_anywhere_gets_the_same_short_reason(levels):
    reason = worker(nested(levels))[0]
    assert reason == limits.TOO_DEEP
    assert check_record("examples", nested(levels)).startswith("nested too deeply")


def test_a_lone_surrogate_is_a_value_in_keys_and_values_and_reads_as_the_replacement_character():
    """JavaScript's ``JSON.stringify`` writes a string cut inside an emoji as a lone
    surrogate escape. Before: "malformed event" in a hashed field, "string_unicode" in a
    query id. Now both answer; the hash and the vocabulary see U+FFFD, in the worker as in
    the library featuriser given the raw Python string."""
    payload = b'{"model_id": "m", "y": 1, "features": {"merchant": "\\ud83d", "emoji": "\\ude00", "\\ud83d": 1}}'
    assert limits.decode(payload)["features"] == {"merchant": "\ufffd", "emoji": "\ufffd", "\ufffd": 1}
    reason, rt = worker(payload)
    assert reason is None
    row = rt.log[-1]["value"]["event"]["active"]
    f = Featuriser(ModelConfig.model_validate(CONFIG).features)
    assert row == f.active({"merchant": "\ud83d", "emoji": "\ude00"}) == f.active(
        {"merchant": "\ufffd", "emoji": "\ufffd"})
    assert row[0] == bucket("\ufffd", 64) and row[1] == 65          # the vocabulary's U+FFFD
    reason, rt = worker(b'{"model_id": "m", "features": {}, "query_id": "q\\ud83d"}', "queries")
    assert reason is None and rt.outputs["predictions"][0]["query_id"] == "q\ufffd"


def test_a_surrogate_pair_is_its_character_and_a_model_id_keeps_its_pattern():
    _, rt = worker(b'{"model_id": "m", "y": 1, "features": {"emoji": "\\ud83d\\ude00"}}')
    assert rt.log[-1]["value"]["event"]["active"][1] == 66          # the vocabulary's U+1F600
    reason, _ = worker(b'{"model_id": "m\\ud83d", "y": 1, "features": {}}')
    assert reason == "invalid: model_id: string_pattern_mismatch"


def test_the_limits_are_in_the_json_schemas_dpstream_schemas_writes():
    schemas = json_schemas()
    for name in ("LabeledExample", "Query", "ModelConfig"):
        assert schemas[name]["x-dpstream-limits"] == {
            "max_bytes": 524_288, "max_depth": 128, "max_members": 1_000, "max_integer_digits": 4_300}
        assert "Structural limits" in schemas[name]["description"]


def test_produce_still_says_where_json_breaks():
    assert check_record("examples", b'{"model_id": "m",}').startswith("malformed JSON (Expecting")


# The worker parses a record with pydantic-core when ``plain`` says byte counts keep it
# within the limits; that reading must be ``decode``'s.
chars = st.characters() | st.characters(categories=["Cs"])
scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
           | st.text(chars, max_size=5))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) |
                           st.dictionaries(st.text(chars, max_size=4), c, max_size=4), max_leaves=20)


def _same(a, b) -> bool:
    return json.dumps(a) == json.dumps(b)          # NaN == NaN, order of keys kept


payloads = st.binary(max_size=40) | st.builds(
    lambda v, ascii_only: json.dumps(v, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
    json_values, st.booleans())


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(payloads)
def test_when_the_fast_path_may_parse_a_record_it_reads_what_decode_reads(payload):
    try:
        fast = pydantic_core.from_json(payload)
    except ValueError:
        return
    if limits.plain(payload):
        assert _same(limits.decode(payload), fast)


def test_decode_never_raises_anything_but_its_own_error():
    for payload in (b"", b"\xff\xfe", b"[" * 200_000, b"\x00", b"1e999999", b"-",
                    b'"\\ud800"', b"[NaN]", b'{"a": 1, "a": 2}'):
        try:
            limits.decode(payload)
        except limits.LimitError:
            pass
    assert math.isnan(limits.decode(b"[NaN]")[0]) and limits.decode(b'{"a": 1, "a": 2}') == {"a": 2}
