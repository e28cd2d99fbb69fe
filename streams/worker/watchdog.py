"""``StopGuard``: the worker process ends within STOP_WITHIN seconds of a SIGTERM, a
SIGINT or a crash of its app, whatever faust's stop waits for."""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable


log = logging.getLogger("dpstream.watchdog")


# ---------------------------------------------------------------- the process ends
STOP_WITHIN = 8.0         # seconds from SIGTERM (or a crash) to the process's exit, at most
CRASHED = 1               # exit code after a crash: non-zero, for the supervisor to restart it


class StopGuard:
    """The worker process ends within STOP_WITHIN seconds once it was asked to stop
    (SIGTERM, SIGINT) or once its app crashed, whatever faust's stop is waiting for.

    Before (issue 43 item 12): with its broker gone a worker was still running 70 s after
    ``kill <pid>`` (faust's stop flushes the producer and commits, each waiting on a broker
    that is not there), and a SIGTERM that arrived while a batch was being retried left it
    retrying for 40 s and more: supervisors send SIGKILL after 10 s (docker) or 30 s
    (Kubernetes) and count a crash. And a crashed app (issue 41 item 16: a refused commit
    crashed faust's consumer) left a process that neither worked nor exited. Now faust's
    stop runs as before (mode's own signal handlers stay installed: ``install`` adds a
    Python-level handler, and the loop still receives the signal through its wakeup fd),
    ``on_stop`` tells the worker's loops to stop retrying, and a daemon thread, started
    by the first signal or crash, ends the process if it still runs STOP_WITHIN seconds
    later, after one line saying why and what was left (``left_over()``: records read
    but not committed, a batch not applied; nothing is lost, a restarted worker re-reads
    them from the last committed offsets, and the agents skip what they already handled).

    Exit codes: 0 when faust's stop finishes in time (mode's own); 128 + the signal's
    number (143 for SIGTERM, 130 for SIGINT, as a shell reports a process that signal
    ended) when the stop was cut short; CRASHED (1) after a crash, for the supervisor to
    restart it (compose: ``restart: on-failure``)."""

    def __init__(self, left_over: Callable[[], str], crashed: Callable[[], BaseException | None], *,
                 on_stop: Callable[[], None] = lambda: None, within: float = STOP_WITHIN,
                 exit: Callable[[int], None] = os._exit, poll: float = 1.0):
        self._left_over, self._crashed, self._on_stop = left_over, crashed, on_stop
        self.within, self._exit, self._poll = within, exit, poll
        self._armed = threading.Event()
        self._done = threading.Event()       # tests: stop the watcher thread

    def install(self) -> None:
        """From the main thread, after mode installed its handlers: watch SIGTERM and
        SIGINT, and the app's crash."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        threading.Thread(target=self._watch_crash, name="dpstream-stop-guard", daemon=True).start()

    def _on_signal(self, signum, frame) -> None:
        self.arm(128 + signum, f"{signal.Signals(signum).name} received")

    def _watch_crash(self) -> None:
        while not (self._armed.is_set() or self._done.wait(self._poll)):
            reason = self._crashed()
            if reason is not None:
                self.arm(CRASHED, f"the worker crashed ({type(reason).__name__})")

    def arm(self, code: int, why: str) -> None:
        """Start the countdown (once): say what is left now, and after ``within``
        seconds, if the process still runs, say what is left then and exit ``code``."""
        if self._armed.is_set():
            return
        self._armed.set()
        try:
            self._on_stop()
        except Exception:                     # noqa: BLE001 - the countdown must start
            log.exception("telling the worker to stop failed")
        threading.Thread(target=self._countdown, args=(code, why), name="dpstream-stop-countdown",
                         daemon=True).start()

    def _left(self) -> str:
        try:
            return self._left_over()
        except Exception as err:              # noqa: BLE001 - a state read mid-change
            return f"what was left could not be read ({type(err).__name__})"

    def _countdown(self, code: int, why: str) -> None:
        # logged here, not in the signal handler (which may interrupt a logging call)
        if code == CRASHED:
            log.critical("%s; it stops within %.0f s so that its supervisor restarts it: %s",
                         why, self.within, self._left())
        else:
            log.warning("%s; stopping within %.0f s: %s", why, self.within, self._left())
        if self._done.wait(self.within):
            return
        log.critical("%s %.0f s ago and the worker has not stopped; exiting now (code %d): %s",
                     why, self.within, code, self._left())
        for handler in logging.getLogger().handlers:
            try:
                handler.flush()
            except Exception:                 # noqa: BLE001 - exiting anyway
                pass
        self._exit(code)

    def close(self) -> None:
        self._done.set()
