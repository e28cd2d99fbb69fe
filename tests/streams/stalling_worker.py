"""A dpstream worker whose Kafka consumer stops handing records over after N of them
(fault injection from the test harness: ``python -m tests.streams.stalling_worker N
worker ...``), as a stalled consumer would; the worker's tail check must read the rest
from the log itself."""
import sys

from dpstream.streams.worker import bulk
from dpstream.streams.cli.commands import main


def stall_after(n: int) -> None:
    handover = bulk.BulkPath._handover
    handed = [0]

    async def stalled(self, generation, batch, offsets):
        if handed[0] >= n:
            return                              # nothing handed over any more
        handed[0] += sum(len(o) for o in offsets.values())
        await handover(self, generation, batch, offsets)

    bulk.BulkPath._handover = stalled


if __name__ == "__main__":
    stall_after(int(sys.argv[1]))
    sys.exit(main(sys.argv[2:]))
