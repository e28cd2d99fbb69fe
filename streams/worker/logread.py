"""Read a range of one partition straight from the broker: how the agents recover
records the faust runtime dropped (agents/records.py, Completeness), and how the bulk
path's processor reads a log backlog it has not applied yet (a crash between appending
records and applying them) before the records it was handed directly (streams/worker/app.py).

A fresh consumer with no group (nothing committed, no rebalance), assigned to the one
partition and positioned with ``seek`` (aiokafka's AIOKafkaConsumer.assign / seek /
getmany). If ``start`` is below the log start (retention), the consumer resets to the
earliest record, so the range holds only what the log still has. Gaps are rare, so a
consumer per call is cheaper than one more long-lived connection per worker. A record
batch it cannot decode gives records with a ``problem`` (faust_seam.guard_undecodable),
as the worker's own consumer does.
"""
from __future__ import annotations

import asyncio
import logging

from aiokafka import TopicPartition

from dpstream.agents.records import RawRecord

from .faust_seam import raw_record
from .kafka import running

log = logging.getLogger("dpstream.logread")


class GapNotFilled(RuntimeError):
    pass


async def read_range(kafka, topic: str, partition: int, start: int, end: int, *,
                     name: str | None = None, timeout: float = 30.0) -> list[RawRecord]:
    """Records of ``topic``/``partition`` with ``start <= offset < end`` (``name`` is the
    topic's name on the broker when it differs, e.g. with a prefix); ``kafka``: the
    connection settings (streams/worker/kafka.py)."""
    tp = TopicPartition(name or topic, partition)
    out: list[RawRecord] = []
    async with running(kafka.consumer(group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest")) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = asyncio.get_running_loop().time() + timeout
        while await consumer.position(tp) < end:
            if asyncio.get_running_loop().time() > deadline:
                raise GapNotFilled(f"{tp.topic}[{partition}] offsets {start}..{end - 1}: "
                                   f"log not readable within {timeout:.0f}s")
            batch = await consumer.getmany(tp, timeout_ms=500)
            out.extend(raw_record(topic, r) for r in batch.get(tp, []) if start <= r.offset < end)
    log.info("re-read %d record(s) of %s[%d] offsets %d..%d not handed over (dropped by the "
             "runtime, or a backlog a crash left)", len(out), tp.topic, partition, start, end - 1)
    return out
