"""Where a worker's latency goes: a traced worker, and the per-stage breakdown of a run.

    BENCH_TRACE=path python bench/trace_worker.py worker ...   # the dpstream worker, traced

The bench's latency runs (bench/throughput.py) start the worker through this script. It
wraps, from outside the product, the steps each input passes and what can hold them
(one JSON line per occurrence, wall-clock seconds, the clock Kafka's record timestamps
use): ``fetch`` (a fetch handed to the bulk path: the input offsets it holds), ``batch``
(``WorkerApp.apply_fetch``), ``seq`` (one ``sequence_batch`` chunk: parse, append to
``model-events``, acknowledged), ``proc`` (``Processor.handle_batch``: apply, outputs
delivered, state written), ``deliver`` (the processor's wait for the broker's
acknowledgement of its outputs), ``state`` (the overlay written to the tables: the
changelog sends), ``commit`` (the bulk path's offset commit), ``gc0``-``gc2`` (a
collector pass over 1 ms, from ``gc.callbacks``), ``stall`` (the event loop late by over
10 ms to a 5 ms timer), ``held`` (when the loop is 40 ms late, the loop thread's
innermost frames: what holds it), ``noise`` (a continual-release noise block drawn ahead
by the helper process, mechanisms/continual.py), ``noise_wait`` (a learner waiting over
1 ms for a block the helper had not finished), ``rebalance``, and each request to the
broker: ``fetch_request`` and ``produce`` (the roles of the topics in it: ``log``,
``outputs``, ``changelog``); a stream's cost per record is mostly its requests per
batch. It records offsets and times only. The broker's GC pauses and concurrent GC work come from its log
(``broker_gc_events``).

``breakdown`` joins a trace with the input and prediction records (their timestamps:
the load generator's send, the worker's produce) into per-event stages, and names the
worker events that overlap the slowest 1% of events, beside how often they overlap any
event (a cause shows up far more often among the slow ones).

Experiment switches (environment, read here only): ``BENCH_PACE=min_bytes,max_wait_ms``
(the fetch pacing under load, streams/worker/tuning.py), ``BENCH_HELPER=same`` (the noise
helper at the worker's priority instead of the idle class; ``nice``: niceness +19
instead), ``BENCH_TRACE_SLOW=seconds``
(asyncio's debug mode, naming each callback slower than that; it slows the worker),
``BENCH_FETCH_BYTES=n`` (fetches of at most n bytes per partition, each applied as its
own batch: a backlog read in a stream's batch sizes, bench/throughput.py --batch-cost).

What the breakdown found (continual Winnow at 8,000 examples/s, half capacity, 2 cores
shared with the broker and the load generator): batches of ~115 records every ~14 ms,
each ~10 ms (the applier ~75% busy, the worker process ~87% of a core: per batch two
broker round trips and aiokafka's request coding); the slowest 1% come in a few
episodes per run, when something else takes CPU: a noise block drawn ahead (91-94% of
the slowest 1% during one, 16-20% of all events), the load generator (p99 42-58 ms with
it at nice 19, 65-78 ms at nice 0, interleaved), the broker's GC pauses.
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STAGES = (("fetched", "input sent -> fetched by the worker"),
          ("queued", "fetched -> its batch starts"),
          ("before", "batch start -> its chunk is sequenced"),
          ("sequenced", "sequencer: parse, model-events append acked"),
          ("applied", "model-events acked -> prediction produced"),
          ("acked", "prediction produced -> outputs acked, state written"),
          ("total", "end to end: input sent -> prediction produced"))
CAUSES = ("gc2", "gc1", "gc0", "stall", "commit", "state", "rebalance", "broker_gc",
          "broker_gc_work", "noise")


# ---------------------------------------------------------------- the traced worker
class _Trace:
    def __init__(self, path: str):
        self._out = open(path, "a", buffering=1 << 16)
        self._lock = threading.Lock()
        self._gc_start = 0.0
        self.probe: asyncio.Task | None = None

    def write(self, kind: str, t0: float, t1: float, **extra) -> None:
        line = json.dumps({"k": kind, "t0": t0, "t1": t1, **extra}) + "\n"
        with self._lock:                    # also written from the noise helper's callbacks
            self._out.write(line)

    def on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.time()
        elif (now := time.time()) - self._gc_start > 0.001:
            self.write(f"gc{info['generation']}", self._gc_start, now)

    def watchdog(self, loop_thread: int) -> None:
        """A thread that, when the loop is 40 ms late, writes what the loop thread runs
        (its innermost frames): the ``held`` lines name what stalls the loop."""
        caught = 0.0
        while True:
            time.sleep(0.01)
            beat = self.beat
            if time.monotonic() - beat > 0.04 and beat != caught:
                caught = beat
                frame = sys._current_frames().get(loop_thread)
                if frame is not None:
                    stack = [f"{Path(f.filename).name}:{f.lineno} {f.name}"
                             for f in traceback.extract_stack(frame)[-8:]]
                    self.write("held", time.time(), time.time(), stack=stack)

    async def watch_loop(self) -> None:
        """A 5 ms timer: late by over 10 ms is a stall (the loop held by other work)."""
        self.beat = time.monotonic()
        threading.Thread(target=self.watchdog, args=(threading.get_ident(),), daemon=True).start()
        flushed = time.monotonic()
        while True:
            t0 = time.time()
            self.beat = time.monotonic()
            await asyncio.sleep(0.005)
            if (t1 := time.time()) - t0 > 0.015:
                self.write("stall", t0 + 0.005, t1)
            if time.monotonic() - flushed > 0.5:
                self._out.flush()
                flushed = time.monotonic()


def _ranges(batch: dict) -> list:
    from dpstream.streams.worker.topics import INPUTS
    out = []
    for name in INPUTS:
        by_partition: dict[int, list[int]] = {}
        for r in batch.get(name, ()):
            by_partition.setdefault(r.partition, []).append(r.offset)
        out += [[name, p, min(o), max(o)] for p, o in by_partition.items()]
    return out


def _topic_role(topic: str) -> str:
    from dpstream.streams.worker.topics import MODEL_EVENTS
    return ("changelog" if topic.endswith("-changelog") else
            "log" if topic.endswith(MODEL_EVENTS) else "outputs")


def install(path: str) -> None:
    """Wrap the worker's steps (before the app is made) to write the trace to ``path``."""
    from dpstream.agents import processor as processor_module
    from dpstream.agents.processor import Processor
    from dpstream.mechanisms import continual
    from dpstream.mechanisms.continual import TreeNoise
    from dpstream.streams.worker import app as app_module
    from dpstream.streams.worker.bulk import BulkPath

    trace = _Trace(path)
    if os.environ.get("BENCH_PACE"):      # an experiment: "min_bytes,max_wait_ms" under load
        from dpstream.streams.worker import tuning
        pace = os.environ["BENCH_PACE"].split(",")
        tuning.BUSY_FETCH_MIN_BYTES, tuning.BUSY_FETCH_MAX_WAIT_MS = int(pace[0]), int(pace[1])
    if os.environ.get("BENCH_FETCH_BYTES"):    # an experiment: stream-sized batches
        from dpstream.streams.worker import bulk
        size, make = int(os.environ["BENCH_FETCH_BYTES"]), app_module.WorkerApp.__init__
        bulk.MERGE_RECORDS = 1                  # each fetch its own batch

        def small_fetches(self, *args, **kwargs):
            kwargs["faust_settings"] = {**(kwargs.get("faust_settings") or {}),
                                        "consumer_max_fetch_size": size}
            make(self, *args, **kwargs)
        app_module.WorkerApp.__init__ = small_fetches
    gc.callbacks.append(trace.on_gc)

    def timed(kind, fn, describe=None):
        async def wrapper(*args, **kwargs):
            t0 = time.time()
            try:
                return await fn(*args, **kwargs)
            finally:
                trace.write(kind, t0, time.time(), **(describe(*args) if describe else {}))
        return wrapper

    handover = BulkPath._handover

    async def traced_handover(self, generation, batch, offsets):
        if trace.probe is None:
            loop = asyncio.get_running_loop()
            trace.probe = loop.create_task(trace.watch_loop())
            if os.environ.get("BENCH_TRACE_SLOW"):      # name what holds the loop (asyncio's
                loop.set_debug(True)                    # debug mode: slows the worker down)
                loop.slow_callback_duration = float(os.environ["BENCH_TRACE_SLOW"])
        now = time.time()
        trace.write("fetch", now, now, r=_ranges(batch))
        return await handover(self, generation, batch, offsets)

    BulkPath._handover = traced_handover
    from aiokafka.consumer.fetcher import Fetcher
    from aiokafka.producer.sender import Sender
    send_produce, fetch_request = Sender._send_produce_req, Fetcher._proc_fetch_request

    async def traced_produce(self, node_id, batches):
        t0 = time.time()
        try:
            return await send_produce(self, node_id, batches)
        finally:
            trace.write("produce", t0, time.time(), t=sorted({_topic_role(tp.topic) for tp in batches}))

    async def traced_fetch(self, assignment, node_id, request):
        t0 = time.time()
        try:
            return await fetch_request(self, assignment, node_id, request)
        finally:
            trace.write("fetch_request", t0, time.time())
    Sender._send_produce_req, Fetcher._proc_fetch_request = traced_produce, traced_fetch
    BulkPath._commit = timed("commit", BulkPath._commit)
    app_module.WorkerApp.apply_fetch = timed("batch", app_module.WorkerApp.apply_fetch,
                                             lambda self, batch: {"r": _ranges(batch)})
    app_module.sequence_batch = timed("seq", app_module.sequence_batch,
                                      lambda chunk, *rest: {"r": _ranges({chunk[0].topic: chunk})})
    Processor.handle_batch = timed("proc", Processor.handle_batch,
                                   lambda self, records: {"n": len(records)})
    processor_module.deliver = timed("deliver", processor_module.deliver,
                                     lambda emit, items: {"n": len(items)})
    flush = Processor._flush

    def traced_flush(self):
        t0 = time.time()
        try:
            return flush(self)
        finally:
            if (t1 := time.time()) - t0 > 0.001:
                trace.write("state", t0, t1)

    Processor._flush = traced_flush
    if os.environ.get("BENCH_HELPER") == "same":    # an experiment: the noise helper unniced
        continual._lower_priority = int             # (a picklable no-op for its initializer)
    if os.environ.get("BENCH_HELPER") == "nice":    # an experiment: niced, not SCHED_IDLE
        continual._lower_priority = continual._nice
    ahead = TreeNoise._ahead

    def traced_ahead(self, c):
        t0 = time.time()
        chunk, future, pool = ahead(self, c)
        if future is not None:
            future.add_done_callback(lambda f: trace.write("noise", t0, time.time()))
        return chunk, future, pool

    TreeNoise._ahead = traced_ahead
    take = TreeNoise._take

    def traced_take(self, c):
        t0 = time.time()
        try:
            return take(self, c)
        finally:
            if (t1 := time.time()) - t0 > 0.001:
                trace.write("noise_wait", t0, t1)

    TreeNoise._take = traced_take
    for name in ("_on_assigned", "_on_revoked"):
        setattr(app_module.WorkerApp, name, timed("rebalance", getattr(app_module.WorkerApp, name)))


