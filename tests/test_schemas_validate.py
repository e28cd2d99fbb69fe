"""The JSON Schemas ``dpstream schemas`` exports, checked by a JSON Schema validator
(jsonschema) against what users write: the shipped examples and every JSON block of the
docs. And the kind registry seen from every entry point (issue 43, items 1 and 2)."""
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.docs.blocks import all_blocks

ROOT = Path(__file__).resolve().parents[1]
DPSTREAM = str(Path(sys.executable).parent / "dpstream")


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> dict:
    """The schemas as a user gets them: ``dpstream schemas`` through the installed command."""
    out = tmp_path_factory.mktemp("schemas")
    done = subprocess.run([DPSTREAM, "schemas", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


def validator(schema: dict):
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_the_exported_model_schema_offers_every_kind(schemas):
    """Before: ``params`` was ``oneOf: []`` (the kinds registered themselves only when an
    entry point happened to import them), so every registration failed validation."""
    from dpstream.agents.kinds import KINDS
    params = schemas["ModelConfig"]["properties"]["params"]
    assert set(params["discriminator"]["mapping"]) == set(KINDS)
    assert len(params["oneOf"]) == len(KINDS)


def test_the_exported_schemas_validate_the_shipped_examples(schemas):
    ex = ROOT / "examples"
    validator(schemas["ModelConfig"]).validate(json.loads((ex / "card-fraud.model.json").read_text()))
    for name, schema in (("card-fraud.examples.jsonl", "LabeledExample"),
                         ("card-fraud.queries.jsonl", "Query")):
        check = validator(schemas[schema])
        for line in (ex / name).read_text().splitlines()[::10]:      # every tenth: seconds, not minutes
            check.validate(json.loads(line))


def _json_blocks():
    """Every JSON block of the README, examples/README.md and docs/ (tests/docs/blocks.py)."""
    for block in all_blocks():
        if block.lang == "json":
            yield pytest.param(block.text, id=block.where)


def record_type(record: dict) -> str:
    """Which exported schema a record of the docs is an instance of."""
    if "params" in record:
        return "ModelConfig"
    if "status" in record and "seq" in record:
        return "Prediction"
    return "LabeledExample" if "y" in record else "Query"


@pytest.mark.parametrize("block", list(_json_blocks()))
def test_every_json_block_of_the_docs_is_valid_for_its_schema(schemas, block):
    """A config in the docs is a complete registration a user can paste: valid JSON
    that the exported schema (and ModelConfig itself) accepts, and one its kind finds
    feasible (the check `dpstream models register` runs before sending). A record is
    checked against the schema of its type (a prediction record's too)."""
    value = json.loads(block)
    records = value if isinstance(value, list) else [value]
    for record in records:
        kind = record_type(record)
        validator(schemas[kind]).validate(record)
        if kind == "ModelConfig":             # and feasible, as `dpstream models register` checks
            from dpstream.agents.kinds import kind as kind_of
            from dpstream.schemas import ModelConfig
            config = ModelConfig.model_validate(record)
            assert kind_of(config.kind).config_problem(config) is None, config.model_id


@pytest.mark.parametrize("change, where", [
    (lambda c: c["params"].update(kind="dp_winnow"), "params"),
    (lambda c: c["params"].update(max_activ=3), "params"),
    (lambda c: c["params"].pop("kind"), "params"),
    (lambda c: c["budget"].update(epsilon=-1), "budget"),
])
def test_the_schema_refuses_what_the_worker_refuses(schemas, change, where):
    config = json.loads((ROOT / "examples" / "card-fraud.model.json").read_text())
    change(config)
    with pytest.raises(jsonschema.ValidationError) as err:
        validator(schemas["ModelConfig"]).validate(config)
    assert where in list(err.value.absolute_path) or where in str(err.value.message)


def test_a_library_user_validates_a_registration_without_importing_the_kinds():
    """In a fresh interpreter, only ``dpstream.schemas.config`` imported: before, every
    kind was unknown ("none registered (import dpstream.agents)")."""
    code = ("from dpstream.schemas.config import ModelConfig\n"
            "c = ModelConfig.model_validate({'model_id': 'm', 'dimension': 10, 'budget': "
            "{'epsilon': 1.0, 'delta': 1e-6}, 'params': {'kind': 'continual_winnow', 'max_active': 3}})\n"
            "s = ModelConfig.model_json_schema()['properties']['params']\n"
            "print(c.kind, sorted(s['discriminator']['mapping']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    from dpstream.agents.kinds import KINDS
    assert done.stdout.split(None, 1) == ["continual_winnow", f"{sorted(KINDS)}\n"]


def test_the_schemas_layer_does_not_import_the_kinds_when_it_loads():
    """Layers one-way at import (docs/architecture.md, "Layers"): schemas reads the kinds' registry
    on first use only."""
    code = ("import sys, dpstream.schemas, dpstream.schemas.config\n"
            "print(any(m.startswith('dpstream.agents') for m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr
