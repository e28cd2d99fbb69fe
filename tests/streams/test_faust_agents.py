"""The worker's faust app without a broker: the bulk path's ``apply_fetch`` (what the
worker runs on every fetch) over the worker's tables in memory, with outputs collected
instead of produced (table changelog records too: ``ChangelogWriter.send``)."""
import asyncio
import json
import time
from types import SimpleNamespace

import pytest

from dpstream.agents.records import RawRecord
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.worker.app import WorkerApp
from dpstream.streams.worker.kafka import Kafka

MODEL = {"type": "model", "model_id": "w1", "dimension": 10,
         "budget": {"epsilon": 100.0, "delta": 1e-6},
         "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 50, "K": 5, "L": 2.0}}


def new_worker(emit, timeline: list, **settings) -> WorkerApp:
    """A worker app with in-memory tables whose outputs go to ``emit`` and whose table
    changelog records go to ``timeline``; one partition unless told otherwise (the
    records below sit on partition 0)."""
    settings.setdefault("partitions", 1)
    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"faust-agent-tests-key-0000000000"),
                  emit_override=emit, app_id="dpstream-test", **settings)
    w.app.finalize()
    w.app.conf.store = "memory://"
    w.changelog.send = changelog_to(timeline)
    # no broker: the worker holds every partition, restored from empty changelogs
    w.state.assigned = w.state.ready = set(range(w.partitions))
    w.state.declare = None                           # (no changelog topics to create)
    w.generation = w.app.consumer_generation_id      # the consumer's assignment, taken in
    return w


@pytest.fixture
def worker():
    collected = []

    async def collect(topic, key, value):
        collected.append((topic, key, value))

    return new_worker(collect, collected), collected


def changelog_to(timeline):
    async def send(topic, partition, records):
        timeline.append(("changelog", topic, [(k, v) for k, v in records]))
    return send


class PlacingLog:
    """Outputs collected in order, each placed at the next offset of its topic (as the
    outputs producer's acknowledgements would place them)."""

    def __init__(self, timeline):
        self.timeline, self.offsets = timeline, {}

    async def many(self, items):
        groups = []
        for i, (topic, key, value) in enumerate(items):
            self.timeline.append((topic, key, value))
            offset = self.offsets[topic] = self.offsets.get(topic, -1) + 1
            placed = asyncio.get_running_loop().create_future()
            placed.set_result(SimpleNamespace(partition=0, offset=offset))
            groups.append((placed, [i]))
        return groups

    async def __call__(self, topic, key, value):
        (placed, _), = await self.many([(topic, key, value)])
        return placed


def record(topic, offset, value, key=b"w1"):
    return RawRecord(topic, 0, offset, key, json.dumps(value).encode() if isinstance(value, dict) else value)


async def test_the_bulk_path_sequences_valid_inputs_and_dead_letters_the_rest(worker):
    w, out = worker
    assert await w.apply_fetch({
        "models": [record("models", 0, MODEL)],
        "examples": [record("examples", 0, {"model_id": "w1", "active": [1, 4], "y": 1}),
                     record("examples", 1, b"{broken")],
        "queries": [record("queries", 0, {"model_id": "w1", "active": [12]})]})
    topics = [t for t, _, _ in out if t != "changelog"]
    assert topics == ["model-events", "model-events", "rejected", "rejected"]
    assert out[1][2]["event"]["active"] == [1, 4] and out[1][1] == "w1"
    assert out[2][2]["reason"] == "malformed JSON" and "broken" not in json.dumps(out[2][2])
    assert "wrong dimension" in out[3][2]["reason"]
    assert w.sequencer_view.get("src/examples:0") == 1      # state written through the table


async def test_the_bulk_path_applies_the_log_registers_predicts_and_charges(worker):
    w, out = worker
    events = [{"source": "models:0:0", "event": MODEL},
              {"source": "examples:0:0", "event": {"type": "example", "model_id": "w1",
                                                    "active": [2], "y": 1}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}},
              {"source": "queries:0:0", "event": {"type": "query", "model_id": "w1", "active": [2]}}]
    assert await w.apply_fetch({"model-events": [record("model-events", i, e) for i, e in enumerate(events)]})
    by_topic = {}
    for topic, _, value in out:
        by_topic.setdefault(topic, []).append(value)
    assert [p["kind"] for p in by_topic["predictions"]] == ["example", "query"]   # re-delivery skipped
    assert by_topic["ledger"][0]["mechanism"] == "above_threshold"
    assert by_topic["predictions"][-1]["epsilon_spent"] == by_topic["ledger"][-1]["spent_epsilon"]
    assert w.model_view.get("log/0") == 4           # the processor's next log offset
    assert w.status()["models"]["w1"]["events"] == 3      # the registration, the example, the query


