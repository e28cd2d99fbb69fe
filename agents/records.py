"""Input records and the output contract, as agents see them, independent of the runtime.

Output contract (``Emit``): ``await emit(topic, key, value)`` enqueues one output record,
in call order, and returns ``None`` if the record is already durable or an awaitable
that completes once it is (for Kafka: the broker acknowledged it). Agents write their
state only after every output of the event is durable (``deliver``). That ordering is
what makes a kill -9 safe: state that reached the changelog implies its outputs reached
their topics, so an event the restarted worker skips as applied has all its outputs,
and an event whose state was lost is re-applied with the same keyed noise, producing
identical duplicates that consumers drop by ``(model_id, seq)``.

Completeness (``Fetch``): agents do not trust the runtime to hand them every record.
Each keeps, per input partition, the next offset it expects; a record beyond it means
records were dropped on the way (faust's recovery can drop fetched records and ack them
anyway, faust-streaming issues #216 and #596; we saw twenty records of one partition
vanish after a kill -9), and the agent reads the missing range from the log itself
before going on. Offsets a log does not hold (compaction, transaction markers) are
simply absent from what ``fetch`` returns.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

Emit = Callable[[str, "str | None", dict], Awaitable["Awaitable | None"]]
# fetch(topic, partition, start, end): the records of [start, end) still in the log
Fetch = Callable[[str, int, int, int], Awaitable[list["RawRecord"]]]


@dataclass(slots=True)      # read-only by convention; not frozen: a frozen dataclass costs
class RawRecord:            # five times as much to build, once per record on the hot path
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    # The decoded value, when whoever made the record already holds it (the bulk path's
    # sequencer hands the log records it appended straight to the processor, which then
    # skips decoding ``value``); never part of equality.
    body: dict | None = field(default=None, compare=False, repr=False)
    # Why the runtime could not read the record's value (a record batch compressed with
    # a codec it cannot decode): the agents dead-letter it with this reason, which names
    # the cause only (streams/worker/faust_seam.py ``guard_undecodable``), never input bytes.
    problem: str | None = field(default=None, compare=False, repr=False)

    @property
    def source(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


async def deliver(emit: Emit, items: Iterable[tuple[str, str | None, dict]]
                  ) -> list[tuple[int, int] | None]:
    """Enqueue ``items`` in order, then wait until every one of them is durable; return
    where each landed, ``(partition, offset)``, where the runtime says (else None).

    A runtime may give ``emit`` a ``many(items)`` that enqueues a whole list at once and
    returns ``(awaitable, indices)`` pairs: the awaitable completes once the items at
    ``indices`` (positions in ``items``, in log order) are durable and resolves to the
    placement of the first of them (``.partition``, ``.offset``), the others following at
    consecutive offsets, as a Kafka record batch does (streams/worker/app.py, one batch per
    topic partition)."""
    many = getattr(emit, "many", None)
    items = list(items)
    where: list[tuple[int, int] | None] = [None] * len(items)
    if many is not None:
        if not items:
            return where
        groups = await many(items)
        placed = await asyncio.gather(*(wait for wait, _ in groups))
        for (_, indices), first in zip(groups, placed):
            if first is not None:
                for k, i in enumerate(indices):
                    where[i] = (first.partition, first.offset + k)
        return where
    waits = [w for w in [await emit(topic, key, value) for topic, key, value in items]
             if w is not None]
    if waits:
        await asyncio.gather(*waits)
    return where
