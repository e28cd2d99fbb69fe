"""Progress on stderr for the long commands (``run``, ``replay``, ``produce``) and the demo:
a bar on a terminal, a line every few seconds when piped. Its own module so that the demo
and the commands share it without importing each other."""
from __future__ import annotations

import sys


class Progress:
    """A progress bar on stderr when it is a terminal; a line every few seconds when it
    is piped. Small jobs (``MIN_TOTAL`` items or fewer) show nothing."""

    EVERY = 5.0
    MIN_TOTAL = 1_000

    def __init__(self, label: str, total: int, *, quiet: bool = False):
        import time
        self.label, self.total, self.done_n, self.quiet = label, total, 0, quiet
        self.t0 = self.last = time.monotonic()
        self.bar = None
        if not quiet and sys.stderr.isatty() and total > self.MIN_TOTAL:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as Bar,
                                       TextColumn, TimeRemainingColumn)
            self.bar = Bar(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                           transient=True, console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        import time
        self.done_n += n
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done_n)
            return
        now = time.monotonic()
        if not self.quiet and self.total > self.MIN_TOTAL and now - self.last >= self.EVERY:
            self.last = now
            rate = self.done_n / max(now - self.t0, 1e-9)
            print(f"{self.label}: {self.done_n:,}/{self.total:,} ({rate:,.0f}/s)", file=sys.stderr,
                  flush=True)

    def done(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
