"""Validate raw input records and append them to the ordered per-model log.

Bad input (malformed JSON, a record over a public structural limit (schemas/limits.py:
size, nesting, members, integer digits), unknown type, wrong dimension, NaN in ``x``,
unknown model, and anything else a payload can make the parser raise) never raises and
never changes state: it becomes a ``rejected`` record with its source
(topic:partition:offset) and a reason. For examples and queries a reason is built only
from words the schemas fix: field names of the schemas and pydantic's error codes, never
an input value, a model id, a count or a field name the input made up (``reason_of``).
A registration is public configuration: its reason says what to fix, with the values it
quotes (``schemas.config.config_error_text``). Within the structural limits, no record
is refused for its values (declared features are bounded by the featuriser; a lone
UTF-16 surrogate in a string reads as U+FFFD, ``limits.decode``).

Bounded, not rejected: a well-formed example or query whose row has more active
features than its kind takes is cut to the limit (the lowest indices kept,
``learners.inputs.bounded_active``: a rule that looks at the row alone), and repeated
indices are merged (here for a bounded kind, whose log row is then the row as the model
uses it; the learners take each row's distinct indices anyway, ``active_matrix``, so
other kinds' rows are logged as sent). So the ``rejected`` topic says nothing about a
valid record's content.

Keys: a record's Kafka key decides its partition, and so the order of a model's events;
an input keyed with another model's id is refused (its order among that model's events
would not be fixed by one partition). Records without a key are taken (one-partition
topics, the embedded runtime); key every record by its model id when topics have more
partitions (``dpstream produce`` does). A keyed record on another partition than Kafka's
default partitioner gives its key is refused (``MISPLACED``: its model's config and log
live on that other partition).

The privacy unit: an example of a model whose registration has a ``privacy_unit`` is
logged with ``unit``, its person's keyed pseudonym (agents/units.py), in place of the raw
ID (its top-level ``privacy_id``, or the ``id_field`` of its raw features, which the
featuriser never reads); an example without a usable ID is logged without ``unit`` (it
will not reach the learner). The raw ID is never logged, and an example of any other
model is logged without it. The pseudonyms need the key: ``sequence_batch(rng=...)``.

State: ``config/<model>`` (the registered ModelConfig, as JSON-able dict) and
``src/<topic>:<partition>`` (the last input offset handled): a record at or before it
is a re-delivery and is skipped, because its outputs were already produced: the offset
is written only after the forwarded record is durable (see ``records.deliver``).
"""
from __future__ import annotations

from collections.abc import Callable, MutableMapping

from pydantic import ValidationError

from dpstream.learners.inputs import bounded_active
from dpstream.schemas import LabeledExample, ModelConfig, Query, Rejected
from dpstream.schemas import limits
from dpstream.schemas.config import config_error_text, params_schemas
from dpstream.schemas.features import new_names_problem

from .kinds import BINARY, REAL, kind
from .records import Emit, Fetch, RawRecord, deliver
from .units import Pseudonyms, raw_id

# A record keyed by its model id but placed by another partitioner than Kafka's default
# (unkeyed records are taken wherever they sit, as before: one-partition topics)
# (murmur2; librdkafka's default is CRC32): its model's config and log live on another
# partition, which this worker may not hold, or may still be restoring (a dead letter
# "unknown model" about a valid record, at random). The reason names no value.
MISPLACED = ("the record sits on another partition than its model's records: produce with "
             "Kafka's default partitioner (murmur2 of the key: dpstream produce, Java clients; "
             "librdkafka: partitioner=murmur2_random)")
UNKNOWN_MODEL = ("unknown model: no registration of it was accepted (a refused registration "
                 "has its own dead letter, from the models topic, saying why)")
NO_KEY = ("not sequenced: this sequencer has no key to pseudonymise the privacy IDs of a model "
          "with a privacy_unit (a runtime passes sequence_batch its rng)")
MODEL_EVENTS = "model-events"
REJECTED = "rejected"

_KIND_BY_TOPIC = {"models": "model", "examples": "example", "queries": "query"}


def _schema_words() -> frozenset[str]:
    words: set[str] = set(params_schemas())
    todo = [ModelConfig, LabeledExample, Query, *params_schemas().values()]
    while todo:
        cls = todo.pop()
        for name, field in cls.model_fields.items():
            words.add(name)
            for sub in getattr(field.annotation, "__args__", ()) or (field.annotation,):
                if isinstance(sub, type) and hasattr(sub, "model_fields"):
                    todo.append(sub)
    return frozenset(words)


_SCHEMA_WORDS = _schema_words()


def reason_of(err: ValidationError) -> str:
    """'invalid: <loc>: <error code>; ...' with loc made of schema field names only (an
    input's own field names become '?', list positions '[]'); the message itself only
    for our own validators' fixed texts (value_error)."""
    parts = []
    for e in err.errors(include_input=False, include_url=False, include_context=False):
        loc = ".".join(p if isinstance(p, str) and p in _SCHEMA_WORDS else
                       "[]" if isinstance(p, int) else "?" for p in e["loc"]) or "payload"
        # value_error messages are the schemas' own validator texts (fixed strings); an
        # unknown name is '?' (an input's own text), so say what kind of mistake it is
        what = {"value_error": e["msg"],
                "extra_forbidden": "extra_forbidden (a field this record's schema does not have: "
                                   "raw values go inside features)"}.get(e["type"], e["type"])
        parts.append(f"{loc}: {what}")
    return "invalid: " + "; ".join(sorted(set(parts)))


