"""A record batch the worker cannot decode does not hold its partition (issue 43 item 13;
streams/worker/faust_seam.py ``guard_undecodable``), without a broker: aiokafka's own
``PartitionRecords`` over a real lz4-compressed batch, with the lz4 library made to look
missing.

Before: aiokafka raised UnsupportedCodecError on every read of the partition, its
position stayed before the batch, and the worker logged "refused to Read topic {}" every
2 s while every later record of the models keyed to that partition waited for good."""
import aiokafka.codec
import pytest
from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.errors import UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import sequence_batch
from dpstream.streams.worker import faust_seam as seam

LZ4 = 3
VALUES = [b'{"model_id": "m", "active": [%d], "y": 1}' % i for i in range(3)]


def batch(compression: int, base: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, value in enumerate(VALUES):
        builder.append(i, timestamp=None, key=b"m", value=value, headers=[])
    data = bytearray(builder.build())
    data[0:8] = base.to_bytes(8, "big")          # the batch's base offset, as the broker sets it
    return bytes(data)


def records(topic: str, data: bytes, fetch_offset: int = 0) -> list:
    tp = TopicPartition(topic, 0)
    return list(PartitionRecords(tp, MemoryRecords(data), [], fetch_offset, None, None, True, 0))


def test_every_kafka_codec_is_decoded():
    """cramjam (pyproject.toml) gives aiokafka snappy, lz4 and zstd; gzip is the stdlib's."""
    for compression in (0, 1, 2, 3, 4):
        assert [r.value for r in records("plain", batch(compression))] == VALUES, compression


def test_an_undecodable_batch_becomes_one_record_per_offset_with_the_reason(monkeypatch, caplog):
    compressed, at_40 = batch(LZ4), batch(LZ4, base=40)
    monkeypatch.setattr(aiokafka.codec, "has_lz4", lambda: False)       # as without cramjam
    with pytest.raises(UnsupportedCodecError):          # aiokafka alone: the same error each time
        records("unguarded", compressed)
    seam.guard_undecodable({"guarded"})
    got = records("guarded", at_40, fetch_offset=41)      # 40 was read already
    assert [r.offset for r in got] == [41, 42]
    raw = [seam.raw_record("examples", r) for r in got]
    assert all(r.value == b"" and r.key is None for r in raw)
    assert raw[0].problem == ("undecodable record batch: compressed with lz4, which this "
                              "worker cannot decode (UnsupportedCodecError)")
    line = caplog.records[-1].getMessage()
    assert "records 41..42 of topic guarded partition 0" in line and "compressed with lz4" in line
    assert "Libraries for lz4 compression codec not found" in line and "{}" not in line
    with pytest.raises(UnsupportedCodecError):          # other topics (changelogs) as before
        records("unguarded", compressed)


def test_a_forged_value_cannot_pass_for_an_undecodable_one():
    """A producer's record is plain bytes: it reaches the agents as itself, whatever it holds."""
    class Record:
        partition, offset, key, value = 0, 7, b"m", b"undecodable record batch"
    raw = seam.raw_record("examples", Record())
    assert raw.problem is None and raw.value == b"undecodable record batch"


async def test_the_sequencer_dead_letters_an_undecodable_record_with_its_reason_and_moves_on():
    state, emitted = {}, []

    async def emit(topic, key, value):
        emitted.append((topic, value))

    reason = "undecodable record batch: compressed with lz4, which this worker cannot decode (X)"
    batch_ = [RawRecord("examples", 0, 5, None, b"", problem=reason),
              RawRecord("examples", 0, 6, b"m", VALUES[0])]
    await sequence_batch(batch_, state, emit)
    assert emitted[0] == ("rejected", {"source": "examples:0:5", "reason": reason})
    assert emitted[1][0] == "rejected" and "unknown model" in emitted[1][1]["reason"]
    assert state["src/examples:0"] == 6                 # the partition moved past both
