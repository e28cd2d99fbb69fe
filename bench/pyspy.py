"""Where a worker's CPU goes, by package: py-spy samples of the threads holding the GIL,
attributed to the package of the innermost frame (self time), and, for one package, to
the outermost frame of it on the stack (which of its routines the time is spent under).

``bench/throughput.py --batch-cost RUNS --profile`` records the worker of each
measurement (``recording``) and prints the difference between stream-sized and backlog
batches per record and per batch (``compare``). py-spy (in the ``bench`` extra) must
run as a user allowed to trace the worker (root here, or ptrace permitted).

How far to trust it: only threads holding the GIL are sampled (``--gil``), so a thread
that waits, or is runnable but preempted without the GIL, is not counted (a plain
py-spy profile of this worker got that wrong: docs/performance.md, "What a batch costs"). Samples
are read without pausing the worker (``--nonblocking``), so a few stacks are partial
(an "outermost routine" that is a generator expression). A coroutine's resumption is
charged to whichever of its frames is innermost at the sample: wrappers such as the
tracer's (``tracer``) come out larger than their own calls. Package sums are estimates
to rank by, not to add up.
"""
from __future__ import annotations

import collections
import contextlib
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

RATE = 500                      # samples per second
PACKAGES = ("asyncio", "aiokafka", "faust", "mode", "pydantic", "numpy", "orjson", "json",
            "selectors", "concurrent", "threading", "ssl", "socket")
_FILE = re.compile(r"\((.*?):\d+\)$")


def executable() -> str | None:
    """py-spy's path: beside this interpreter (a venv's bin), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def recording(pid: int, out: Path):
    """py-spy samples of process ``pid`` into ``out`` (raw, folded stacks) while in the block."""
    spy = subprocess.Popen([executable(), "record", "--rate", str(RATE), "--gil", "--nonblocking",
                            "--format", "raw", "--output", str(out), "--pid", str(pid)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)          # py-spy writes its file on interrupt
        spy.wait(60)


def package(frame: str) -> str:
    """The package of a folded frame ``function (path:line)``: one of PACKAGES, ``dpstream``
    (this repository's layers), ``tracer`` (bench/trace_worker.py, the bench's own cost),
    or ``other``."""
    match = _FILE.search(frame)
    path = match.group(1) if match else frame
    if path.endswith("trace_worker.py"):
        return "tracer"
    for name in PACKAGES:
        if path.startswith(f"{name}/") or path == f"{name}.py" or f"/{name}/" in path \
                or path.endswith(f"/{name}.py"):
            return name
    top = path.split("/", 1)[0]
    return "dpstream" if top in ("agents", "streams", "mechanisms", "learners", "schemas") else "other"


def attribute(out: Path, under: str = "aiokafka") -> tuple[collections.Counter, collections.Counter]:
    """Seconds of self time per package, and, for samples inside ``under``, per outermost
    ``under`` function on the stack."""
    by_package, by_entry = collections.Counter(), collections.Counter()
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, seconds = stack.split(";"), int(count) / RATE
        by_package[package(frames[-1])] += seconds
        if package(frames[-1]) == under:
            entry = next(f for f in frames if package(f) == under)
            by_entry[entry.split(" (")[0]] += seconds
    return by_package, by_entry


def compare(small: dict, large: dict, under: str = "aiokafka", floor_us: float = 0.3) -> str:
    """Lines for two profiled drains (``profile``: the file; ``records``; ``batches``):
    microseconds per record of each, and the difference per small batch, per package
    (those differing by ``floor_us`` per record or more), then inside ``under``."""
    lines, of_small, of_large = [], attribute(small["profile"], under), attribute(large["profile"], under)
    for label, index in (("self time by package", 0), (f"inside {under}, by its outermost routine", 1)):
        a, b = of_small[index], of_large[index]
        rows = sorted(set(a) | set(b), key=lambda k: b[k] / large["records"] - a[k] / small["records"])
        lines.append(f"{label}: us per record in stream-sized / backlog batches, and the "
                     f"difference per stream-sized batch")
        for key in rows:
            per_small, per_large = 1e6 * a[key] / small["records"], 1e6 * b[key] / large["records"]
            if abs(per_small - per_large) >= floor_us:
                lines.append(f"  {key:45s} {per_small:6.2f} / {per_large:6.2f}   "
                             f"{(per_small - per_large) * small['records'] / small['batches']:+7.0f} us")
    return "\n".join(lines)
