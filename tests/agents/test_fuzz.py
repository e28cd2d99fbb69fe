"""The sequencer never stops on input (issue 10): arbitrary bytes, arbitrary JSON and
event-shaped records with arbitrary values each give exactly one output (a dead letter
when invalid) and change nothing but the input position. 3 x 3,400 hypothesis cases."""
import asyncio
import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import MODEL_EVENTS, REJECTED, sequence_batch

CONFIG = {"type": "model", "model_id": "w1", "dimension": 8, "budget": {"epsilon": 2.0, "delta": 1e-6},
          "params": {"kind": "continual_winnow", "max_active": 4, "block": 100,
                     "horizon": 1_000_000, "eta": 1.0, "margin": 5.0}}
STATE = {"config/w1": CONFIG}
FIELDS = ["type", "model_id", "x", "active", "y", "query_id", "dimension", "budget", "params",
          "kind", "epsilon", "delta"]
scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=10**40) |
           st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20))
json_values = st.recursive(scalars, lambda c: st.lists(c, max_size=6) |
                           st.dictionaries(st.text(max_size=8), c, max_size=6), max_leaves=25)
event_like = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6),
                             json_values | st.sampled_from(["w1", "example", "query", "model", 1, -1]),
                             max_size=7)
SETTINGS = settings(max_examples=3400, deadline=None, suppress_health_check=list(HealthCheck))


def check_one(payload: bytes, topic: str) -> None:
    state = copy.deepcopy(STATE)
    out = []

    async def emit(t, key, value):
        out.append((t, value))

    asyncio.run(sequence_batch([RawRecord(topic, 0, 5, None, payload)], state, emit))
    assert len(out) == 1
    t, value = out[0]
    if t == REJECTED:
        assert set(value) == {"source", "reason"} and value["source"] == f"{topic}:0:5"
        assert state == {**STATE, f"src/{topic}:0": 5}          # nothing but the position
    else:
        assert t == MODEL_EVENTS


@SETTINGS
@given(st.binary(max_size=400), st.sampled_from(["models", "examples", "queries"]))
def test_arbitrary_bytes_never_stop_the_sequencer(payload, topic):
    check_one(payload, topic)


@SETTINGS
@pytest.mark.slow
@given(json_values, st.sampled_from(["models", "examples", "queries"]))
def test_arbitrary_json_never_stops_the_sequencer(value, topic):
    check_one(json.dumps(value).encode(), topic)


@SETTINGS
@pytest.mark.slow
@given(event_like, st.sampled_from(["models", "examples", "queries"]))
def test_event_shaped_records_with_arbitrary_values_never_stop_the_sequencer(value, topic):
    check_one(json.dumps(value).encode(), topic)


def test_the_three_poison_records_of_issue_10_are_dead_letters():
    for payload in (b"[" * 100_000 + b"]" * 100_000,                        # RecursionError
                    b'{"model_id": "w1", "active": [1], "y": ' + b"9" * 5000 + b"}",  # int too long
                    b'{"type": [1], "model_id": "w1"}'):                    # TypeError
        check_one(payload, "examples")
