"""The bulk path's batch retry (streams/worker/bulk.py ``BulkPath._retry``), without a broker: a
failure the broker or an admin can end is retried for as long as it lasts; one that
waiting cannot change ends in a crash of the app (the worker exits for its supervisor);
a stop ends the retry at once; the line names what failed, never ``{}``.

Before (issue 41 item 16, issue 43 item 12): the loop retried while the consumer
generation stayed the same, whatever the error, logging "failed to Write topic {} ...
(NotReady)" every second: after faust's consumer crashed the generation never changed,
so the worker retried for ever, and a SIGTERM left it retrying for 40 s and more."""
import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

from dpstream.streams.worker import bulk
from dpstream.streams.worker.bulk import BatchFailed, BulkPath


class App:
    def __init__(self):
        self.consumer = SimpleNamespace()
        self.consumer_generation_id, self.should_stop, self.crashes = 3, False, []

    async def crash(self, exc):
        self.crashes.append(exc)
        self.should_stop = True


def path(apply, explain=None):
    app = App()
    return app, BulkPath(app, {"p-examples": "examples"}, apply, log_topic="p-model-events",
                         log_positions=dict, on_batch=lambda: None,
                         explain=explain or (lambda err, doing: f"failed to {doing} ({type(err).__name__})"))


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(bulk, "RETRY_PAUSE", 0.001)
    monkeypatch.setattr(bulk, "GIVE_UP_AFTER", 0.05)


async def test_a_refused_write_is_retried_until_granted_however_long(caplog):
    calls = []

    async def apply(batch):
        calls.append(1)
        if len(calls) < 200:                    # longer than GIVE_UP_AFTER
            raise TopicAuthorizationFailedError({"p-predictions"})
        return True
    app, p = path(apply, lambda err, doing: doing.format("p-predictions"))
    assert await asyncio.wait_for(p._retry(3, {"examples": []}), 30) is True
    assert app.crashes == [] and len(calls) == 200
    lines = {r.getMessage() for r in caplog.records}
    assert "Write topic p-predictions; retrying the batch every 0 s, nothing is lost" in lines
    assert not any("{}" in line for line in lines)


async def test_an_error_waiting_cannot_change_crashes_the_app_instead_of_retrying_for_ever(caplog):
    class NotReady(Exception):                  # faust's producer gone (faust.exceptions.NotReady)
        pass

    async def apply(batch):
        raise NotReady("Producer service not yet started")
    app, p = path(apply)
    assert await asyncio.wait_for(p._retry(3, {"examples": []}), 30) is None
    assert len(app.crashes) == 1 and isinstance(app.crashes[0], BatchFailed)
    line = caplog.records[-1].getMessage()
    assert "failed to Write the batch's outputs and state (NotReady)" in line
    assert "stopping the worker so that its supervisor restarts it" in line


async def test_a_batch_that_fails_because_the_worker_is_stopping_is_a_warning_not_an_error(caplog):
    """Before: at SIGTERM faust stops the producer under the batch being written, and the
    worker logged "failed to Write the batch's outputs and state (NotReady)" at ERROR
    while stopping as asked (nothing is lost: its offsets are not committed). Now one
    warning that says so, and no retry; the same failure while running stays an ERROR."""
    class NotReady(Exception):                  # faust.exceptions.NotReady
        pass

    app, p = path(lambda batch: None)

    async def apply(batch):
        p.stop()                                # SIGTERM arrives while the batch is written
        raise NotReady("Producer service not yet started")
    p._apply = apply
    p.batch_records = 7
    assert await asyncio.wait_for(p._retry(3, {"examples": []}), 30) is None
    [record] = caplog.records
    assert record.levelname == "WARNING" and app.crashes == []
    assert record.getMessage() == ("stopping: failed to Write the batch's outputs and state "
                                   "(NotReady); a batch of 7 record(s) is left unapplied; the next "
                                   "worker reads it again, nothing is lost")
    running, q = path(lambda batch: None)
    calls = []

    async def fails_once(batch):
        calls.append(1)
        if len(calls) == 1:
            raise NotReady("Producer service not yet started")
        return True
    q._apply = fails_once
    assert await asyncio.wait_for(q._retry(3, {"examples": []}), 30) is True
    assert caplog.records[-1].levelname == "ERROR"


async def test_a_broker_gone_is_waited_for_and_a_stop_ends_the_wait():
    async def apply(batch):
        raise KafkaTimeoutError()
    app, p = path(apply)
    retrying = asyncio.ensure_future(p._retry(3, {"examples": [1, 2]}))
    await asyncio.sleep(0.2)                    # several times GIVE_UP_AFTER
    assert not retrying.done() and app.crashes == []
    p.stop()                                    # SIGTERM (watchdog.StopGuard)
    assert await asyncio.wait_for(retrying, 30) is None and app.crashes == []


async def test_a_held_log_partition_is_released_between_batches_never_in_the_middle_of_one():
    """Issue 43 item 11: the release timer ran between two chunks of one batch and sought
    the log partition to the processor's position, past the first chunk's own appends,
    which are acked only at the batch's end, from the consumer's read offset; they were
    never acked and the group's committed offset stayed below them for good (the
    pipeline test under load: 221 of 751). Now the timer leaves a busy applier alone;
    and a partition held again while the seek was awaited stays paused."""
    from faust.types import TP

    log = TP("p-model-events", 0)
    calls = []

    class Consumer(SimpleNamespace):
        def assignment(self):
            return {log}

        async def seek_wait(self, offsets):
            calls.append(("seek", offsets[log]))
            await asyncio.sleep(0)

        def resume_partitions(self, tps):
            calls.append(("resume", tps[0]))

    app = App()
    app.consumer, app.rebalancing, app.in_recovery = Consumer(), False, False
    p = BulkPath(app, {"p-model-events": "model-events"}, None, log_topic="p-model-events",
                 log_positions=lambda: {0: 279}, on_batch=lambda: None)
    p.held[log] = 0.0
    p.busy = True                                # a batch is being applied
    await p.release_idle(100.0)
    assert calls == [] and log in p.held
    p.busy = False
    await p.release_idle(100.0)
    assert calls == [("seek", 279), ("resume", log)] and log not in p.held

    class Rehold(Consumer):
        async def seek_wait(self, offsets):
            calls.append(("seek", offsets[log]))
            p.held[log] = 100.0                  # an own append while the seek was awaited

    app.consumer, calls[:] = Rehold(), []
    p.held[log] = 0.0
    await p.release_idle(100.0)
    assert calls == [("seek", 279)] and log in p.held          # still paused


def test_a_fetch_error_waiting_cannot_change_fails_the_fetcher_after_a_while(caplog):
    """aiokafka re-raises the error of a group coordination task that died on every later
    fetch; before, the drain loop fetched again every 2 s for ever."""
    from aiokafka.errors import KafkaError
    _, p = path(None)
    dead = KafkaError("Unexpected error during coordination")
    assert p._fetch_failed(dead, 0.0) is True                   # fetched again, for a while
    assert p._fetch_failed(dead, bulk.GIVE_UP_AFTER) is False    # then the fetcher fails
    assert "stopping the worker so that its supervisor restarts it" in caplog.records[-1].getMessage()
    refused = TopicAuthorizationFailedError({"p-examples"})
    assert p._fetch_failed(refused, 3600.0) is True              # an admin can grant it: waits
    assert p._fetch_failed(ValueError("a bug"), 0.0) is False
