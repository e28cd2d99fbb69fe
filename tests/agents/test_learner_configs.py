"""Issue 45's registration options for dp_ftrl and predictor: validated at the schema
with messages that name the parameter and its value, and reachable end to end."""
import asyncio

import pytest
from pydantic import ValidationError

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig
from dpstream.streams.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"learner-config-tests-key-0000000")
FTRL = {"model_id": "ftrl", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
        "params": {"kind": "dp_ftrl", "horizon": 100}}


def validate(cfg: dict, **params) -> ModelConfig:
    return ModelConfig.model_validate({"type": "model", **cfg, "params": {**cfg["params"], **params}})


@pytest.mark.parametrize("params, needle", [
    ({"prior": 1.5}, "prior"), ({"prior": 0}, "prior"), ({"prior_weight": -0.1}, "prior_weight"),
    ({"prior": 0.1, "prior_weight": 0.2}, "prior_weight=0.2"),
])
def test_dp_ftrl_prior_options_are_refused_naming_the_parameter_and_value(params, needle):
    with pytest.raises(ValidationError) as err:
        validate(FTRL, **params)
    text = str(err.value)
    assert needle in text and str(list(params.values())[-1]) in text


def run(items):
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(items))
    return rt


def test_a_dp_ftrl_query_before_the_first_release_gets_no_label_and_a_declared_prior_answers():
    """Before: a query before the first release was answered +1 (sgn 0)."""
    query = ("queries", {"model_id": "ftrl", "x": [0.2, -0.3], "query_id": "q"})
    rt = run([("models", FTRL), query])
    (p,) = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert p["label"] is None and p["status"] == "learning"
    declared = {**FTRL, "params": {**FTRL["params"], "prior": 0.1}}
    rt = run([("models", declared), query])
    (p,) = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert p["label"] == -1 and p["status"] == "answered"
