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
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterable, MutableMapping

from mechanisms.randomness import KeyedRandomness
from schemas import ModelConfig

from .handlers import HANDLERS, Outputs
from .records import RawRecord
from .sequencer import Emit

PREDICTIONS, LEDGER, RELEASES = "predictions", "ledger", "releases"


class Processor:
    """Keeps loaded handlers between events; the state mapping stays the truth."""

    def __init__(self, rng: KeyedRandomness, state: MutableMapping, emit: Emit):
        self.rng, self.state, self.emit = rng, state, emit
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
        body = json.loads(record.value)
        event, source = body["event"], body["source"]
        model_id = event["model_id"]
        src_topic_part, src_offset = source.rsplit(":", 1)
        if event["type"] == "model":
            if f"model/{model_id}/config" not in self.state:
                config = ModelConfig.model_validate(event)
                self.state[f"model/{model_id}/config"] = event
                handler = HANDLERS[config.kind](config, self.rng, self.state)
                outputs = Outputs()
                handler.create(outputs, record.offset)
                handler.head_sources[src_topic_part] = int(src_offset)
                handler.save(record.offset)
                self._handlers[model_id] = handler
                await self._flush(outputs)
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
        handler.save(record.offset)
        await self._flush(outputs)

    async def _flush(self, outputs: Outputs) -> None:
        for topic, key, value in outputs.items:
            await self.emit(topic, key, value)


async def processor(records: AsyncIterable[RawRecord], state: MutableMapping, emit: Emit,
                    rng: KeyedRandomness) -> None:
    await Processor(rng, state, emit).run(records)
