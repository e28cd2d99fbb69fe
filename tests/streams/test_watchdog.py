"""The recovery watchdog (streams/watchdog.py): quiet while recovery progresses or none
runs; after STALL seconds without progress it seeks the stuck partitions again, and if
that does not help within another STALL seconds it crashes the app (the worker exits
and is restarted). No broker: the worker's timer feeds it faust's recovery state."""
from dpstream.streams.watchdog import RecoveryStalled, RecoveryWatchdog


class Recovery:
    def __init__(self):
        self.remaining, self.sought, self.crashed, self.now = {}, [], [], 0.0

    def dog(self, seek=None):
        async def record(tps):
            self.sought.append(sorted(tps))

        async def crash(exc):
            self.crashed.append(exc)
        return RecoveryWatchdog(lambda: dict(self.remaining), seek or record, crash, stall=60.0,
                                clock=lambda: self.now)

    async def run(self, dog, until, every=10.0):
        while self.now < until:
            self.now += every
            await dog.check()


async def test_no_action_while_recovery_progresses_or_none_runs():
    r = Recovery()
    dog = r.dog()
    await r.run(dog, 300)                               # no recovery at all
    r.remaining = {"p0": 5000, "p1": 10}
    for _ in range(40):                                 # slow but steady: a record per 10 s
        r.remaining["p0"] -= 1
        await r.run(dog, r.now + 10)
    assert r.sought == [] and r.crashed == []


async def test_a_stall_is_sought_again_once_then_the_app_crashes():
    r = Recovery()
    dog = r.dog()
    r.remaining = {"p0": 50, "p1": 7}
    await r.run(dog, 50)
    assert r.sought == []
    await r.run(dog, 70)                                # 60 s without progress
    assert r.sought == [["p0", "p1"]] and r.crashed == []
    await r.run(dog, 120)
    assert r.crashed == []                              # another 60 s allowed after the seek
    await r.run(dog, 140)
    assert len(r.crashed) == 1 and isinstance(r.crashed[0], RecoveryStalled)


async def test_progress_after_the_seek_resets_it():
    r = Recovery()
    dog = r.dog()
    r.remaining = {"p0": 50}
    await r.run(dog, 70)
    assert r.sought == [["p0"]]
    r.remaining = {"p0": 20}                            # the seek helped
    await r.run(dog, 120)
    r.remaining = {}                                    # recovery done
    await r.run(dog, 400)
    assert r.sought == [["p0"]] and r.crashed == []


async def test_a_seek_that_fails_does_not_stop_the_watchdog():
    r = Recovery()

    async def seek(tps):
        raise RuntimeError("revoked")
    dog = r.dog(seek)
    r.remaining = {"p0": 5}
    await r.run(dog, 70)                                # the seek raised, and was logged
    assert r.crashed == []
    await r.run(dog, 140)
    assert len(r.crashed) == 1
