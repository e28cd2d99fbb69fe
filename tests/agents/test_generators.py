"""Every hypothesis class of learners/generators.py is selectable from a model config and
runs end to end on the embedded runtime: registration, epoch, private answers, stored
hypotheses that restore after a restart, and inputs outside the class's domain refused."""
import numpy as np
import pytest
from pydantic import ValidationError

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig
from dpstream.streams.tools.embedded import EmbeddedRuntime

KEY = b"generator-tests-key-000000000000"
RNG = KeyedRandomness(KEY)
N_EXAMPLES, N_QUERIES = 6000, 300
K, M = 300, 20          # gap k/8 = 37.5 counts: noise alone rarely makes a hard query
DOMAIN = 20
TABLE = [[1 if i >= t else -1 for i in range(DOMAIN)] for t in range(DOMAIN + 1)]   # thresholds


def signs(bits):
    return np.where(bits, 1.0, -1.0)


def data(generator: str, n: int, seed: int):
    """(rows, labels) of a target inside the class (d and domain as the config below)."""
    s = RNG.stream("generator-tests", generator, seed)
    if generator in ("thresholds", "intervals"):
        x = s.uniform(n) * 10
        y = (x >= 4) & (x <= 7) if generator == "intervals" else x >= 4
        return x[:, None], y
    if generator == "finite":
        i = s.below(DOMAIN, size=n).astype(float)
        return i[:, None], i >= 7                                 # the table's hypothesis 7
    bits = s.uniform(6 * n).reshape(n, 6) < 0.5
    y = {"conjunctions": bits[:, 0] & bits[:, 1],
         "disjunctions": bits[:, 0] | bits[:, 1],
         "decision_lists": np.where(bits[:, 2], True, np.where(bits[:, 3], False, bits[:, 4]))}[generator]
    return signs(bits), y


def config(generator: str) -> dict:
    params = {"kind": "predictor", "generator": generator, "k": K, "m": M, "v_max": 8}
    if generator == "finite":
        params["table"] = TABLE
    d = 6 if generator in ("conjunctions", "disjunctions", "decision_lists") else 1
    return {"model_id": generator, "dimension": d, "budget": {"epsilon": 8.0, "delta": 1e-6},
            "params": params}


def events(generator: str):
    X, y = data(generator, N_EXAMPLES, 0)
    Q, truth = data(generator, N_QUERIES, 1)
    out = [("models", config(generator))]
    out += [("examples", {"model_id": generator, "x": r.tolist(), "y": 1 if t else -1}) for r, t in zip(X, y)]
    out += [("queries", {"model_id": generator, "x": r.tolist(), "query_id": f"q{i}"})
            for i, r in enumerate(Q)]
    return out, np.where(truth, 1, -1)


GENERATORS = ["thresholds", "intervals", "finite", "conjunctions", "disjunctions", "decision_lists"]


@pytest.mark.parametrize("generator", GENERATORS)
async def test_each_generator_answers_most_queries_correctly_and_restores_after_a_restart(generator):
    evs, truth = events(generator)
    whole = EmbeddedRuntime(RNG)
    await whole.feed_all(evs)
    assert not whole.outputs["rejected"]
    answers = [p for p in whole.outputs["predictions"] if p["kind"] == "query"]
    labels = np.array([p["label"] if p["label"] is not None else 0 for p in answers])
    answered = np.array([p["status"] == "answered" for p in answers])
    assert answered.mean() >= 0.7
    assert np.mean(labels[answered] == truth[answered]) >= 0.85

    # a restart half-way through the queries reloads the stored hypotheses
    state = {}
    cut = 1 + N_EXAMPLES + N_QUERIES // 2
    first = EmbeddedRuntime(RNG, state)
    await first.feed_all(evs[:cut])
    second = EmbeddedRuntime(RNG, state)
    second.offsets.update(first.offsets)
    second.log_offset = first.log_offset
    await second.feed_all(evs[cut:])
    for topic in ("predictions", "ledger"):
        assert first.outputs[topic] + second.outputs[topic] == whole.outputs[topic]
    assert any(k.startswith(f"model/{generator}/hyp/") for k in state)


@pytest.mark.parametrize("generator, x, needle", [
    ("finite", [20.0], "integer in [0, 20)"),
    ("finite", [2.5], "integer in [0, 20)"),
    ("conjunctions", [1.0, 0.0, 1.0, 1.0, -1.0, 1.0], "{-1, +1}^d"),
    ("halfspace", None, "sparse 'active' features need a model over {-1, +1}^d"),
])
async def test_an_input_outside_the_class_domain_is_dead_lettered(generator, x, needle):
    rt = EmbeddedRuntime(RNG)
    feature = {"x": x} if x is not None else {"active": [0, 2]}
    await rt.feed_all([("models", config(generator)),
                       ("examples", {"model_id": generator, **feature, "y": 1})])
    assert needle in rt.outputs["rejected"][0]["reason"]
    assert not rt.outputs["predictions"]


@pytest.mark.parametrize("change", [
    {"generator": "finite"},                                   # no table
    {"generator": "thresholds", "table": [[1, -1]]},           # a table it does not take
    {"generator": "finite", "table": [[1, -1], [1]]},          # ragged
    {"generator": "intervals", "adaptive": True},              # adaptive is halfspaces only
])
def test_a_generator_config_that_cannot_work_is_refused_by_the_schema(change):
    cfg = config("thresholds")
    cfg["params"] = {**cfg["params"], **change}
    with pytest.raises(ValidationError):
        ModelConfig.model_validate({"type": "model", **cfg})


async def test_a_class_that_needs_one_dimension_is_refused_with_another():
    cfg = {**config("intervals"), "dimension": 3}
    rt = EmbeddedRuntime(RNG)
    await rt.feed_all([("models", cfg)])
    assert "needs dimension 1" in rt.outputs["rejected"][0]["reason"]
