"""Bounded means bounded (issue 42), by property: for every model kind and every field type
(numeric, numeric with edges and float64-wide bounds, categorical with a vocabulary,
hashed categorical, boolean), any JSON value in a declared field, any unknown field and
any missing field yield an answered record whose row is within the kind's bound; and
the worker dead-letters a record exactly when ``dpstream produce``'s local check (the
public schema and the structural limits) refuses it.

Before the fix, the first property failed within a few dozen examples: a lone UTF-16
surrogate in the hashed field (``{"merchant": "\\ud83d"}``, what JavaScript's
``JSON.stringify`` writes for a string cut inside an emoji) came back as "malformed
event" for every kind, and the float64-wide field ``score`` made dense rows NaN
("x contains NaN") for most values."""
import asyncio
import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.learners.features import Featuriser
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig
from dpstream.streams.cli.commands import check_record
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.worker.outputs import encode

RNG = KeyedRandomness(b"bounded-property-key-00000000000")
AMOUNT = {"type": "numeric", "name": "amount", "lower": 0, "upper": 100, "bins": 4}
SCORE = {"type": "numeric", "name": "score", "lower": -8e307, "upper": 8e307, "bins": 4,
         "edges": [-1e300, 0.0, 1e300]}              # as wide as float64 allows: 1.6e308
COUNTRY = {"type": "categorical", "name": "country", "vocabulary": ["fr", "us", "\ufffd"]}
MERCHANT = {"type": "categorical", "name": "merchant", "hash_buckets": 16}
ONLINE = {"type": "boolean", "name": "online"}
ALL = [AMOUNT, SCORE, COUNTRY, MERCHANT, ONLINE]
FIELD_NAMES = [f["name"] for f in ALL]
BUDGET = {"epsilon": 8.0, "delta": 1e-6}
PREDICTOR = {"kind": "predictor", "k": 80, "m": 10, "v_max": 4}
# the finite class over online x country: 3 x 4 points
TABLE = [[1 if (i >> h) & 1 else -1 for i in range(12)] for h in range(4)]
MODELS = {
    "winnow": ({"kind": "winnow", "mode": "practical", "eps_hat": 1.0, "eta": 0.2, "m": 50,
                "K": 5, "L": 2.0}, ALL, {"epsilon": 50.0, "delta": 1e-6}),
    "continual": ({"kind": "continual_winnow", "block": 10, "horizon": 100}, ALL, BUDGET),
    "ftrl": ({"kind": "dp_ftrl", "horizon": 100, "block": 10}, ALL, BUDGET),
    "dlist": ({"kind": "decision_list", "window": 50}, ALL, BUDGET),
    "halfspace": ({**PREDICTOR, "generator": "halfspace"}, ALL, BUDGET),
    "conjunctions": ({**PREDICTOR, "generator": "conjunctions"}, ALL, BUDGET),
    "thresholds": ({**PREDICTOR, "generator": "thresholds"}, [AMOUNT], BUDGET),
    "finite": ({**PREDICTOR, "generator": "finite", "table": TABLE}, [ONLINE, COUNTRY], BUDGET),
}
REGISTRATIONS = {mid: {"model_id": mid, "budget": budget, "params": params, "features": fields}
                 for mid, (params, fields, budget) in MODELS.items()}


def _registered() -> dict:
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", r) for r in REGISTRATIONS.values()]))
    assert rt.outputs["rejected"] == [], rt.outputs["rejected"]
    return rt.state


STATE = _registered()
CONFIGS = {mid: ModelConfig.model_validate(r) for mid, r in REGISTRATIONS.items()}
FEATURISERS = {mid: Featuriser(c.features) for mid, c in CONFIGS.items()}

# Any string a client can write, lone surrogates included (hypothesis leaves them out of
# text by default), and any JSON value: huge integers (to the 4,300-digit limit), NaN and
# infinities (Python's json writes them), nesting. A declared field gets one of the edge
# values half the time, so that a run of a hundred examples meets each of them.
EDGES = ["\ud83d", "a\ude00", "\udbff\ud83d", "\ud83d\ude00", 1e307, -1e307, 8e307,
         1.7976931348623157e308, 5e-324, float("nan"), float("-inf"), 10**4300 - 1]
chars = st.characters() | st.characters(categories=["Cs"])
texts = st.sampled_from(["\ud83d", "fr", "us", ""]) | st.text(chars, max_size=6)
integers = (st.integers() | st.integers(min_value=-10**40, max_value=10**40)
            | st.integers(min_value=10**4299, max_value=10**4300 - 1))
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = texts | floats | integers | st.booleans() | st.none()
json_values = scalars | st.recursive(scalars, lambda c: st.lists(c, max_size=3) |
                                     st.dictionaries(texts, c, max_size=3), max_leaves=8)
declared = st.fixed_dictionaries({}, optional={
    name: st.sampled_from(EDGES) | json_values for name in FIELD_NAMES})
