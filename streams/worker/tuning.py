"""The worker's interpreter and consumer settings, each with the trace that chose it:
the collector's full passes held for idle moments, the GIL switch interval, and the
fetch waits of aiokafka's consumer (streams/worker/app.py and streams/cli/commands.py apply
them, through streams/worker/faust_seam.py; bench/throughput.py and the traces in the
docstrings measure them)."""
from __future__ import annotations

import gc
import sys

from . import faust_seam as seam

FULL_GC_CHECK, FULL_GC_AT_MOST = 10.0, 60.0    # seconds (hold_full_collections)
SWITCH_INTERVAL = 0.001             # seconds a thread holds the GIL (shorten_thread_switches)
FETCH_MAX_WAIT_MS = 50              # longest a fetch request waits for data (shorten_fetch_wait)
BUSY_FETCH_MIN_BYTES, BUSY_FETCH_MAX_WAIT_MS = 16 * 1024, 10     # under load (pace_fetches)


def hold_full_collections() -> None:
    """Keep the cyclic garbage collector's full passes off the latency path. A full
    (generation 2) pass walks every tracked object and stops the event loop meanwhile:
    90-130 ms in a running worker, which set the p99 of end-to-end latency
    (bench/throughput.py, traced with ``gc.callbacks``). Objects alive once the worker is
    ready (modules, the app, restored tables) leave the collector's view
    (``gc.freeze``), and automatic full passes are held back (a huge third threshold;
    the young generations keep CPython's defaults, so most cycles are still collected
    as before); the ``full_collection`` timer of ``make_app`` runs the full pass when
    the worker is idle, or every FULL_GC_AT_MOST seconds under constant load. That
    bound matters: cyclic garbage that outlives two young passes (futures and tasks
    alive across awaits) waits for a full pass, and at 10 minutes worker RSS grew 16-32%
    over 10^6 events under constant load; at 20 s, +2.1% (bench/throughput.py). One
    pass a minute stalls the loop once a minute, below the p99 of any steady rate."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, 1_000_000_000)


def shorten_thread_switches() -> None:
    """Hand the GIL between threads every SWITCH_INTERVAL seconds instead of CPython's 5 ms.
    With faust's consumer in its own thread (``--consumer-thread``; by default it runs on
    the worker's loop, streams/worker/faust_seam.py), every fetch it hands over crosses threads, and
    the consumer thread needs the GIL for each step of a fetch. While the event loop
    thread computes a batch, each such step waited up to the full interval (the convoy
    effect). Traced at 3,000 examples/s, fetches of records already on the broker arrived
    300-500 ms late, and the worker settled at 1-1.8 s of latency; 1 ms made that rarer.
    Its main cause, found later, was the fetcher's long poll (``shorten_fetch_wait``).
    The interval still applies to the threads left: heavy batches offloaded with
    ``asyncio.to_thread`` (Processor), and the consumer thread when chosen."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def shorten_fetch_wait(consumer) -> None:
    """Make the aiokafka ``consumer``'s fetch requests wait at most FETCH_MAX_WAIT_MS
    for data on the broker (faust creates its consumer with 1,500 ms,
    faust/transport/drivers/aiokafka.py; Kafka's default is 500).

    Why it matters (aiokafka/consumer/fetcher.py ``_get_actions_per_node``): a partition
    with fetched records not yet handed over is left out of the next fetch request, and
    only one request per broker is in flight. If that request names only partitions with
    nothing new, the broker holds it for the full wait, and the busy partition cannot
    be fetched until it returns. In the worker that is the usual case: the input
    partition's records sit in the buffer while the last batch is applied, and the
    ``model-events`` partitions have no new records until the worker sequences more
    input, which it cannot fetch. Traced at half capacity (continual Winnow, 3,078-3,800
    examples/s, 10 s runs): in 2 of 3 runs per setting the worker settled into a state
    where inputs reached it 1.1-1.8 s old and stayed there; with 10 ms in 0 of 6, with
    50 ms in 0 of 3. Cost: an idle worker sends one empty fetch per FETCH_MAX_WAIT_MS;
    measured idle CPU 1.1% of a core at 1,500 ms, 3.9% at 50 ms, 13.6% at 10 ms, hence
    50. The fetcher reads the field for every request it builds, so this takes effect
    from the next one.

    The same helper bounds how long aiokafka's fetch routine sleeps when it finds
    nothing to send (``_fetcher_timeout``, 200 ms by default) to the same 50 ms. Why: a
    lost wake-up in ``Fetcher._fetch_requests_routine`` (aiokafka 0.14). The routine
    marks a broker busy in ``_in_flight`` and clears it in the fetch task's done
    callback; when something else (a seek, a consumed fetch) wakes the routine in the
    same loop iteration in which that task finishes, the routine drops the finished
    task from its pending set but still sees the broker as busy, sends no request, and
    waits for the full timeout with nothing left to wake it. Traced in the worker
    (an instrumented fetcher, 1,000 examples/s in 10 ms ticks): 11 such waits in 10 s,
    each holding every input for 200 ms (p99 latency 229 ms; 45 ms with the bound)."""
    seam.set_fetch_wait(consumer, max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=1,
                        idle_timeout_s=FETCH_MAX_WAIT_MS / 1000)