Home = Callable[[str], int]     # a model id's partition (where every record of it belongs)


def parse(record: RawRecord, configs: MutableMapping, home: Home | None = None) -> tuple[dict | None, str | None]:
    """(validated event as dict, None) or (None, reason); never raises. With ``home``, a
    record on another partition than its model's is refused (``_misplaced``)."""
    try:
        return _parse(record, configs, home)
    except RecursionError:
        return None, limits.TOO_DEEP
    except Exception:            # noqa: BLE001 - any input that breaks the parser is a dead letter
        return None, "malformed event"


_FAST = {"examples": LabeledExample, "queries": Query}


def _parse(record: RawRecord, configs: MutableMapping, home: Home | None = None) -> tuple[dict | None, str | None]:
    event = None
    # the common case in one step: pydantic-core parses the JSON, when the record is
    # certainly within the structural limits and has no surrogate escape (limits.plain)
    if record.topic in _FAST and limits.plain(record.value):
        try:
            event = _FAST[record.topic].model_validate_json(record.value)
        except ValidationError:
            pass                   # the general path below names the reason
    if event is None:
        event, reason = _validated(record)
        if event is None:
            return None, reason
    if record.key is not None and record.key != event.model_id.encode():
        return None, ("the record's key is not its model_id: key every record by its model "
                      "id (the key fixes the partition, and so the order of the model's events)")
    if home is not None and record.key is not None and record.partition != home(event.model_id):
        return None, MISPLACED
    return _checked(event, configs)


def _validated(record: RawRecord):
    """(event, None) or (None, reason), through the structural limits' decoder
    (``limits.decode``: the same verdict ``dpstream produce`` gives) and the schema of the
    event's type."""
    try:
        raw = limits.decode(record.value)
    except limits.LimitError as err:
        return None, str(err)
    if not isinstance(raw, dict):
        return None, "malformed event: expected a JSON object"
    kind = raw.get("type") or _KIND_BY_TOPIC.get(record.topic)
    model_cls = {"model": ModelConfig, "example": LabeledExample, "query": Query}.get(kind) \
        if isinstance(kind, str) else None
    if model_cls is None:
        return None, "unknown event type"
    if record.topic in _KIND_BY_TOPIC and kind != _KIND_BY_TOPIC[record.topic]:
        # a registration on `examples` would bypass whatever guards the `models` topic
        return None, "event type does not match its topic"
    raw.setdefault("type", kind)
    try:
        return model_cls.model_validate(raw), None
    except ValidationError as err:
        if model_cls is ModelConfig:        # public configuration: say what to fix
            return None, f"invalid registration: {config_error_text(err, raw)}"[:500]
        return None, reason_of(err)[:500]


def _checked(event, configs: MutableMapping) -> tuple[dict | None, str | None]:
    """The checks that need the registered config (or, for a registration, feasibility),
    and the bounds: a row is cut to the kind's ``max_active`` (module docstring)."""
    if event.type == "model":
        known = configs.get(f"config/{event.model_id}")
        dumped = event.model_dump(mode="json")
        if known is not None and known != dumped:       # an identical re-registration is a no-op
            return None, "model id already registered with another config"
        if known is not None:           # in force already: checks added since cannot refuse it
            return dumped, None
        problem = (new_names_problem(event.features) if event.features else None) \
            or kind(event.kind).config_problem(event)
        return (None, f"infeasible model config: {problem}"[:500]) if problem else (dumped, None)
    cfg = configs.get(f"config/{event.model_id}")
    if cfg is None:
        return None, UNKNOWN_MODEL
    config = _config(event.model_id, cfg)
    k = kind(config.kind)
    form = k.input_form(config)
    # model_dump(mode="json", exclude_none=True) of an example or query (its fields are JSON
    # types already, in field order), without the serializer's per-call cost
    out = {key: v for key, v in event.__dict__.items() if v is not None}
    # a person's raw ID, kept for ``_sequence`` to pseudonymise (a bounded model's example
    # only; ``_sequence`` never logs it): the top-level field, or the declared id_field of the
    # raw features (which the featuriser ignores: no declared feature has its name)
    out.pop("privacy_id", None)
    if event.type == "example" and config.privacy_unit is not None:
        out["privacy_id"] = raw_id(config, event.privacy_id, event.features)
    if event.features is not None:        # raw features: the declared featuriser, bounded
        if config.features is None:
            return None, "raw 'features' need a model that declares its features"
        del out["features"]
        out.update(k.featurise(config, event.features))
        event = event.model_construct(**{**out, "features": None})
    problem = event.dimension_error(config.dimension, form == BINARY)
    if problem:
        return None, problem
    if form == REAL and event.active is not None:
        return None, "sparse 'active' features need a model over {-1, +1}^d"
    problem = k.input_problem(config, event)
    if problem:
        return None, problem
    limit = k.max_active(config)
    if limit is not None:                 # the row as the model uses it: active, bounded
        active = event.active if event.active is not None else \
            [j for j, v in enumerate(event.x) if v > 0]
        out.pop("x", None)
        out["active"] = bounded_active(active, limit)
    return out, None


