"""The faust / mode / aiokafka internals the worker relies on exist, with the signatures
relied on, in the installed versions (streams/worker/faust_seam.py ``contract``; no broker)."""
import pytest

from dpstream.streams.worker.faust_seam import contract


def test_every_framework_internal_the_worker_relies_on_is_there():
    assert contract() == []


def test_the_contract_notices_a_missing_internal(monkeypatch):
    from faust.transport.consumer import Consumer
    monkeypatch.delattr(Consumer, "_wait_next_records")
    assert any("_wait_next_records" in p for p in contract())


def test_the_first_run_of_acked_offsets_is_fausts_own_answer_in_every_case():
    import numpy as np
    from faust.utils.functional import consecutive_numbers

    from dpstream.streams.worker.faust_seam import first_run
    rng = np.random.default_rng(7)          # test data only, no mechanism
    cases = [[], [5], [5, 6, 7], [5, 7], [5, 5, 6], [3, 1, 2], [1, 3, 2, 4], [4, 5, 7, 6],
             list(range(100, 10_100))]
    for _ in range(300):
        start, n = int(rng.integers(0, 50)), int(rng.integers(1, 40))
        run = list(range(start, start + n))
        if rng.random() < 0.5:              # a gap, a duplicate, or a shuffle
            k = int(rng.integers(0, n))
            run = [*run[:k], *(o + 2 for o in run[k:])] if rng.random() < 0.5 else \
                sorted([*run, run[k]]) if rng.random() < 0.5 else list(rng.permutation(run))
        cases.append([int(o) for o in run])
    for acked in cases:
        assert next(first_run(list(acked)), None) == next(consecutive_numbers(list(acked)), None), acked


def test_commits_use_the_fast_first_run_and_commit_what_faust_would():
    import faust
    from faust.types import TP

    from dpstream.streams.worker import faust_seam
    app = faust.App("dpstream-seam-test", broker="kafka://127.0.0.1:1")
    app.finalize()
    faust_seam.faster_commits()
    import faust.transport.consumer as module
    assert module.consecutive_numbers is faust_seam.first_run
    consumer, tp = app.consumer, TP("examples", 0)
    consumer._committed_offset[tp] = 100
    for acked, expected, left in (([*range(100, 10_100)], 10_100, []),
                                  ([*range(100, 200), *range(300, 400)], 200, [*range(300, 400)])):
        consumer._acked[tp] = list(reversed(acked))         # faust sorts them first
        consumer._acked_index[tp] = set(acked)
        assert consumer._new_offset(tp) == expected
        assert consumer._acked[tp] == left and consumer._acked_index[tp] == set(left)


async def test_records_of_a_partition_that_left_the_active_set_are_given_back_not_dropped():
    """A fetch can return records of a partition faust no longer asks for (a rebalance
    emptied its live active set while the fetch waited, and aiokafka then returns every
    partition); aiokafka's position is already past them. The drain loop must seek back
    to the first of them, hand over only the active partition's records, and pass no
    changelog record of the inactive partition to faust: the two-worker kill test hung
    in table recovery when those records were dropped instead."""
    import asyncio
    from types import SimpleNamespace

    import faust
    from faust.types import TP

    from dpstream.streams.worker import faust_seam
    app = faust.App("dpstream-seam-drain", broker="kafka://127.0.0.1:1")
    app.finalize()
    consumer = app.consumer
    examples, gone, changelog = TP("t-examples", 0), TP("t-examples", 1), TP("t-app-state-changelog", 0)
    rec = lambda tp, o: SimpleNamespace(partition=tp.partition, offset=o, key=b"k", value=b"v")  # noqa: E731
    fetch = {examples: [rec(examples, 5), rec(examples, 6)], gone: [rec(gone, 40), rec(gone, 41)],
             changelog: [rec(changelog, 0), rec(changelog, 1)]}
    calls = {"fetches": 0}

    async def wait_next_records(timeout):
        calls["fetches"] += 1
        if calls["fetches"] > 1:
            consumer._stopped.set()
            return {}, {examples}
        return fetch, {examples}               # only examples:0 is still active

    sought, handed, delivered = [], [], []

    async def seek(tp, offset):
        sought.append((tp, offset))

    async def callback(message):
        delivered.append(message)

    async def handover(generation, batch, offsets):
        handed.append((batch, offsets))

    consumer._wait_next_records = wait_next_records
    consumer._seek = seek
    consumer.callback = callback
    faust_seam.install_drain(app, {"t-examples": "examples"}, handover)
    await asyncio.wait_for(consumer._drain_messages(SimpleNamespace(_stopped=asyncio.Event())), 5)
    assert sorted(sought) == sorted([(gone, 40), (changelog, 0)])
    assert delivered == []
    [(batch, offsets)] = handed
    assert [r.offset for r in batch["examples"]] == [5, 6] and offsets == {examples: [5, 6]}
    assert consumer._read_offset.get(gone) is None and consumer._read_offset.get(changelog) is None


