"""Validate raw input records and append them to the ordered per-model log.

Bad input (malformed JSON, unknown type, wrong dimension, NaN, out-of-domain values,
unknown model, oversized payload) never raises and never changes state: it becomes a
``rejected`` record with the reason, the payload's size and SHA-256, and no bytes of
the payload. Validation messages are built without input values (pydantic's
``include_input=False``), so features cannot leak through a reason.

State: ``config/<model>`` (the registered ModelConfig, as JSON-able dict) and
``src/<topic>:<partition>`` (the last input offset handled): a record at or before it
is a re-delivery and is skipped, because its outputs were already produced: the offset
is written only after the forwarded record is durable (see ``records.deliver``).
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterable, MutableMapping

from pydantic import ValidationError

from schemas import LabeledExample, ModelConfig, Query, Rejected

from .handlers import check_feasible
from .records import Emit, Fetch, RawRecord, deliver

MAX_PAYLOAD = 512 * 1024          # below the broker's default 1 MiB message limit
MODEL_EVENTS = "model-events"
REJECTED = "rejected"

_KIND_BY_TOPIC = {"models": "model", "examples": "example", "queries": "query"}


def _reason(err: ValidationError) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
             for e in err.errors(include_input=False, include_url=False)]
    return "invalid: " + "; ".join(parts)


def parse(record: RawRecord, configs: MutableMapping) -> tuple[dict | None, str | None]:
    """(validated event as dict, None) or (None, reason)."""
    if len(record.value) > MAX_PAYLOAD:
        return None, f"oversized payload: {len(record.value)} bytes > {MAX_PAYLOAD}"
    try:
        raw = json.loads(record.value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, "malformed JSON"
    if not isinstance(raw, dict):
        return None, "malformed event: expected a JSON object"
    kind = raw.get("type") or _KIND_BY_TOPIC.get(record.topic)
    model_cls = {"model": ModelConfig, "example": LabeledExample, "query": Query}.get(kind)
    if model_cls is None:
        return None, f"unknown event type {str(kind)[:40]!r}"
    raw.setdefault("type", kind)
    try:
        event = model_cls.model_validate(raw)
    except ValidationError as err:
        return None, _reason(err)[:500]
    if kind == "model":
        known = configs.get(f"config/{event.model_id}")
        dumped = event.model_dump(mode="json")
        if known is not None and known != dumped:       # an identical re-registration is a no-op
            return None, f"model {event.model_id!r} is already registered with another config"
        problem = check_feasible(event)
        return (None, problem) if problem else (dumped, None)
    cfg = configs.get(f"config/{event.model_id}")
    if cfg is None:
        return None, f"unknown model {event.model_id!r}"
    config = ModelConfig.model_validate(cfg)
    problem = event.dimension_error(config.dimension, config.binary)
    if problem:
        return None, problem
    if kind == "example" and config.kind == "decision_list" and event.active is not None:
        return None, "decision lists take dense x in {-1, +1}^d"
    return event.model_dump(mode="json", exclude_none=True), None


async def sequencer(records: AsyncIterable[RawRecord], state: MutableMapping, emit: Emit,
                    fetch: Fetch | None = None) -> None:
    async for record in records:
        await sequence_one(record, state, emit, fetch)


async def sequence_one(record: RawRecord, state: MutableMapping, emit: Emit,
                       fetch: Fetch | None = None) -> None:
    await sequence_batch([record], state, emit, fetch)


async def sequence_batch(records: list[RawRecord], state: MutableMapping, emit: Emit,
                         fetch: Fetch | None = None) -> None:
    """Handle input records in order; with ``fetch``, first re-read any records of their
    partitions the runtime skipped (records.py, Completeness). The outputs of the whole
    batch are made durable before any input offset is recorded."""
    set_partition = getattr(state, "set_partition", lambda partition: None)
    outputs: list[tuple[str, str | None, dict]] = []
    last: dict[tuple[str, int], int] = {}
    for record in records:
        where = (record.topic, record.partition)
        done = last.get(where, state.get(_src_key(*where), -1))
        if done >= record.offset:
            continue
        missed = []
        if fetch is not None and record.offset > done + 1:
            missed = await fetch(record.topic, record.partition, done + 1, record.offset)
        for r in (*missed, record):
            if r.offset > last.get(where, done):
                set_partition(r.partition)
                outputs.append(_sequence(r, state))
                last[where] = r.offset
    await deliver(emit, outputs)
    for (topic, partition), offset in last.items():    # only once the outputs are durable
        set_partition(partition)
        state[_src_key(topic, partition)] = offset


def _src_key(topic: str, partition: int) -> str:
    return f"src/{topic}:{partition}"


def _sequence(record: RawRecord, state: MutableMapping) -> tuple[str, str | None, dict]:
    """The output for one new input record (registering a valid model's config)."""
    event, reason = parse(record, state)
    if event is None:
        size, digest = record.fingerprint()
        return REJECTED, None, Rejected(source=record.source, size=size, sha256=digest,
                                        reason=reason).model_dump()
    if event["type"] == "model":
        state[f"config/{event['model_id']}"] = event
    return MODEL_EVENTS, event["model_id"], {"source": record.source, "event": event}
