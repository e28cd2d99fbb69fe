"""Records from an ordinary Kafka producer (issue 43 item 13): Kafka's own Java client (the
jars scripts/kafka.sh fetches; tests/streams/java/KafkaLines.java) produces examples and
queries compressed with every codec Kafka defines (gzip, snappy, lz4, zstd), the worker
answers them as the embedded runtime does, and the Java client reads the predictions
back. A worker that cannot decode a codec (cramjam hidden) dead-letters each record of
such a batch with a reason that names only the codec, and reads on.

Before: aiokafka without cramjam raised UnsupportedCodecError for every lz4, snappy and
zstd batch, the worker logged "the broker ... refused to Read topic {} ... fetching again
every 2 s" for ever, and every model keyed to that partition learned and answered nothing
more (issue: 2,000 examples sent with kcat -z lz4, 0 acknowledged)."""
import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .kafka_helpers import ROOT, Worker, produce, read_all
from .secure_broker import libs
from .reference import assert_same_as_embedded
from .workload import examples, models, queries

pytestmark = pytest.mark.kafka
JAVA_CLIENT = ROOT / "tests" / "streams" / "java" / "KafkaLines.java"
# a codec per model: each model's records come from one producer, so they keep their order
CODEC = {"fraud-a": "gzip", "fraud-c": "snappy", "rules": "lz4", "score": "zstd", "dense": "lz4"}
UNDECODABLE = ("undecodable record batch: compressed with lz4, which this worker cannot decode "
               "(UnsupportedCodecError)")


@pytest.fixture(scope="module")
def java_libs() -> Path:
    """Kafka's jars where scripts/kafka.sh keeps them (``fetch`` prints the directory, named
    by its dependency list). Before, this fixture looked for a ``libs`` directory the
    script no longer writes, so on a fresh machine (CI's first run here) it failed while
    the broker ran from the right jars."""
    if shutil.which("java") is None:
        if os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1":
            pytest.fail("no Java (scripts/kafka.sh needs a JDK >= 17)")
        pytest.skip("no Java")
    return libs()


def java(libs: Path, *args: str, stdin: str = "", timeout: float = 180) -> str:
    done = subprocess.run(["java", "-Xmx256m", "-cp", f"{libs}/*", str(JAVA_CLIENT), *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def lines(records: list[dict], codec_of) -> str:
    return "".join(f"{codec_of(r)}\t{r['model_id']}\t{json.dumps(r)}\n" for r in records)


def test_a_java_producer_with_every_codec_is_read_and_its_client_reads_the_answers(
        kafka_bootstrap, topic_prefix, tmp_path, java_libs):
    prefix = topic_prefix + "-"
    ex, qs = examples(), queries()
    worker = Worker(kafka_bootstrap, prefix, tmp_path).start()
    try:
        asyncio.run(produce(kafka_bootstrap, prefix + "models", models()))
        asyncio.run(read_all(kafka_bootstrap, prefix + "model-events", until=len(models()), timeout=60))
        java(java_libs, "produce", kafka_bootstrap, prefix + "examples",
             stdin=lines(ex, lambda r: CODEC[r["model_id"]]))
        asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=len(ex), timeout=180))
        java(java_libs, "produce", kafka_bootstrap, prefix + "queries",
             stdin=lines(qs, lambda r: CODEC[r["model_id"]]))
        out = java(java_libs, "consume", kafka_bootstrap, prefix + "predictions", str(len(ex) + len(qs)), "60")
        ledger = asyncio.run(read_all(kafka_bootstrap, prefix + "ledger", idle=3))
        releases = asyncio.run(read_all(kafka_bootstrap, prefix + "releases", idle=2))
        rejected = asyncio.run(read_all(kafka_bootstrap, prefix + "rejected", idle=2))
    finally:
        worker.stop()
    preds = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert rejected == []
    # one answer per input; a rebalance may publish one again, identical (at-least-once:
    # consumers de-duplicate by (model_id, seq)), and assert_same_as_embedded fails on two
    # different outputs for one (model_id, seq)
    assert len({(p["model_id"], p["seq"]) for p in preds}) == len(ex) + len(qs)
    assert_same_as_embedded(preds, ledger, releases)


def test_a_batch_the_worker_cannot_decode_becomes_dead_letters_and_the_partition_reads_on(
        kafka_bootstrap, topic_prefix, tmp_path, java_libs):
    """A worker without cramjam (hidden by a module that refuses to import) meets an lz4
    batch: each of its records is a dead letter whose reason names the codec only, the
    log line names the topic and the cause, and a gzip record after it, of the same model
    (so the same partition), is answered."""
    prefix = topic_prefix + "-"
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "cramjam.py").write_text('raise ImportError("hidden by the test")\n')
    worker = Worker(kafka_bootstrap, prefix, tmp_path, env={"PYTHONPATH": f"{hide}{os.pathsep}{ROOT}"}).start()
    model = models()[0]
    sent = [r for r in examples() if r["model_id"] == model["model_id"]][:41]
    try:
        asyncio.run(produce(kafka_bootstrap, prefix + "models", [model]))
        asyncio.run(read_all(kafka_bootstrap, prefix + "model-events", until=1, timeout=60))
        java(java_libs, "produce", kafka_bootstrap, prefix + "examples",
             stdin=lines(sent, lambda r: "lz4" if r is not sent[-1] else "gzip"))
        rejected = asyncio.run(read_all(kafka_bootstrap, prefix + "rejected", until=40, timeout=90))
        preds = asyncio.run(read_all(kafka_bootstrap, prefix + "predictions", until=1, timeout=60))
        assert worker.proc.poll() is None
    finally:
        worker.stop()
    assert sorted(int(r["source"].rsplit(":", 1)[1]) for r in rejected) == list(range(40))
    assert {r["reason"] for r in rejected} == {UNDECODABLE}
    assert [p["source"].rsplit(":", 1)[1] for p in preds] == ["40"]
    log = worker.log.read_text()
    assert f"of topic {prefix}examples partition" in log
    assert "Libraries for lz4 compression codec not found" in log
    assert "{}" not in log and "refused to Read" not in log
