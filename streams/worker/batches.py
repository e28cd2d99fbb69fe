"""Records sent as whole aiokafka batches: one ``create_batch`` per topic partition,
filled until full, then ``send_batch`` (aiokafka's public batch API). A batch is one
entry in a produce request however many records it holds, and appending it costs no
per-record task or future, which is why the worker's outputs (streams/worker/outputs.py) and
its table changelog records (``faust_seam.ChangelogWriter``) take this path."""
from __future__ import annotations


async def send_records(producer, topic: str, partition: int,
                       records: list[tuple[bytes | None, bytes | None]]) -> list[tuple[object, int]]:
    """Append ``records`` ((key, value) pairs, in order) to ``topic``/``partition`` as few
    batches as fit the producer's batch size. Returns (delivery future, records in it)
    per batch; a batch's future resolves to the placement of its first record, the rest
    follow at consecutive offsets. Raises ValueError for a record no empty batch holds."""
    out = []
    batch, count = producer.create_batch(), 0
    for key, value in records:
        if batch.append(key=key, value=value, timestamp=None) is None:         # batch full
            out.append((await producer.send_batch(batch, topic, partition=partition), count))
            batch, count = producer.create_batch(), 0
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise ValueError("a record is larger than the producer batch size")
        count += 1
    out.append((await producer.send_batch(batch, topic, partition=partition), count))
    return out