_CONFIGS: dict[str, tuple[dict, ModelConfig]] = {}
_CONFIGS_MAX = 10_000


def _config(model_id: str, cfg: dict) -> ModelConfig:
    """The registered config, validated once per model rather than once per event (an
    equal stored dict returns the cached model; the cache is bounded)."""
    hit = _CONFIGS.get(model_id)
    if hit is not None and (hit[0] is cfg or hit[0] == cfg):
        return hit[1]
    if len(_CONFIGS) >= _CONFIGS_MAX:
        _CONFIGS.clear()
    config = ModelConfig.model_validate(cfg)
    _CONFIGS[model_id] = (cfg, config)
    return config


async def sequence_batch(records: list[RawRecord], state: MutableMapping, emit: Emit,
                         fetch: Fetch | None = None, home: Home | None = None, *,
                         rng=None) -> list[RawRecord]:
    """Handle input records in order; with ``fetch``, first re-read any records of their
    partitions the runtime skipped (records.py, Completeness). The outputs of the whole
    batch are made durable before any input offset is recorded. ``rng``: the secret key's
    ``KeyedRandomness``, for the pseudonyms of privacy IDs (module docstring); without it, an
    example of a model with a ``privacy_unit`` is a dead letter (``NO_KEY``).

    Returns the log records it appended whose place in the log the runtime reported
    (``deliver``), in offset order per partition, with their decoded body: a runtime may
    hand them straight to the processor instead of reading them back
    (streams/worker/app.py's bulk path)."""
    set_partition = getattr(state, "set_partition", lambda partition: None)
    units = _pseudonyms(rng)
    outputs: list[tuple[str, str | None, dict]] = []
    last: dict[tuple[str, int], int] = {}
    for record in records:
        where = (record.topic, record.partition)
        done = last[where] if where in last else state.get(_src_key(*where), -1)
        if done >= record.offset:
            continue
        missed = []
        if fetch is not None and record.offset > done + 1:
            missed = await fetch(record.topic, record.partition, done + 1, record.offset)
        for r in (*missed, record):
            if r.offset > last.get(where, done):
                set_partition(r.partition)
                outputs.append(_sequence(r, state, home, units))
                last[where] = r.offset
    where = await deliver(emit, outputs)
    for (topic, partition), offset in last.items():    # only once the outputs are durable
        set_partition(partition)
        state[_src_key(topic, partition)] = offset
    # in log order per partition, as the processor reads a log: the outputs producer
    # places each model's appends as one run (streams/worker/outputs.py), so input order
    # would look like a gap to the processor, which re-reads gaps from the broker
    appended = [RawRecord(MODEL_EVENTS, *placed, key.encode(), b"", body=value)
                for (topic, key, value), placed in zip(outputs, where)
                if topic == MODEL_EVENTS and placed is not None]
    appended.sort(key=lambda r: (r.partition, r.offset))
    return appended


def _src_key(topic: str, partition: int) -> str:
    return f"src/{topic}:{partition}"


def last_handled(state: MutableMapping, topic: str, partition: int) -> int:
    """The last input offset of ``topic``/``partition`` whose output is durable (-1: none)."""
    return state.get(_src_key(topic, partition), -1)


_PSEUDONYMS: dict[str, Pseudonyms] = {}


def _pseudonyms(rng) -> Pseudonyms | None:
    """One ``Pseudonyms`` per key (it caches each model's derived key)."""
    if rng is None:
        return None
    found = _PSEUDONYMS.get(rng.fingerprint())
    if found is None or found.rng is not rng:
        if len(_PSEUDONYMS) >= 16:
            _PSEUDONYMS.clear()
        found = _PSEUDONYMS[rng.fingerprint()] = Pseudonyms(rng)
    return found


def _sequence(record: RawRecord, state: MutableMapping, home: Home | None = None,
              units: Pseudonyms | None = None) -> tuple[str, str | None, dict]:
    """The output for one new input record (registering a valid model's config); a bounded
    model's example carries its person's pseudonym as ``unit``, never the raw ID."""
    if record.problem is not None:      # a value the runtime could not decode
        return REJECTED, None, Rejected(source=record.source, reason=record.problem).model_dump()
    event, reason = parse(record, state, home)
    if event is None:
        return REJECTED, None, Rejected(source=record.source, reason=reason).model_dump()
    if event["type"] == "model":
        state[f"config/{event['model_id']}"] = event
    elif "privacy_id" in event:         # (only a bounded model's example holds it here)
        if units is None:
            return REJECTED, None, Rejected(source=record.source, reason=NO_KEY).model_dump()
        unit = units.of(event["model_id"], event.pop("privacy_id"))
        if unit is not None:
            event["unit"] = unit
    return MODEL_EVENTS, event["model_id"], {"source": record.source, "event": event}