def _tables():
    """A worker app's two tables (no broker), with a ChangelogWriter collecting its steps."""
    from dpstream.mechanisms.randomness import KeyedRandomness
    from dpstream.streams.worker.app import WorkerApp
    from dpstream.streams.worker.kafka import Kafka
    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"faust-seam-tests-key-00000000000"),
                  emit_override=lambda *a: None, app_id="dpstream-seam")
    w.app.finalize()
    w.state.assigned = w.state.ready = set(range(w.partitions))   # no broker: all restored, empty
    return w


async def test_changelog_records_are_serialized_as_fausts_own_path_would_write_them():
    """The changelogs keep faust's tables' format (a worker restores what either wrote):
    the writer's bytes must be what faust's ``send_changelog`` would produce
    (``as_future_message``), tombstones too, and the restore reads them back."""
    from dpstream.streams.worker.state import Table
    w = _tables()
    sent = []

    async def send(topic, partition, records):
        sent.append((topic, partition, records))
    w.changelog.send = send
    values = [{"a": 1, "b": [1.5, -2, None], "c": {"d": "e"}}, [3, 4], 7, "text", None]
    async with w.changelog.held():
        w.model_view.set_partition(2)
        for i, value in enumerate(values):
            if value is None:
                w.model_view[f"k{i - 1}"] = 0
                del w.model_view[f"k{i - 1}"]
            else:
                w.model_view[f"k{i}"] = value
    (topic, partition, records), = sent
    table = w.app.Table("model-state", partitions=4, key_type=bytes)    # faust's own
    assert topic == table.changelog_topic.get_topic_name() == "dpstream-seam-model-state-changelog"
    assert partition == 2
    for (key, value), expect in zip(records, [*values[:-1], 0, None]):
        message = table.changelog_topic.as_future_message(
            key=key, value=expect, partition=2, key_serializer=table.key_serializer,
            value_serializer=table.value_serializer if expect is not None else "raw").message
        assert (key, value) == (message.key, message.value)
        assert Table.decode(key, value) == (key.decode(), expect)
    assert "k3" not in w.model_view


async def test_a_deferrable_store_waits_for_its_block_and_a_failed_step_keeps_its_records():
    import asyncio

    import pytest
    w = _tables()
    steps, fail = [], [False]

    async def send(topic, partition, records):
        if fail[0]:
            fail[0] = False
            raise ConnectionError("broker away")
        steps.append([k for k, _ in records])
    w.changelog.send = send
    w.sequencer_view.set_partition(0)
    w.model_view.set_partition(0)
    async with w.changelog.held():
        w.sequencer_view["src/examples:0"] = 1          # deferrable: waits for the block's end
        await asyncio.sleep(0.01)
        assert steps == []
    assert steps == [[b"src/examples:0"]]
    fail[0] = True                                      # the step at the block's end fails:
    with pytest.raises(ConnectionError):                # the block raises (the batch is retried)
        async with w.changelog.held():
            w.sequencer_view["src/examples:0"] = 2
    assert steps == [[b"src/examples:0"]] and w.sequencer_view.get("src/examples:0") == 2
    fail[0] = True                                      # failing again, the same key written
    with pytest.raises(ConnectionError):                # again: kept once (its last write)
        async with w.changelog.held():
            w.sequencer_view["src/examples:0"] = 3
    assert len(w.changelog._pending) == 1
    w.model_view["log/0"] = 5                           # not deferrable: sent on the next turn,
    await asyncio.sleep(0.01)                           # with the record the failed step kept
    assert steps == [[b"src/examples:0"], [b"src/examples:0"], [b"log/0"]]


