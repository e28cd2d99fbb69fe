"""A watchdog for faust's table recovery: a worker must not sit in recovery forever.

faust restores a worker's tables after every rebalance by reading their changelogs up
to the end offsets it noted at the start (faust/tables/recovery.py): every input
partition stays paused until the last changelog record arrives. If records never arrive
(the drain loop once dropped fetched changelog records, streams/faust_seam.py
``unread``; a consumer position moved past them by anything else), the worker waits,
with no error, for ever. So, checked every CHECK_EVERY seconds: when what remains to
read has not changed for STALL seconds, the watchdog logs an error and seeks the stuck
changelog partitions back to where recovery stands (faust's own ``_seek_offsets`` does
the same at the start), so their records are fetched again; recovery ignores those it
already has. If that does not help either, within another STALL seconds, it crashes the
app: the worker exits non-zero, and its supervisor (compose: ``restart: on-failure``)
starts it again, which is as safe as a ``kill -9`` (state comes back from the
changelogs, offsets from the group's commits)."""
from __future__ import annotations

import logging
import time

from . import faust_seam as seam

log = logging.getLogger("dpstream.watchdog")
CHECK_EVERY = 10.0        # seconds between checks
STALL = 60.0              # seconds without progress before the watchdog acts


class RecoveryStalled(RuntimeError):
    """Table recovery made no progress, even after seeking its partitions again."""


class RecoveryWatchdog:
    """``check()`` on a timer. ``remaining()`` gives what recovery still has to read per
    changelog partition (empty when not recovering), ``seek_again(tps)`` seeks those
    partitions back to where recovery stands, ``crash(exc)`` stops the worker."""

    def __init__(self, remaining, seek_again, crash, *, stall: float = STALL, clock=time.monotonic):
        self._remaining, self._seek_again, self._crash = remaining, seek_again, crash
        self.stall, self._clock = stall, clock
        self._seen: dict | None = None        # what remained when it last changed
        self._since = 0.0                     # when that was
        self._sought = False                  # sought again since then
        self.crashed = False                  # the app is stopping: nothing more to do

    @classmethod
    def of(cls, app, **kwargs) -> RecoveryWatchdog:
        return cls(lambda: seam.recovery_remaining(app), lambda tps: seam.seek_recovery(app, tps),
                   app.crash, **kwargs)

    async def check(self) -> None:
        if self.crashed:
            return
        remaining, now = self._remaining(), self._clock()
        if not remaining or remaining != self._seen:
            self._seen, self._since, self._sought = (remaining or None), now, False
            return
        if now - self._since < self.stall:
            return
        records, partitions = sum(remaining.values()), len(remaining)
        if not self._sought:
            log.error("table recovery made no progress for %.0f s (%d changelog records to go "
                      "in %d partitions); seeking them again", now - self._since, records, partitions)
            try:
                await self._seek_again(set(remaining))
            except Exception as err:          # noqa: BLE001 - revoked meanwhile: a new recovery starts
                log.warning("seeking the stuck changelog partitions failed (%s)", type(err).__name__)
            self._sought, self._since = True, now
            return
        log.critical("table recovery made no progress for %.0f s after seeking again (%d changelog "
                     "records to go in %d partitions); exiting so that the worker is restarted",
                     now - self._since, records, partitions)
        self.crashed = True
        await self._crash(RecoveryStalled(f"table recovery stalled with {records} changelog "
                                          f"records to go in {partitions} partitions"))