features = st.builds(lambda d, extra: {**extra, **d}, declared,
                     st.dictionaries(texts, json_values, max_size=3))
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


def _feed(items: list[tuple[str, bytes]]) -> EmbeddedRuntime:
    rt = EmbeddedRuntime(RNG, copy.deepcopy(STATE))
    asyncio.run(rt.feed_all(items))
    return rt


def _records(feats: dict, y: int, query_id) -> list[tuple[str, bytes]]:
    items = []
    for mid in MODELS:
        example = {"model_id": mid, "features": feats, "y": y}
        query = {"model_id": mid, "features": feats, **({"query_id": query_id} if query_id is not None else {})}
        items += [("examples", json.dumps(example).encode()), ("queries", json.dumps(query).encode())]
    return items


def assert_within_bound(mid: str, event: dict) -> None:
    """The row a model's learner takes from a featurised record (module docstring)."""
    f, config = FEATURISERS[mid], CONFIGS[mid]
    if config.params.kind == "predictor" and config.params.generator == "finite":
        assert event["x"] == [float(int(event["x"][0]))] and 0 <= event["x"][0] < f.domain_size
    elif "active" in event:                          # binary: one slot per field, in its range
        active = event["active"]
        assert len(active) == f.active_count
        for a, o, field in zip(active, f.binary_offsets, f.fields):
            assert o <= a < o + field.binary_size
    else:                                            # real: entries in [-1, 1], one per field
        x = event["x"]
        assert len(x) == f.real_dimension
        assert all(math.isfinite(v) and -1.0 <= v <= 1.0 for v in x)
        for o, field in zip(f.real_offsets, f.fields):
            assert sum(v != 0 for v in x[o:o + field.real_size]) <= 1


@SETTINGS
@given(features, st.sampled_from([-1, 1]), st.none() | texts)
def test_any_json_in_declared_features_is_answered_with_a_bounded_row(feats, y, query_id):
    rt = _feed(_records(feats, y, query_id))
    assert rt.outputs["rejected"] == []
    assert len(rt.outputs["predictions"]) == 2 * len(MODELS)
    for entry in rt.log:
        event = entry["value"]["event"]
        assert_within_bound(event["model_id"], event)
    if isinstance(query_id, str):                    # echoed as the decoder reads it
        answers = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
        assert all(p["query_id"] == query_id.encode("utf-16-le", "surrogatepass").decode(
            "utf-16-le", "replace") for p in answers)
    for value in [*(v for vs in rt.outputs.values() for v in vs), *(e["value"] for e in rt.log)]:
        encode(value)               # the worker's codec (orjson: no lone surrogates) takes each


# Event-shaped records: a valid record of the topic, half the time with one field set to
# any JSON value (a schema field or an unknown one) or left out.
TOP = ["model_id", "features", "y", "query_id", "x", "active", "type"]
LEFT_OUT = object()


def _record(topic: str, mid: str, feats: dict, y: int, change) -> dict:
    record = {"model_id": mid, "features": feats, **({"y": y} if topic == "examples" else {})}
    if change is not None:
        key, value = change
        if value is LEFT_OUT:
            record.pop(key, None)
        else:
            record[key] = value
    return record


def event_like(topic: str):
    return st.builds(_record, st.just(topic), st.sampled_from(list(MODELS)), features,
                     st.sampled_from([-1, 1]), st.none() | st.tuples(
                         st.sampled_from(TOP) | texts, json_values | st.just(LEFT_OUT)))


@settings(SETTINGS, max_examples=100)
@given(st.data())
def test_the_worker_dead_letters_exactly_what_produce_refuses_locally(data):
    """A record the local check passes is answered; one it refuses is dead-lettered (the
    check cannot know a model's dimension, so records with ``x`` or ``active`` rows, which
    these models do not take, are left to the worker alone)."""
    topic = data.draw(st.sampled_from(["examples", "queries"]))
    record = data.draw(event_like(topic))
    payload = json.dumps(record).encode()
    local = check_record(topic, payload)
    rt = _feed([(topic, payload)])
    rejected = rt.outputs["rejected"]
    if local is not None:
        assert len(rejected) == 1
    elif record.get("model_id") in MODELS and "x" not in record and "active" not in record:
        assert rejected == [] and len(rt.outputs["predictions"]) == 1
        event = rt.log[-1]["value"]["event"]
        assert_within_bound(event["model_id"], event)


@pytest.mark.parametrize("value", ["\ud83d", "\ude00x", "a\ud83d\ud83d"])
def test_a_lone_surrogate_in_a_hashed_field_is_answered_by_every_kind(value):
    """The issue's record, for every kind: before the fix each was 'malformed event'."""
    rt = _feed(_records({"merchant": value, value: value}, 1, value))
    assert rt.outputs["rejected"] == []
    assert len(rt.outputs["predictions"]) == 2 * len(MODELS)