async def test_an_undelivered_changelog_batch_is_logged_by_its_error_name_only(caplog):
    import asyncio

    from dpstream.streams.worker.faust_seam import _log_undelivered
    delivery = asyncio.get_running_loop().create_future()
    delivery.set_exception(TimeoutError("model/secret-model/head"))
    _log_undelivered(delivery)
    ok = asyncio.get_running_loop().create_future()
    ok.set_result(None)
    _log_undelivered(ok)
    assert [r.getMessage() for r in caplog.records] == [
        "table changelog records were not delivered (TimeoutError); a restart re-reads "
        "more of the log"]


async def test_a_commit_the_broker_refuses_is_reported_and_does_not_crash_the_consumer():
    """Issue 41 item 16: with the worker's Read on an input revoked, faust's periodic
    commit raised TopicAuthorizationFailedError and faust's ``_commit`` crashed the
    consumer service; the worker then neither worked nor exited. Now the refusal goes to
    ``on_refused`` and the commit counts as not done; any other error still crashes."""
    import asyncio

    import faust
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    from aiokafka.structs import TopicPartition
    from faust.types import TP

    from dpstream.streams.worker.faust_seam import InLoopConsumerThread, ThreadConsumerThread
    app = faust.App("dpstream-seam-refused", broker="kafka://127.0.0.1:1")
    app.finalize()
    tp = TP("t-examples", 0)

    class Refusing:
        def __init__(self, error):
            self.error, self.commits = error, []

        def assignment(self):
            return {TopicPartition(tp.topic, tp.partition)}

        async def commit(self, offsets):
            self.commits.append(offsets)
            raise self.error

    for thread_class in (InLoopConsumerThread, ThreadConsumerThread):
        for error in (TopicAuthorizationFailedError({"t-examples"}), GroupAuthorizationFailedError("g"),
                      ValueError("a bug")):
            thread = thread_class(app.consumer, loop=asyncio.get_running_loop())
            refused = []
            thread.on_refused = refused.append
            thread._consumer = Refusing(error)
            assert await thread._commit({tp: 7}) is False
            assert thread._consumer.commits and list(thread._consumer.commits[0].values())[0].offset == 7
            if isinstance(error, ValueError):
                assert thread.crashed and refused == []
            else:
                assert refused == [error] and not thread.crashed, thread_class


async def test_an_error_the_group_coordination_holds_is_taken_so_that_it_tries_again():
    """aiokafka's group coordinator holds a refused FindCoordinator (group rights revoked)
    for the next getmany, and retries only once someone took it; faust calls getmany only
    with partitions assigned, so a worker started while its group right was revoked never
    joined, even after the right came back (tests/streams/test_kafka_revoke.py)."""
    import asyncio
    from types import SimpleNamespace

    from aiokafka.errors import GroupAuthorizationFailedError

    from dpstream.streams.worker.faust_seam import take_group_error

    class Coordinator:
        def __init__(self, task):
            self._coordination_task, self._pending_exception = task, None

        def check_errors(self):             # aiokafka's: the task's error, then the held one
            if self._coordination_task.done():
                self._coordination_task.result()
            if self._pending_exception is not None:
                err, self._pending_exception = self._pending_exception, None
                raise err

    async def call_thread(fun, *args):
        return fun(*args)

    running = asyncio.get_running_loop().create_future()
    coordinator = Coordinator(running)
    consumer = SimpleNamespace(_coordinator=coordinator)
    app = SimpleNamespace(consumer=SimpleNamespace(_thread=SimpleNamespace(
        _ensure_consumer=lambda: consumer, call_thread=call_thread)))
    assert await take_group_error(app) is None
    refused = GroupAuthorizationFailedError("p-app")
    coordinator._pending_exception = refused
    assert await take_group_error(app) == (refused, False)
    assert coordinator._pending_exception is None and await take_group_error(app) is None
    dead = asyncio.get_running_loop().create_future()
    dead.set_exception(refused)
    coordinator._coordination_task = dead
    assert await take_group_error(app) == (refused, True)
    running.cancel()


