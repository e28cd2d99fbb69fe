"""The recovery watchdog (streams/worker/watchdog.py): quiet while recovery progresses or none
runs; after STALL seconds without progress it seeks the stuck partitions again, and if
that does not help within another STALL seconds it crashes the app (the worker exits
and is restarted). No broker: the worker's timer feeds it faust's recovery state."""
from dpstream.streams.worker.watchdog import RecoveryStalled, RecoveryWatchdog


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


# ---------------------------------------------------------------- the stop guard
class Exits:
    """A StopGuard whose process exit is recorded (an event, not a clock, to wait on)."""

    def __init__(self, crashed=None, left="2 partition(s) with records applied but not committed"):
        import threading
        self.codes, self.stopped, self.exited = [], [], threading.Event()
        self.crash = crashed

        def exit_(code):
            self.codes.append(code)
            self.exited.set()
        from dpstream.streams.worker.watchdog import StopGuard
        self.guard = StopGuard(lambda: left, lambda: self.crash, on_stop=lambda: self.stopped.append(1),
                               within=0.05, exit=exit_, poll=0.01)


def test_a_sigterm_the_worker_does_not_finish_ends_the_process_with_143_and_a_line(caplog):
    """Before: with its broker gone a worker was still running 70 s after ``kill <pid>``."""
    import signal
    e = Exits()
    e.guard._on_signal(signal.SIGTERM, None)
    assert e.stopped == [1]                              # the retry loops are told at once
    assert e.exited.wait(10) and e.codes == [143]
    line = caplog.records[-1].getMessage()
    assert "SIGTERM received" in line and "exiting now (code 143)" in line
    assert "2 partition(s) with records applied but not committed" in line


def test_a_worker_that_stops_in_time_keeps_its_own_exit():
    import signal
    e = Exits()
    e.guard._on_signal(signal.SIGINT, None)
    e.guard.close()                                      # the process ended meanwhile
    assert not e.exited.wait(0.3) and e.codes == []


def test_a_crashed_app_ends_the_process_non_zero_for_its_supervisor(caplog):
    """Before: a crashed consumer left a process that neither worked nor exited."""
    import threading
    e = Exits()
    threading.Thread(target=e.guard._watch_crash, daemon=True).start()
    assert not e.exited.wait(0.2)                        # nothing crashed: nothing happens
    e.crash = RuntimeError("the consumer crashed")
    assert e.exited.wait(10) and e.codes == [1]
    text = " | ".join(r.getMessage() for r in caplog.records)
    assert "the worker crashed (RuntimeError); it stops within 0 s so that its supervisor restarts it" in text
    e.guard._on_signal(15, None)                         # a later signal does not start a second countdown
    assert e.codes == [1]
