"""Pydantic v2 models of every event on dpstream's topics.

Validation happens here, at the edge (docs/concepts.md, "Bad input"): a payload that does not
parse into one of these models never reaches an agent's state; it goes to
``rejected`` with where it sat and a reason built without input values: no bytes,
size or hash of the payload (a plain hash of a small input space is inverted by
hashing guesses; a size gives away the number of active features).
Features: dense ``x`` (floats) or sparse ``active`` (indices that are +1 in a
{-1,+1}^d vector); exactly one of them.
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, ValidationError,
                      WithJsonSchema, WrapValidator, field_validator, model_validator)
from pydantic import Strict as PydanticStrict

from . import limits

ModelId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
# a position, version or count on an output topic: an int64, as Kafka's offsets are (before,
# a forged ledger line with seq 10^400 passed the schema and stopped audit-report)
Count = Annotated[int, Field(ge=-2 ** 63, lt=2 ** 63)]
LIST_MAX = limits.MAX_BYTES // 2


def _is_label(v: int) -> int:
    if v not in (-1, 1):
        raise ValueError("a label must be -1 or +1")
    return v


def _whole_label(v):
    """A JSON number equal to -1 or +1 written with a fraction (``1.0``, ``-1.0``: what
    Java's Jackson writes for a double) as the integer it equals; anything else as it is,
    for the strict check."""
    return int(v) if type(v) is float and v in (-1.0, 1.0) else v


# A JSON number equal to -1 or +1, as the exported JSON Schema says: since draft 6 a
# number with a zero fractional part is an "integer", and ``enum`` compares numbers by
# value, so {"type": "integer", "enum": [-1, 1]} takes 1.0 (json-schema.org, Validation
# 6.1.1 and 6.1.2; Core 4.2.2). Strict otherwise: true, "1", 2, 2.0, 0.5 are refused, not
# coerced (0/1 and true/false files are mapped at the CLI's edge only,
# streams/tools/userfiles.py ``map_labels``).
Label = Annotated[int, BeforeValidator(_whole_label), PydanticStrict(), AfterValidator(_is_label),
                  WithJsonSchema({"type": "integer", "enum": [-1, 1]})]


def _whole_indices(v, handler):
    """Sparse ``active`` indices written as whole doubles (``[3.0, 5.0]``: what Gson and
    Jackson write for a list of Doubles) as the integers they equal, as labels are
    (``Label``): the exported JSON Schema, {"type": "integer"} per item, takes them (JSON
    Schema Validation 6.1.1, Core 4.2.2). A list of integers is validated once, as before;
    only a list the strict check refused is tried again with its whole floats made
    integers, so 3.5, true and "3" stay refused (``int_type``). Before, the worker
    dead-lettered ``[3.0, 5.0]`` with "invalid: active.[]: int_type"."""
    try:
        return handler(v)
    except ValidationError:
        if type(v) is not list or not any(type(i) is float for i in v):
            raise
    return handler([int(i) if type(i) is float and i.is_integer() else i for i in v])


class Strict(BaseModel):
    """Every record: unknown fields refused, no type coercion (strict), immutable."""
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Features(Strict):
    """A row: dense ``x``, sparse ``active`` indices, or raw named ``features`` for a model
    that declares them (learners/features.py turns them into ``x`` or ``active``). An input
    record: its JSON Schema states the structural limits (schemas/limits.py)."""
    model_config = ConfigDict(json_schema_extra=limits.document)
    # a list's length is bounded by the record's bytes (an entry and its comma take at least
    # 2): LIST_MAX is never reached, so no valid record is refused for its length (before,
    # `active` had 100,000, and 100,001 repeated indices were dead-lettered as too long
    # while 100,000 were merged: the dead letter told two valid records apart by size)
    x: list[float] | None = Field(default=None, max_length=LIST_MAX)
    active: Annotated[list[int] | None, WrapValidator(_whole_indices)] = Field(default=None, max_length=LIST_MAX)
    # any JSON values: the featuriser reads the declared fields and bounds them; the rest is
    # ignored, so no valid record is refused for what it carries beside them
    features: dict[str, JsonValue] | None = Field(default=None, max_length=1_000)

    @model_validator(mode="after")
    def _one_of(self):
        # (arithmetic on bools, not a generator: this runs for every input record)
        if (self.x is not None) + (self.active is not None) + (self.features is not None) != 1:
            raise ValueError("exactly one of 'x' (dense), 'active' (sparse) or 'features' (raw, "
                             "for a model that declares them) is required")
        if self.x is not None and not all(map(math.isfinite, self.x)):
            raise ValueError("x contains NaN or infinite values")
        if self.active and min(self.active) < 0:
            raise ValueError("active indices must be >= 0")
        return self

    def dimension_error(self, d: int, binary: bool) -> str | None:
        """Why these features do not fit a model of dimension d (None when they do; raw
        ``features`` always fit: the featuriser bounds them)."""
        if self.features is not None:
            return None
        if self.x is not None:
            if len(self.x) != d:
                return f"wrong dimension: the model expects x with {d} entries"
            if binary and any(v not in (-1.0, 1.0) for v in self.x):
                return "out of domain: this model needs x in {-1, +1}^d"
            return None
        if not binary:
            return "sparse 'active' features need a model over {-1, +1}^d"
        if self.active and max(self.active) >= d:
            return f"wrong dimension: active indices must be below the model dimension {d}"
        return None


def _whole_id(v):
    """An ID written as a whole double (``123.0``: what Jackson writes for a Double) as the
    integer it equals, as labels are (``_whole_label``): the exported JSON Schema's
    "integer" takes it. Anything else as it is, for the strict check (1.5, true, lists
    are refused, not coerced)."""
    return int(v) if type(v) is float and math.isfinite(v) and v.is_integer() else v


# A person's ID (a model with a ``privacy_unit``): text or a whole number, of any length
# within the record's structural limits (the sequencer bounds it: its pseudonym is computed
# from at most agents/units.py ``ID_BYTES`` of its text). Private: it never leaves the
# sequencer, which logs a keyed pseudonym in its place; errors name the field, never its value.
PrivacyId = Annotated[str | int, BeforeValidator(_whole_id),
                      WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer"}]})]


class LabeledExample(Features):
    """A labelled example (the ``examples`` topic): features and a label y of -1 or +1.
    ``privacy_id``: whose example it is, for a model whose privacy unit is a person (a
    model without one ignores it); it is never logged or published."""
    type: Literal["example"] = "example"
    model_id: ModelId
    y: Label
    privacy_id: PrivacyId | None = None


class Query(Features):
    """An unlabelled query (the ``queries`` topic); ``query_id`` comes back on its prediction."""
    type: Literal["query"] = "query"
    model_id: ModelId
    query_id: str | None = Field(default=None, max_length=128)


Status = Literal["answered", "hard_query", "budget_exhausted", "learning", "frozen"]


class Prediction(Strict):
    """One output per input event; never carries features. ``label`` is set only on
    queries: the record of a labelled example has ``label = None`` for every model kind
    (a label computed from a private example is not covered by any ledger entry).

    ``epsilon_spent`` is what the model's current ``epoch`` has committed of its budget,
    ``epsilon_left`` what that epoch has left. An epoch covers its own examples, so the
    next epoch has the whole budget again: a continual-release model commits its epoch's
    whole budget when the epoch starts (one charge for all its releases), and shows
    ``epsilon_left`` near 0 from its first example on, by design."""
    model_id: ModelId
    source: str                       # "topic:partition:offset" of the input event
    seq: Count                        # position in the model's sequenced event log
    kind: Literal["example", "query"]
    query_id: str | None = None
    label: Label | None
    status: Status
    version: Count                    # hypothesis version that answered
    epsilon_spent: float              # committed by the current epoch (see above)
    epsilon_left: float
    updated: bool = False
    epoch: Count = 0                  # the epoch whose ledger epsilon_spent is


class LedgerEntryEvent(Strict):
    model_id: ModelId
    seq: Count
    epoch: Count
    mechanism: str
    epsilon: float
    delta: float
    count: Count
    charges: Count
    spent_epsilon: float
    spent_delta: float
    rule: str
    budget_epsilon: float
    budget_delta: float
    # public, non-invertible id of the noise key (KeyedRandomness.fingerprint; replay checks it)
    key_fingerprint: str = Field(default="", pattern=r"^([0-9a-f]{16})?$")
    rho: float | None = None          # zCDP of one invocation, when the ledger composes in zCDP
    # whom the charge protects: one example, or one person with at most k examples per epoch
    # (the registration's ``privacy_unit``; ModelConfig.unit)
    unit: str = Field(default="example", pattern=r"^(example|person<=[0-9]{1,4}/epoch,<=[0-9]{1,4} epochs)$")


class Release(Strict):
    """A released hypothesis (decision list rules), published after its charge."""
    model_id: ModelId
    seq: Count
    version: Count
    rules: list[str]
    payload: dict


class Rejected(Strict):
    """Dead letter: where the record sits (``topic:partition:offset``, enough for the data
    owner to find it) and why, in words fixed by the schema (field names and error
    codes, never an input value, size or hash)."""
    source: str
    reason: str = Field(max_length=500)

    @field_validator("reason")
    @classmethod
    def _short(cls, v: str) -> str:
        return v[:500]
