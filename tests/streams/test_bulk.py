"""The bulk path's held log partitions (streams/bulk.py ``BulkPath.release_held``),
without a broker."""
import asyncio
from types import SimpleNamespace

from dpstream.streams.bulk import BulkPath


class App:
    def __init__(self):
        self.consumer = SimpleNamespace()
        self.consumer_generation_id, self.should_stop = 3, False


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
