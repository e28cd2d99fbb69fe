"""Apply the per-model ordered log (``model-events``) to each model's learner.

For every event the processor emits exactly one ``predictions`` record, plus one
``ledger`` record per privacy charge made while handling it (charged before the
release it pays for leaves) and, for decision lists, one ``releases`` record per
trained window. Outputs never carry features, labels of examples, or keys.

Idempotence (design.md section 5): each model's ``head`` record holds the last
applied log offset (``seq``) and, per input partition, the last applied input offset;
an event at or before either is skipped (its outputs were produced before, and the
keyed randomness would reproduce them identically anyway). State that changes on
every event lives in ``head``; large state (weights, hypotheses, buffered samples)
is written only when it changes, under versioned keys that are never overwritten
with different content, and ``head`` is written last: a crash between the two
leaves ``head`` pointing at the previous, complete version.

Crash order (records.py): an event's ledger records are made durable first, then its
prediction and release records, and only then is its state written. So a release
never exists without its ledger record, and state on the changelog never runs ahead
of the outputs it implies. A failed delivery drops the in-memory handler, so the next
attempt reloads from the state mapping instead of an advanced, unsaved learner.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterable, MutableMapping

from mechanisms.randomness import KeyedRandomness
from schemas import ModelConfig

from .handlers import HANDLERS, Outputs
from .records import Emit, Fetch, RawRecord, deliver

PREDICTIONS, LEDGER, RELEASES = "predictions", "ledger", "releases"


class Processor:
    """Keeps loaded handlers between events; the state mapping stays the truth."""

    def __init__(self, rng: KeyedRandomness, state: MutableMapping, emit: Emit,
                 fetch: Fetch | None = None):
        self.rng, self.state, self.emit, self.fetch = rng, state, emit, fetch
        self._handlers: dict[str, object] = {}

    async def run(self, records: AsyncIterable[RawRecord]) -> None:
        async for record in records:
            await self.handle(record)

    def _handler(self, model_id: str):
        h = self._handlers.get(model_id)
        head = self.state.get(f"model/{model_id}/head")
        if h is None or head is None or h.head_seq != head["seq"]:
            cfg = self.state.get(f"model/{model_id}/config")
            if cfg is None:
                return None
            config = ModelConfig.model_validate(cfg)
            h = HANDLERS[config.kind](config, self.rng, self.state)
            h.load(head)
            self._handlers[model_id] = h
        return h

    async def handle(self, record: RawRecord) -> None:
        """Apply one log record; with ``fetch``, first re-read the records of its partition
        the runtime skipped (``log/<partition>`` holds the next expected offset)."""
        if self.fetch is None:
            await self._apply(record)
            return
        position = f"log/{record.partition}"
        expected = self.state.get(position, 0)
        if record.offset > expected:
            for missed in await self.fetch(record.topic, record.partition, expected, record.offset):
                await self._apply(missed)
        await self._apply(record)
        if record.offset >= expected:
            self.state[position] = record.offset + 1

    async def _apply(self, record: RawRecord) -> None:
        body = json.loads(record.value)
        event, source = body["event"], body["source"]
        model_id = event["model_id"]
        src_topic_part, src_offset = source.rsplit(":", 1)
        if event["type"] == "model":
            if f"model/{model_id}/head" not in self.state:     # config alone: a crash mid-create
                config = ModelConfig.model_validate(event)
                self.state[f"model/{model_id}/config"] = event
                handler = HANDLERS[config.kind](config, self.rng, self.state)
                outputs = Outputs()
                handler.create(outputs, record.offset)
                handler.head_sources[src_topic_part] = int(src_offset)
                await self._flush(outputs)
                handler.save(record.offset)
                self._handlers[model_id] = handler
            return
        handler = self._handler(model_id)
        if handler is None:      # the sequencer only forwards events of registered models
            return
        if record.offset <= handler.head_seq or \
                handler.head_sources.get(src_topic_part, -1) >= int(src_offset):
            return
        outputs = Outputs()
        if event["type"] == "example":
            handler.on_example(event, source, record.offset, outputs)
        else:
            handler.on_query(event, source, record.offset, outputs)
        handler.head_sources[src_topic_part] = int(src_offset)
        try:
            await self._flush(outputs)
        except BaseException:
            self._handlers.pop(model_id, None)
            raise
        handler.save(record.offset)

    async def _flush(self, outputs: Outputs) -> None:
        await deliver(self.emit, [o for o in outputs.items if o[0] == LEDGER])
        await deliver(self.emit, [o for o in outputs.items if o[0] != LEDGER])


async def processor(records: AsyncIterable[RawRecord], state: MutableMapping, emit: Emit,
                    rng: KeyedRandomness, fetch: Fetch | None = None) -> None:
    await Processor(rng, state, emit, fetch).run(records)
