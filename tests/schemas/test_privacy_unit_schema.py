"""The privacy unit in the schemas: a registration's ``privacy_unit``, an example's
``privacy_id``, and errors that never quote an ID."""
import json

import pytest
from pydantic import ValidationError

from dpstream.agents.sequencer import reason_of
from dpstream.schemas import LabeledExample, LedgerEntryEvent, ModelConfig, Query
from dpstream.schemas.config import config_error_text

BASE = {"model_id": "m", "dimension": 4, "budget": {"epsilon": 2.0, "delta": 1e-6},
        "params": {"kind": "dp_ftrl", "horizon": 1000}}
FIELDS = [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
          {"type": "categorical", "name": "customer_id", "hash_buckets": 16}]


def _refusal(raw: dict) -> str:
    with pytest.raises(ValidationError) as err:
        ModelConfig.model_validate(raw)
    return config_error_text(err.value, raw)


def test_the_unit_defaults_to_one_example_and_names_itself_on_the_ledger():
    assert ModelConfig.model_validate(BASE).unit == "example"
    person = ModelConfig.model_validate({**BASE, "privacy_unit": {"max_contributions": 3}})
    assert person.privacy_unit.id_field == "privacy_id" and person.unit == "person<=3/epoch,<=1 epochs"
    entry = {"model_id": "m", "seq": 0, "epoch": 0, "mechanism": "x", "epsilon": 1.0, "delta": 0.0,
             "count": 1, "charges": 1, "spent_epsilon": 1.0, "spent_delta": 0.0, "rule": "basic",
             "budget_epsilon": 2.0, "budget_delta": 0.0}
    assert LedgerEntryEvent.model_validate(entry).unit == "example"      # a ledger of before
    LedgerEntryEvent.model_validate({**entry, "unit": person.unit})
    with pytest.raises(ValidationError):
        LedgerEntryEvent.model_validate({**entry, "unit": "anyone"})


@pytest.mark.parametrize("k", [0, 1001, 2.0, True, "3"])
def test_the_bound_is_a_whole_number_from_1_to_1000(k):
    text = _refusal({**BASE, "privacy_unit": {"max_contributions": k}})
    assert text.startswith("privacy_unit.max_contributions:") and ";" not in text


def test_a_declared_feature_named_as_the_id_field_is_refused_in_one_line():
    raw = {**BASE, "features": FIELDS, "privacy_unit": {"id_field": "customer_id", "max_contributions": 2}}
    del raw["dimension"]
    text = _refusal(raw)
    assert "\n" not in text and "id_field names a declared feature" in text
    raw["features"] = FIELDS[:1]
    assert ModelConfig.model_validate(raw).privacy_unit.id_field == "customer_id"


def test_a_raw_feature_id_field_needs_declared_features():
    text = _refusal({**BASE, "privacy_unit": {"id_field": "customer_id", "max_contributions": 2}})
    assert "declare the features" in text and "\n" not in text


def test_a_misspelt_unit_field_is_named_with_the_fields_it_has():
    text = _refusal({**BASE, "privacy_unit": {"max_contribution": 2}})
    assert "did you mean 'max_contributions'" in text


@pytest.mark.parametrize("value", ["x" * 200_000, 10 ** 4000, -7, "Zoë 🙂", 12.0])
def test_an_id_of_text_or_a_whole_number_is_taken_whatever_its_size(value):
    e = LabeledExample.model_validate_json(json.dumps({"model_id": "m", "x": [1.0], "y": 1, "privacy_id": value}))
    assert e.privacy_id == (int(value) if isinstance(value, float) else value)


@pytest.mark.parametrize("value", [1.5, True, [31337], {"id": 31337}])
def test_an_id_of_another_type_is_refused_without_its_value(value):
    raw = json.dumps({"model_id": "m", "x": [1.0], "y": 1, "privacy_id": value})
    with pytest.raises(ValidationError) as err:
        LabeledExample.model_validate_json(raw)
    reason = reason_of(err.value)
    assert reason.startswith("invalid: privacy_id") and "31337" not in reason and "1.5" not in reason


def test_a_query_carries_no_id():
    with pytest.raises(ValidationError) as err:
        Query.model_validate({"model_id": "m", "x": [1.0], "privacy_id": "alice"})
    assert "alice" not in reason_of(err.value) and "extra_forbidden" in reason_of(err.value)


def test_the_exported_schemas_know_the_unit():
    from dpstream.schemas import json_schemas
    schemas = json_schemas()
    unit = schemas["ModelConfig"]["$defs"]["PrivacyUnit"]
    assert unit["properties"]["max_contributions"]["maximum"] == 1000
    assert {"type": "string"} in schemas["LabeledExample"]["properties"]["privacy_id"]["anyOf"]
    assert "privacy_id" not in schemas["Query"]["properties"]