async def test_a_chunks_table_writes_leave_together_after_its_outputs():
    """Both agents' changelog records of a chunk go to faust's producer in one step, after
    the processor's outputs (the crash order), and hold what the tables hold. (A chunk
    that writes large state sends those records before its outputs, as before, and the
    sequencer's waiting records go with them: still after their log appends.)"""
    timeline = []
    w = new_worker(PlacingLog(timeline), timeline)
    w.assigned_log_partitions = lambda: {0}          # no broker: this worker owns partition 0
    assert await w.apply_fetch({
        "models": [record("models", 0, MODEL)],
        "examples": [record("examples", 0, {"model_id": "w1", "active": [1, 4], "y": 1})]})
    topics = [entry[0] for entry in timeline]
    appended = max(i for i, topic in enumerate(topics) if topic == "model-events")
    assert min(i for i, topic in enumerate(topics) if topic == "changelog") > appended
    assert topics[-1] == "changelog" and topics.index("predictions") < len(topics) - 1
    timeline.clear()
    assert await w.apply_fetch({"queries": [record("queries", 0, {"model_id": "w1", "active": [2]}),
                                            record("queries", 1, {"model_id": "w1", "active": [3]})]})
    topics = [entry[0] for entry in timeline]
    assert topics[:4] == ["model-events", "model-events", "predictions", "predictions"]
    assert topics[4:] == ["changelog", "changelog"]    # one step, after every output
    written = {}
    for _, topic, records in timeline[4:]:
        table = "sequencer" if "sequencer-state" in topic else "model"
        written[table] = {k.decode(): json.loads(v) for k, v in records}
    assert written["sequencer"] == {"src/queries:0": 1}
    assert written["model"]["log/0"] == 4 == w.model_view.get("log/0")
    for key, value in written["model"].items():
        assert w.model_view.get(key) == value


async def test_batch_time_is_exposed_only_when_asked_for_and_covers_the_batch(worker):
    """The processing-time histogram (a timing side channel) is absent by default; with
    ``latency_metrics`` the rate of its sum is the share of time spent in batches (the
    saturation signal docs/operations.md tells operators to scale out by): its spans cover
    nearly all of ``apply_fetch``, and never more."""
    quiet, _ = worker
    assert await quiet.apply_fetch({"models": [record("models", 0, MODEL)]})
    assert b"dpstream_processing_seconds" not in quiet.metrics.text()
    timeline = []
    w = new_worker(PlacingLog(timeline), timeline, latency_metrics=True)
    w.assigned_log_partitions = lambda: {0}
    examples = [record("examples", i, {"model_id": "w1", "active": [1 + i % 9], "y": i % 2})
                for i in range(1_200)]                      # three chunks of BATCH = 500 at most
    t0 = time.perf_counter()
    assert await w.apply_fetch({"models": [record("models", 0, MODEL)], "examples": examples})
    elapsed = time.perf_counter() - t0
    sample = w.metrics.registry.get_sample_value
    assert sample("dpstream_processing_seconds_count", {"stage": "sequencer"}) == 3
    timed = sample("dpstream_processing_seconds_sum", {"stage": "sequencer"})
    assert 0.8 * elapsed <= timed <= elapsed


def test_faust_environment_variables_do_not_override_the_workers_settings(monkeypatch):
    """Before: faust read ~80 environment variables over the settings the worker gave it
    ($BROKER_URL moved a worker to another broker, $WEB_BIND put its pages on every
    interface, silently). Now the worker's flags and client config alone decide."""
    for name, value in {"BROKER_URL": "kafka://10.9.9.9:1", "WEB_BIND": "0.0.0.0",
                        "WEB_PORT": "7777", "BROKER_COMMIT_EVERY": "1"}.items():
        monkeypatch.setenv(name, value)
    conf = new_worker(lambda *a: None, []).app.conf
    assert [str(u) for u in conf.broker] == ["kafka://127.0.0.1:1"]
    assert (conf.web_bind, conf.web_port, conf.broker_commit_every) == ("127.0.0.1", 6066, 10_000)


async def test_a_record_on_another_partition_than_its_models_is_refused_by_a_fixed_reason():
    """A client whose partitioner is not Kafka's default (librdkafka's CRC32) puts a record
    keyed by its model id on another partition than the model's registration and log:
    the worker holding it may not hold the model's config, or may still be restoring it.
    Before, that was an "unknown model" dead letter about a valid record, at random; now
    it is refused always, by a reason that names no value and says what to change."""
    from dpstream.agents.sequencer import MISPLACED
    from dpstream.streams.worker.observe import model_partition
    out = []

    async def collect(topic, key, value):
        out.append((topic, key, value))
    w = new_worker(collect, out, partitions=4)
    home = model_partition("w1", 4)
    other = (home + 1) % 4
    assert await w.apply_fetch({
        "models": [RawRecord("models", home, 0, b"w1", json.dumps(MODEL).encode())],
        "examples": [RawRecord("examples", other, 0, b"w1", b'{"model_id": "w1", "active": [1], "y": 1}'),
                     RawRecord("examples", home, 0, b"w1", b'{"model_id": "w1", "active": [1], "y": 1}')]})
    rejected = [v for t, _, v in out if t == "rejected"]
    assert [r["reason"] for r in rejected] == [MISPLACED]
    assert rejected[0]["source"] == f"examples:{other}:0"
    assert sum(t == "model-events" for t, _, _ in out) == 2          # the registration, the placed example