def pace_fetches(consumer, busy: bool) -> None:
    """Under load (``busy``: from the first batch until PACE_IDLE_AFTER s without one),
    let the aiokafka ``consumer``'s fetch requests wait on the broker for
    BUSY_FETCH_MIN_BYTES, at most BUSY_FETCH_MAX_WAIT_MS; otherwise answer as soon as
    one byte is there (waiting at most FETCH_MAX_WAIT_MS, ``shorten_fetch_wait``). The
    fetcher reads both fields for every request it builds (aiokafka/consumer/fetcher.py
    ``_get_actions_per_node``), so a change takes effect from the next request; both are
    plain attributes, set from the worker's loop (read by faust's consumer thread when
    it has one).

    Why: every fetch cost faust's consumer (then in its own thread) about a millisecond
    of the GIL (the request and response are coded in Python, for every assigned
    partition), and every
    batch the worker's loop a few (two round trips to the broker, the table writes).
    With one-byte fetches a steady stream is fetched a few records at a time. Measured
    (DP-Winnow, 10 s runs, /tmp probe with an instrumented fetcher and applier): at
    5,000 examples/s, 100-145 fetches/s (3-4 per batch), the consumer thread at 15-18%
    of a core, the applier busy 97% of the time, p50 45-67 ms; paced, 62-63 fetches/s,
    10-11%, busy 77-84%, p50 29-30 ms. At 1,000/s the worker used 0.61 of a core
    instead of 0.75 (p99 32 ms), at 300/s p99 30 ms. An idle worker keeps the 50 ms
    long poll (an idle fetch every 10 ms cost 13.6% of a core): the first record after
    a pause is fetched as soon as it lands, and pacing starts with its batch.

    Larger paces were tried and left (2026-12-02, ``bench/throughput.py --half-at 16000
    11600 --latency-paths DP-Winnow "continual Winnow" --latency-runs 3 --paces default
    32768,20 65536,30 --latency-at``, interleaved): bigger batches, fewer of them, cost
    less CPU per record (DP-Winnow at 16,000 examples/s: 0.56-0.77 cores at 64 KiB / 30
    ms against 0.88-0.90 at the default), but p50 rose by the wait (28-37 ms against
    18-23) and p99 did not fall (46-123 ms against 71-88; at 32 KiB / 20 ms 57-116).
    Continual Winnow at 11,600/s: p99 44-49 ms at the default, 37-99 at 32 KiB, 62-70 at
    64 KiB (p50 12-18, 21-22, 38-41)."""
    seam.set_fetch_wait(consumer, min_bytes=BUSY_FETCH_MIN_BYTES if busy else 1,
                        max_wait_ms=BUSY_FETCH_MAX_WAIT_MS if busy else FETCH_MAX_WAIT_MS)
