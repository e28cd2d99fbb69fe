"""The worker's outputs producer: log appends, predictions, ledger entries, releases and
dead letters, sent as one aiokafka batch per topic partition (agents/records.py's
``emit`` contract, with its ``many`` fast path).

Why a producer of its own: aiokafka keeps one request in flight per broker connection
(its Sender skips a node with a request outstanding), so on faust's producer a batch's
log append and predictions waited behind the table changelog writes of the batch
before, up to five round trips per batch where two are needed. Safe: changelog writes
keep their order on faust's producer (which faust flushes before a commit), and every
output sent here is acknowledged before the batch writes state or acks its inputs.
"""
from __future__ import annotations

import asyncio

import orjson
from aiokafka.partitioner import DefaultPartitioner

from . import faust_seam as seam
from .batches import send_records
from .topics import ANSWERS, copies


def encode(value: dict) -> bytes:
    """An output value as JSON (orjson: numpy scalars as numbers, non-string keys as
    strings, as ``json.dumps`` would write them)."""
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


class OutputsProducer:
    """``await emitter(topic, key, value)`` and ``await emitter.many(items)``, the emit
    contract of agents/records.py, on a producer built by faust's driver with the app's
    producer settings (acks, security, sizes). ``names`` maps dpstream topic names to
    the broker's (a prefix); ``observe(items)`` counts what is emitted (metrics)."""

    PLACEMENTS = 100_000        # (topic, key) -> partition memo entries at most

    def __init__(self, app, names: dict[str, str], observe):
        self.app, self.names, self.observe = app, names, observe
        self._producer = None
        self._placement: dict[tuple[str, str], tuple[str, bytes, int]] = {}
        self._partitioner = DefaultPartitioner()

    async def producer(self):
        """The producer, started on first use."""
        if self._producer is None:
            producer = seam.new_producer(self.app)
            await producer.start()
            if self._producer is None:
                self._producer = producer
            else:                               # another caller started one meanwhile
                await producer.stop()
        return self._producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __call__(self, topic: str, key: str | None, value: dict):
        """One output: its delivery future (resolving to its placement, once its copy on
        ``answers``, if any, is delivered too)."""
        (future, _), *copy = await self.many([(topic, key, value)])
        return asyncio.ensure_future(_first([future, *(f for f, _ in copy)])) if copy else future

    async def many(self, items: list[tuple[str, str | None, dict]]) -> list:
        """Enqueue many outputs as one aiokafka batch per topic partition; return
        ``(delivery future, indices)`` per batch (a batch's future resolves to the
        placement of its first record, the rest follow at consecutive offsets).
        Partitions are those ``send`` would choose: aiokafka's DefaultPartitioner over
        the topic's partitions (murmur2 of the key), memoised per key. Order within a
        partition is call order (one producer).

        A query's prediction is also sent to ``answers`` (topics.copies), in the same
        call: the copies' batches come back with no indices (nothing of ``items`` is
        placed by them), and are durable when their futures are."""
        producer = await self.producer()
        groups: dict[tuple[str, bytes | None, int], list[int]] = {}      # slot -> item indices
        encoded, copied = [], []
        for i, (topic, key, value) in enumerate(items):
            groups.setdefault(await self._slot(producer, topic, key), []).append(i)
            encoded.append(encode(value))
            if copies(topic, value):
                groups.setdefault(await self._slot(producer, ANSWERS, key), []).append(-1 - len(copied))
                copied.append(i)
        self.observe([*items, *((ANSWERS, items[i][1], items[i][2]) for i in copied)] if copied else items)
        out = []
        for (name, kb, where), indices in groups.items():
            data = [encoded[i] if i >= 0 else encoded[copied[-1 - i]] for i in indices]
            sent = await send_records(producer, name, where, [(kb, v) for v in data])
            start = 0
            for future, count in sent:
                out.append((future, [i for i in indices[start:start + count] if i >= 0]))
                start += count
        return out

    async def _slot(self, producer, topic: str, key: str | None) -> tuple[str, bytes | None, int]:
        """(broker topic name, key bytes, partition) of an output (memoised per key)."""
        slot = self._placement.get((topic, key)) if key else None
        if slot is None:
            name, kb = self.names[topic], key.encode() if key else None
            parts = sorted(await producer.partitions_for(name))
            slot = (name, kb, self._partitioner(kb, parts, parts))
            if kb is not None:
                if len(self._placement) >= self.PLACEMENTS:
                    self._placement.clear()
                self._placement[(topic, key)] = slot
        return slot


async def _first(futures):
    """The first future's result, once all are done."""
    return (await asyncio.gather(*futures))[0]
