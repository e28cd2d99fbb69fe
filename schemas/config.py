"""Model registration records (the ``models`` topic and ``dpstream models register``).

The envelope every registration shares lives here; each kind's ``params`` schema lives
with the kind (agents/kinds/<kind>.py), so a new kind is one module.

The kinds' params schemas come from one explicit list, ``agents.kinds.KINDS``, read the
first time a registration is validated or a schema exported (``params_schemas``), not
when this module loads. Why this way round:

* a kind's params belong with its kind (one module per kind, docs/architecture.md,
  "Model kinds and the learner protocol"), and the kinds import this module for ``KindParams``, so this module cannot
  import them while it loads: that would be a cycle, and the shared layer pointing up;
* the previous design filled a table here as a side effect of importing each kind
  module, so an entry point that never imported them saw no kind at all (issue 43:
  ``dpstream models list`` printed nothing, ``dpstream schemas`` wrote ``oneOf: []``,
  and ``from dpstream.schemas.config import ModelConfig`` refused every registration);
* reading the list on first use gives every entry point (the CLI, ``json_schemas``, a
  library user's ``ModelConfig.model_validate`` or ``model_json_schema``) every kind, and a
  kind module that cannot be imported fails that first use with its own ImportError
  rather than leaving a world without kinds. The import is by name, at call time: the
  layers stay one-way at import, and the kinds remain the one place that lists them.
"""
from __future__ import annotations

from difflib import get_close_matches
from typing import Literal

