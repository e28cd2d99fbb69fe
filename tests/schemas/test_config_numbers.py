"""A configuration's numbers are finite, and the error says so."""
import pytest


@pytest.mark.parametrize("where", ["budget.epsilon", "params.eta"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_configs_numbers_are_finite_and_the_error_says_so(where, value):
    """NaN epsilon was refused as "should be less than or equal to 1000000 (got nan)", the
    wrong problem; an infinite step size got through to the kind's own checks."""
    from pydantic import ValidationError

    from dpstream.agents.kinds import KINDS  # noqa: F401  (every kind registered)
    from dpstream.schemas import ModelConfig
    from dpstream.schemas.config import config_error_text
    raw = {"model_id": "m", "budget": {"epsilon": 1.0, "delta": 1e-6}, "params": {"kind": "dp_ftrl", "horizon": 100}}
    section, name = where.split(".")
    raw[section][name] = value
    with pytest.raises(ValidationError) as err:
        ModelConfig.model_validate(raw)
    assert f"{where}: Input should be a finite number" in config_error_text(err.value, raw)
