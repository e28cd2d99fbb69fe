"""The stop guard (streams/worker/watchdog.py): the worker process ends within STOP_WITHIN
seconds of a SIGTERM, a SIGINT or a crash of its app. No broker."""


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