# ---------------------------------------------------------------- the breakdown
def _load(path: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:          # the last line of a worker stopped mid-write
            continue
        out.setdefault(e["k"], []).append(e)
    return out


def _locate(events: list[dict], name: str, partition: int, offsets: np.ndarray) -> np.ndarray:
    """Index of the first event whose input range holds each offset (-1: none)."""
    found = np.full(len(offsets), -1)
    for i, e in enumerate(events):
        for n, p, lo, hi in e.get("r", ()):
            if n == name and p == partition:
                hit = (found < 0) & (offsets >= lo) & (offsets <= hi)
                found[hit] = i
    return found


def broker_gc_events(gc_log: Path) -> list[dict]:
    """The broker JVM's collector work from its GC log (scripts/kafka.sh writes
    ``gc.log`` in the broker's state directory), as trace events: ``broker_gc`` for a
    stop-the-world pause, ``broker_gc_work`` for a phase that runs beside the broker's
    threads (ZGC's, logged with ``gc+phases``) but takes CPU from the cores the worker
    shares. Each line is written as its phase ends,
    ``[2026-12-01T19:20:05.109+0000][2.826s] GC(6) Pause Young ... 22.204ms`` or
    ``... GC(2) Concurrent Mark 96.926ms``."""
    out = []
    for line in gc_log.read_text().splitlines() if gc_log.exists() else ():
        kind = "broker_gc" if " Pause " in line else "broker_gc_work" if " Concurrent " in line else None
        if kind and line.endswith("ms"):
            end = datetime.strptime(line[1:29], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            out.append({"k": kind, "t0": end - float(line.rsplit(" ", 1)[1][:-2]) / 1000, "t1": end})
    return out


def breakdown(trace_path: Path, inputs, preds, warm_from: float, gc_log: Path | None = None) -> dict:
    """Per-event stage times (ms) for the inputs sent at or after ``warm_from`` (a Kafka
    timestamp, ms), and the worker events that overlap the slowest 1% of them.

    ``inputs`` and ``preds`` are aiokafka records of the examples and predictions
    topics. Returns {"stages": {stage: array}, "causes": {cause: (share of slow events
    overlapped, share of all events overlapped)}, "n": events}."""
    from dpstream.streams.worker.topics import EXAMPLES
    trace = _load(trace_path)
    if gc_log is not None:
        for event in broker_gc_events(gc_log):
            trace.setdefault(event["k"], []).append(event)
    produced = {json.loads(r.value)["source"]: r.timestamp / 1000 for r in preds}
    rows = [(r.partition, r.offset, r.timestamp / 1000) for r in inputs
            if r.timestamp >= warm_from and f"{EXAMPLES}:{r.partition}:{r.offset}" in produced]
    parts = np.array([r[0] for r in rows])
    offs = np.array([r[1] for r in rows])
    sent = np.array([r[2] for r in rows])
    out = np.array([produced[f"{EXAMPLES}:{p}:{o}"] for p, o, _ in rows])
    fetched, started, seq0, seq1, done = (np.full(len(rows), np.nan) for _ in range(5))
    procs = sorted(trace.get("proc", []), key=lambda e: e["t0"])
    proc_starts = np.array([e["t0"] for e in procs])
    for p in np.unique(parts):
        mine = parts == p
        for kind, t_in, t_out in (("fetch", fetched, None), ("batch", started, None),
                                  ("seq", seq0, seq1)):
            events = trace.get(kind, [])
            idx = _locate(events, EXAMPLES, int(p), offs[mine])
            ok = idx >= 0
            sel = np.flatnonzero(mine)[ok]
            t_in[sel] = [events[i]["t0"] for i in idx[ok]]
            if t_out is not None:
                t_out[sel] = [events[i]["t1"] for i in idx[ok]]
    # a chunk's outputs: the processor call that starts as its sequencing ends
    have = ~np.isnan(seq1)
    at = np.searchsorted(proc_starts, seq1[have] - 1e-4)
    ends = np.array([procs[i]["t1"] if i < len(procs) else np.nan for i in at])
    done[have] = ends
    ms = lambda a: 1000 * a                                          # noqa: E731
    stages = {"fetched": ms(fetched - sent), "queued": ms(started - fetched),
              "before": ms(seq0 - started), "sequenced": ms(seq1 - seq0),
              "applied": ms(out - seq1), "acked": ms(done - out), "total": ms(out - sent)}
    slow = stages["total"] >= np.percentile(stages["total"], 99)
    causes = {}
    first, last = float(np.min(sent)), float(np.nanmax(out))
    for cause in CAUSES:                    # counted over the measured events' span only
        spans = [(e["t0"], e["t1"]) for e in trace.get(cause, []) if e["t1"] >= first and e["t0"] <= last]
        hit = np.zeros(len(rows), dtype=bool)
        for t0, t1 in spans:
            hit |= (sent <= t1) & (out >= t0)
        causes[cause] = (float(hit[slow].mean()) if slow.any() else 0.0, float(hit.mean()),
                         len(spans), float(sum(t1 - t0 for t0, t1 in spans) * 1000))
    return {"stages": stages, "causes": causes, "n": len(rows), "sent": sent,
            "requests": requests_per_batch(trace, first, last),
            "busy": busy_fraction(trace, first, last)}


def busy_fraction(trace: dict[str, list[dict]], t0: float, t1: float) -> float:
    """The share of t0..t1 the applier spent in batches (``WorkerApp.apply_fetch``, from
    its start to its state written: CPU and the broker round trips it waits for). The
    worker's ``dpstream_processing_seconds`` histogram (``--latency-metrics``) times the
    same spans per chunk, so the rate of its sum is this share, as an operator sees it."""
    spans = [(max(t0, e["t0"]), min(t1, e["t1"])) for e in trace.get("batch", [])]
    return sum(max(0.0, b - a) for a, b in spans) / max(1e-9, t1 - t0)


def requests_per_batch(trace: dict[str, list[dict]], t0: float, t1: float) -> dict | None:
    """Over the batches that started between t0 and t1: their count, and per batch the
    fetch requests and produce requests (and those with log appends, outputs, table
    changelog records). None when the trace counted no requests (an older trace_worker)."""
    within = lambda event: [e for e in trace.get(event, []) if t0 <= e["t0"] <= t1]  # noqa: E731
    batches, produce = len(within("batch")), within("produce")
    if not produce:
        return None
    n = max(1, batches)
    out = {"batches": batches, "fetch": len(within("fetch_request")) / n, "produce": len(produce) / n}
    for role in ("log", "outputs", "changelog"):
        out[role] = sum(role in e.get("t", ()) for e in produce) / n
    return out


def report(result: dict) -> str:
    """The breakdown as a table: p50 / p99 / p99.9 per stage, then the overlaps (with
    each cause's count and total time from the first measured input to the last output)."""
    total = result["stages"]["total"]
    slow = total >= np.percentile(total, 99)
    lines = [f"| stage ({result['n']:,} events) | p50 ms | p99 ms | p99.9 ms | mean over the slowest 1% |",
             "|---|---|---|---|---|"]
    for stage, what in STAGES:
        a = result["stages"][stage]
        ok = ~np.isnan(a)
        if ok.any():
            p = np.percentile(a[ok], [50, 99, 99.9])
            lines.append(f"| {what} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {np.mean(a[ok & slow]):.1f} |")
    windows = np.unique((result["sent"][slow] * 10).astype(int))
    lines.append(f"the slowest 1% were sent in {len(windows)} distinct 100 ms windows "
                 f"(of {int(np.ptp(result['sent']) * 10) + 1})")
    lines.append("worker events overlapping the slowest 1% (share of slow events / of all events; "
                 "count, total ms): " + "; ".join(
                     f"{c} {s:.0%} / {a:.0%} ({n}, {ms:.0f})"
                     for c, (s, a, n, ms) in result["causes"].items()))
    if "busy" in result:
        lines.append(f"the applier was busy {result['busy']:.0%} of the time (in batches: CPU "
                     f"and the round trips they wait for)")
    r = result.get("requests")
    if r and r["batches"]:
        lines.append(f"requests per batch ({r['batches']:,} batches): {r['fetch']:.2f} fetch, "
                     f"{r['produce']:.2f} produce (with log appends {r['log']:.2f}, outputs "
                     f"{r['outputs']:.2f}, table changelogs {r['changelog']:.2f})")
    return "\n".join(lines)


def main() -> None:
    path = os.environ.get("BENCH_TRACE")
    sys.path.insert(0, str(ROOT))
    if path:
        install(path)
    from dpstream.streams.cli.commands import main as cli
    sys.exit(cli(sys.argv[1:]))


if __name__ == "__main__":
    main()
