"""A dpstream worker that asks its group for a rebalance right after the broker
acknowledged its N-th batch of outputs, before that batch's state is written (fault
injection from the test harness: ``python -m tests.streams.rejoining_worker N worker
...``), as a missed heartbeat or a metadata change would. The batch's outputs are then
published again, identically, once the partitions come back: at-least-once."""
import asyncio
import sys

from dpstream.agents import processor
from dpstream.streams.cli.commands import main
from dpstream.streams.worker import app, faust_seam

WORKERS = []


def rejoin_after(n: int) -> None:
    init, deliver, calls = app.WorkerApp.__init__, processor.deliver, [0]

    def remembered(self, *args, **kwargs):
        init(self, *args, **kwargs)
        WORKERS.append(self)

    async def delivered(emit, items):
        where = await deliver(emit, items)
        if any(topic == "predictions" for topic, _, _ in items):
            calls[0] += 1
            if calls[0] == n:
                worker = WORKERS[0]
                faust_seam.aiokafka_consumer(worker.app)._coordinator.request_rejoin()
                deadline = asyncio.get_running_loop().time() + 30
                while not worker.revoked and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.01)     # revoked before the batch writes its state
        return where

    app.WorkerApp.__init__ = remembered
    processor.deliver = delivered


if __name__ == "__main__":
    rejoin_after(int(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