def _checked_partition(monkeypatch, in_recovery=False):
    """A worker-style app (our consumer service, no broker) whose one partition has
    records past its position, started long enough ago for faust's livelock check
    (``verify_event_path``) to judge it; returns (app, thread, tp, check)."""
    from time import monotonic
    from types import SimpleNamespace

    import faust
    from faust.types import TP

    from dpstream.streams.worker import faust_seam
    app = faust.App("dpstream-seam-idle", broker="kafka://127.0.0.1:1")
    app.finalize()
    faust_seam.use_consumer(app, in_loop=True, on_refused=lambda err: None)
    thread, tp = app.consumer._thread, TP("t-examples", 0)
    state = SimpleNamespace(timestamp=monotonic() * 1000, highwater=10, position=5)
    assignment = SimpleNamespace(active=True, state_value=lambda aiotp: state)
    fetcher = SimpleNamespace(_subscriptions=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)))
    monkeypatch.setattr(thread, "_ensure_consumer", lambda: SimpleNamespace(_fetcher=fetcher))
    monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: True)
    # the worker restoring a partition's state (streams/worker/state.py) or not
    app.dpstream = SimpleNamespace(state=SimpleNamespace(assigned={0, 1}, ready={0} if in_recovery else {0, 1}))
    thread.time_started = monotonic() - 2 * app.conf.stream_processing_timeout
    return app, thread, tp, lambda: thread.verify_event_path(monotonic(), tp)


async def test_a_partition_the_drain_handed_over_is_not_reported_as_never_processed(monkeypatch, caplog):
    """Before: faust's livelock check logged "Stream has not started processing TP(...)"
    at ERROR, every 7 s, for every partition with a backlog once a worker had run 5 min:
    records handed over in bulk never set faust's inbound time. Now the drain sets it."""
    import asyncio
    from time import monotonic
    from types import SimpleNamespace

    from dpstream.streams.worker import faust_seam
    app, thread, tp, check = _checked_partition(monkeypatch)
    consumer, fetches = app.consumer, []

    async def wait_next_records(timeout):
        fetches.append(timeout)
        if len(fetches) > 1:
            consumer._stopped.set()
            return {}, {tp}
        return {tp: [SimpleNamespace(partition=0, offset=5, key=b"k", value=b"v")]}, {tp}

    async def handover(generation, batch, offsets):
        pass

    consumer._wait_next_records = wait_next_records
    faust_seam.install_drain(app, {"t-examples": "examples"}, handover)
    await asyncio.wait_for(consumer._drain_messages(SimpleNamespace(_stopped=asyncio.Event())), 5)
    thread.tp_last_committed_at[tp] = monotonic()       # and its offsets commit, as they do
    caplog.set_level("INFO")
    check()
    assert caplog.records == []


@pytest.mark.parametrize("recovering, level", [(False, "WARNING"), (True, "INFO")])
def test_a_partition_no_batch_has_taken_yet_is_a_warning_or_info_not_an_error(monkeypatch, caplog,
                                                                            recovering, level):
    """Before: ERROR (with faust's advice to raise stream_processing_timeout), also for a
    partition a rebalance brought while its tables recover, which is expected. Now one
    WARNING line, INFO while the worker restores state; faust's other messages keep their ERROR."""
    app, thread, tp, check = _checked_partition(monkeypatch, in_recovery=recovering)
    caplog.set_level("INFO")
    check()
    [record] = [r for r in caplog.records if "Stream has not started processing" in r.getMessage()]
    assert record.levelname == level and str(tp) in record.getMessage()
    assert "nothing is lost" in record.getMessage() and "stream_processing_timeout" not in record.getMessage()


async def test_the_worker_s_producers_wait_30_s_for_an_answer_and_keep_their_batches_20_minutes(tmp_path):
    """Both producers a worker builds (faust's, which carries the changelogs, and the
    outputs producer): a connection waits REQUEST_WAIT_MS for a broker's answer, a batch
    lives producer_request_timeout. Before, both were 20 minutes, and a hung broker held
    the worker's writes for as long as it hung (the broker drills' node-hung)."""
    from dpstream.mechanisms.randomness import KeyedRandomness
    from dpstream.streams.worker import faust_seam as seam
    from dpstream.streams.worker.app import WorkerApp
    from dpstream.streams.worker.kafka import Kafka

    app = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(bytes(32)), data_dir=str(tmp_path)).app
    life_ms = int(app.conf.producer_request_timeout * 1000)
    assert life_ms == 1_200_000 and seam.REQUEST_WAIT_MS == 30_000
    for producer in (seam.new_producer(app), app.producer._new_producer()):
        assert producer.client._request_timeout_ms == seam.REQUEST_WAIT_MS
        assert producer._request_timeout_ms == life_ms            # the batches' life, kept