from pydantic import (ConfigDict, Field, SerializeAsAny, ValidationError, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from . import limits
from .events import ModelId, Strict
from .features import FeatureField, FieldName, check_fields, declared_dimension


# A configuration's numbers are finite: NaN failed ``le=1e6`` with "should be less than or
# equal to 1000000 (got nan)", which names the wrong problem.
FINITE = ConfigDict(**Strict.model_config, allow_inf_nan=False)


class Budget(Strict):
    model_config = FINITE
    epsilon: float = Field(gt=0, le=1e6)
    delta: float = Field(ge=0, lt=1)


class KindParams(Strict):
    """What every model kind's params share: the ``kind`` tag. Each kind's module
    (agents/kinds/) subclasses this as its ``Params``."""
    model_config = FINITE
    kind: str

    def input_form(self) -> str:
        """"binary" (x in {-1, +1}^d, dense or as active indices) or "real" (dense x in R^d)."""
        return "binary"

    def declared_dimension(self, fields: list) -> int:
        """The dimension declared ``fields`` give a model of this kind: their slots in its
        input form (schemas/features.py)."""
        return declared_dimension(fields, self.input_form() == "binary")


#: where a person's ID sits by default: the example's top-level ``privacy_id`` field
TOP_LEVEL_ID = "privacy_id"
MAX_CONTRIBUTIONS = 1_000
MAX_EPOCHS = 1_000


class PrivacyUnit(Strict):
    """Whom the guarantee protects: one person (a privacy ID), of whose examples at most
    ``max_contributions`` per epoch reach the learner (the first ones in the model's log
    order; docs/privacy.md, "The privacy unit"). ``id_field``: where a record's ID is:
    ``"privacy_id"``, the example's top-level field, or the name of a key of the record's
    raw ``features`` (a CSV column such as ``customer_id``), which no declared feature
    may have. ``max_epochs``: in how many epochs at most a person's examples reach the
    learner (the first ones in which the person has examples): epochs are disjoint in
    examples, not in people, so a person's guarantee over the model's life is the
    composition over these epochs, which every surface states."""
    id_field: FieldName = TOP_LEVEL_ID
    max_contributions: int = Field(ge=1, le=MAX_CONTRIBUTIONS)
    max_epochs: int = Field(default=1, ge=1, le=MAX_EPOCHS)


_PARAMS: dict[str, type[KindParams]] = {}


def params_schemas() -> dict[str, type[KindParams]]:
    """The params schema of every kind, by kind name: ``agents.kinds.KINDS``, read on first
    use (the module docstring says why not at import)."""
    if not _PARAMS:
        from dpstream.agents.kinds import KINDS
        _PARAMS.update({name: k.Params for name, k in KINDS.items()})
    return dict(_PARAMS)


class ModelConfig(Strict):
    """A model registration (public configuration). ``params`` is validated by the schema
    its ``kind`` names (``params_schemas``: every kind of agents/kinds/). With declared ``features``
    (schemas/features.py) the dimension follows from them and may be left out."""
    type: Literal["model"] = "model"
    model_id: ModelId
    dimension: int | None = Field(default=None, ge=1, le=10_000_000)
    budget: Budget
    params: SerializeAsAny[KindParams]
    features: list[FeatureField] | None = None
    # None: the unit is one example (replace-one); else one person (``PrivacyUnit``)
    privacy_unit: PrivacyUnit | None = None
    model_config = ConfigDict(json_schema_extra=limits.document)   # its record's limits too

    @model_validator(mode="after")
    def _unit_field(self):
        u = self.privacy_unit
        if u is None:
            return self
        if self.features is not None and any(f.name == u.id_field for f in self.features):
            raise ValueError("privacy_unit.id_field names a declared feature: a person's ID is not a "
                             "feature (it would be learned from); drop that feature, or name another field")
        if u.id_field != TOP_LEVEL_ID and self.features is None:
            raise ValueError(f"privacy_unit.id_field other than '{TOP_LEVEL_ID}' names a key of raw "
                             "'features', which only a model that declares its features takes: declare "
                             f"the features, or leave id_field at '{TOP_LEVEL_ID}' (the example's own field)")
        return self

    @property
    def unit(self) -> str:
        """The privacy unit as the ledger names it: "example", or "person<=k/epoch,<=E epochs"."""
        u = self.privacy_unit
        return "example" if u is None else f"person<={u.max_contributions}/epoch,<={u.max_epochs} epochs"

    @model_validator(mode="after")
    def _dimension(self):
        if self.features is None:
            if self.dimension is None:
                raise ValueError("give the dimension, or declare features (which fix it)")
            return self
        check_fields(self.features)
        d = self.params.declared_dimension(self.features)
        if self.dimension is not None and self.dimension != d:
            raise ValueError(f"dimension {self.dimension} does not match the declared features, "
                             f"which make {d}: leave the dimension out")
        if d > 10_000_000:
            raise ValueError(f"the declared features make dimension {d}, above 10,000,000")
        object.__setattr__(self, "dimension", d)
        return self

    @field_validator("params", mode="wrap")
    @classmethod
    def _kind_params(cls, value, handler):
        if isinstance(value, KindParams):
            return value
        if not isinstance(value, dict):
            raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
        kind = value.get("kind")
        schemas = params_schemas()
        schema = schemas.get(kind) if isinstance(kind, str) else None
        if schema is None:
            raise PydanticCustomError(
                "union_tag_invalid", "unknown kind {kind}: the kinds are {kinds}",
                {"kind": repr(kind)[:40] if isinstance(kind, str) else "(none given)",
                 "kinds": ", ".join(sorted(schemas))})
        return schema.model_validate(value)

    @property
    def kind(self) -> str:
        return self.params.kind

    @classmethod
    def model_json_schema(cls, *args, **kwargs) -> dict:
        """Pydantic's schema with ``params`` as exactly one of the kinds' schemas (each with
        its ``kind`` required, as validation requires it), not the bare ``KindParams`` the
        field's annotation names (which would refuse every real registration)."""
        schema = super().model_json_schema(*args, **kwargs)
        template = kwargs.get("ref_template", "#/$defs/{model}")
        defs = schema.setdefault("$defs", {})
        defs.pop("KindParams", None)
        kinds = sorted(params_schemas().items())
        for _, params in kinds:
            sub = params.model_json_schema(ref_template=template)
            defs.update(sub.pop("$defs", {}))
            sub["required"] = ["kind", *[r for r in sub.get("required", []) if r != "kind"]]
            defs[params.__name__] = sub
        refs = {name: template.format(model=params.__name__) for name, params in kinds}
        schema["properties"]["params"] = {
            "oneOf": [{"$ref": ref} for ref in refs.values()],
            "discriminator": {"propertyName": "kind", "mapping": refs}}
        return schema


def config_error_text(err: ValidationError, raw: object = None) -> str:
    """What is wrong with a registration, in words that say what to fix: each problem's
    place (``params.max_active``), what was given, and what is allowed (the bound, the
    known fields, the kinds). ``raw``: the registration as parsed JSON, if it was (it
    tells which kind's fields an unknown field was meant to be). A registration is public
    configuration, so its values may be quoted; only scalars of fields the schemas know
    are, cut to 40 characters."""
    known = _schema_fields()
    kind = raw.get("params", {}).get("kind") if isinstance(raw, dict) and \
        isinstance(raw.get("params"), dict) else None
    parts = []
    for e in err.errors(include_url=False):
        loc = [p for p in e["loc"] if not isinstance(p, int)]
        where = ".".join(map(str, loc)) or "registration"
        value = e.get("input")
        if e["type"] == "extra_forbidden":
            fields = _fields_at(tuple(loc[:-1]), kind)
            guess = get_close_matches(str(loc[-1]), fields, n=1)
            hint = f"did you mean '{guess[0]}'? " if guess else ""
            parts.append(f"{'.'.join(map(str, loc[:-1])) or 'registration'}: unknown field "
                         f"'{str(loc[-1])[:40]}' ({hint}allowed: {', '.join(fields)})")
            continue
        text = "missing (required)" if e["type"] == "missing" else e["msg"].removeprefix("Value error, ")
        # a feature's name is never quoted: its error names the character at fault, and
        # what it cannot show (schemas/features.py FieldName) must not reach a terminal
        shown = e["type"] != "missing" and all(str(p) in known for p in loc) and \
            isinstance(value, (int, float, str, bool)) and not (loc[:1] == ["features"] and loc[-1:] == ["name"]) \
            and loc != ["privacy_unit", "id_field"]
        parts.append(f"{where}: {text}" + (f" (got {_echoed(value)})" if shown else ""))
    return "; ".join(dict.fromkeys(parts))


ECHO_CHARS = 40      # the most characters of a given value a config error quotes


def _echoed(value) -> str:
    """A given value as a config error quotes it: at most ECHO_CHARS characters of its
    repr, then "...". Before, ``"horizon": 10**4000`` was echoed with all its 4,001
    digits (and an integer past Python's int/str limit cannot be written at all: its
    size is said instead)."""
    if isinstance(value, int) and value.bit_length() > 4 * ECHO_CHARS:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    text = repr(value[:ECHO_CHARS] if isinstance(value, str) else value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


def _schema_fields() -> set[str]:
    names = set(ModelConfig.model_fields) | set(Budget.model_fields) | set(PrivacyUnit.model_fields)
    for cls in params_schemas().values():
        names |= set(cls.model_fields)
    return names


def _fields_at(loc: tuple, kind) -> list[str]:
    """The fields a registration may have at ``loc`` (for an unknown field's hint)."""
    if not loc:
        return list(ModelConfig.model_fields)
    if loc == ("budget",):
        return list(Budget.model_fields)
    if loc == ("privacy_unit",):
        return list(PrivacyUnit.model_fields)
    if loc == ("params",) and kind in params_schemas():
        return list(params_schemas()[kind].model_fields)
    if len(loc) == 2 and loc[0] == "features":
        return ["name", "type", "lower", "upper", "bins", "edges", "vocabulary", "hash_buckets"]
    return []
