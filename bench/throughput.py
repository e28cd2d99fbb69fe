"""Worker throughput against what Kafka and faust allow, side by side on one broker.

    python bench/throughput.py [--n 30000] [--rss-n 1000000] [--latency-at 300 ...] [--latency-secs 10]
                               [--capacity-runs 3] [--skip-rss] [--skip-scale-out] [--compare-with REV]
                               [--secure-state DIR] [--only-capacity] [--latency-runs 1]
                               [--latency-paths NAME ...] [--generator-nice 0 [19 ...]]
                               [--half-at DP_WINNOW CONTINUAL] [--broker-gc-log PATH]
                               [--layouts shared [own-core]] [--paces default [B,MS ...]]
                               [--batch-cost RUNS [--profile]]

One run measures, on the local broker (scripts/kafka.sh start), n records each:
1. raw aiokafka consume -> produce (no processing: the floor any Kafka pipeline pays;
   the median of --capacity-runs runs);
2. a faust pass-through agent, per event with faust's defaults, and tuned for bulk work
   (bench/faust_passthrough.py says what "tuned" is);
3. the dpstream worker (streams/worker/app.py: sequencer -> model-events -> processor ->
   predictions) on DP-Winnow (d = 1,000, 20 active, epsilon 4) and on continual Winnow at
   epsilon 2 (d = 1,000), produce -> the predictions topic, reading whole fetches
   (streams/worker/bulk.py; the median of --capacity-runs runs; each rate over the span of the
   worker's own predictions, pipeline.produced_rate, as the worker reads the inputs
   while they are produced), and DP-Winnow with faust's
   consumer in its own thread (--consumer-thread; the default runs it on the worker's
   loop, streams/worker/faust_seam.py); with ``--compare-with REV``, the same two workers as the
   git revision REV had them, in the same run (its code, this environment), and each
   latency run below paired with one of REV's worker, in alternating order (traced by
   this trace_worker.py, as this code's is: the same tracer's cost for both);
   With ``--secure-state DIR`` (a ``KAFKA_SECURE=1 scripts/kafka.sh start`` broker's state
   directory), the raw loop (as the admin) and the DP-Winnow worker (as the worker
   principal, with its ACLs) over SASL_SSL (SCRAM-SHA-512 over TLS), each run next to a
   plaintext one: the price of TLS, SASL and authorization, as ratios;
4. end-to-end latency (input record timestamp -> prediction record timestamp) of the
   DP-Winnow (also with --consumer-thread) and the continual-Winnow worker at half the
   rate each reached in 3 (--latency-runs runs each, --latency-paths to choose), and of
   continual Winnow at the steady rates of --latency-at (default 300, 1,000 and
   3,000/s), over
   --latency-secs (10) of input paced in 2 ms ticks (pipeline.produce_paced, in its own
   process at niceness --generator-nice; with --layouts shared own-core, each run also
   with the worker alone on one core and the broker and generator on the other: how
   much of the tail is contention; with --paces, each run also with other fetch pacings
   under load, ``min_bytes,max_wait_ms``, streams/worker/tuning.py ``pace_fetches``), p50 /
   p99 (the first 20% of the inputs are
   warm-up and not counted); at half capacity with the breakdown of a traced worker
   (bench/trace_worker.py): p50 / p99 / p99.9 per stage, and the worker events (GC,
   stalls, commits, state writes, noise draws, the broker's GC pauses from
   --broker-gc-log) that overlap the slowest 1%;
5. scale-out: DP-Winnow over 4 models on distinct partitions, one worker against two;
6. the worker's resident memory (with its noise helper process) after the first 10% and
   at the end of rss-n events.
With ``--batch-cost RUNS`` it measures only what a stream's small batches cost: the
worker's CPU per record draining a backlog of --batch-cost-n inputs in batches of ~100
records (the producer's 16 KiB record batches, fetched one at a time: what a steady stream
brings) against its usual batches of thousands, DP-Winnow and continual Winnow, with the
requests each batch made (the trace), RUNS times interleaved (and REV's code beside,
with --compare-with, traced by this trace_worker.py). Nothing else runs meanwhile (no load generator: inputs are all
produced first), so the difference is the per-batch cost, not contention. With
``--profile``, py-spy samples each of those workers, and the difference is attributed
to packages, and inside aiokafka to its routines (bench/pyspy.py).
Ratios to the raw loop are the numbers to quote: this 2-core machine is shared and
noisy, absolute rates move between runs. Measure on a fresh broker
(``scripts/kafka.sh reset`` then ``start``): a development broker that had kept
~2,700 test topics (10,907 partitions) answered metadata requests with all of them,
and metadata updates took ~2% of the worker's event-loop samples (py-spy). Each
measurement deletes its own topics when it ends (``retire``), so the last measurements of
a run meet the broker as the first did.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

import pipeline as P          # bench/pipeline.py: produce, drain, raw_loop, create, Worker
import pyspy                  # bench/pyspy.py: where the worker's CPU goes (--profile)
import trace_worker as T      # bench/trace_worker.py: the traced worker and the breakdown

HERE = Path(__file__).resolve().parent
# scripts/kafka.sh's default state directory for port 9092 (or $DPSTREAM_KAFKA_STATE)
BROKER_GC_LOG = Path(os.environ.get("DPSTREAM_KAFKA_STATE") or Path(
    os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "dpstream" / "kafka-9092") / "gc.log"
CONTINUAL = {"model_id": "bench", "dimension": 1000, "budget": {"epsilon": 2.0, "delta": 1e-6},
             "params": {"kind": "continual_winnow", "max_active": 20}}


def faust_passthrough(mode: str, data: list[bytes]) -> float:
    prefix = f"ft{uuid.uuid4().hex[:6]}-"
    src, dst = prefix + "in", prefix + "out"
    asyncio.run(P.create([src, dst]))
    asyncio.run(P.produce(src, data))
    proc = subprocess.Popen([sys.executable, str(HERE / "faust_passthrough.py"), P.BROKER, src, dst,
                             prefix + "app", mode, tempfile.mkdtemp(prefix="dpstream-ft-")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _, secs = asyncio.run(P.drain(dst, len(data)))
    finally:
        proc.terminate()
        proc.wait()
        asyncio.run(P.delete_prefixed(prefix))
    return len(data) / secs


def rss_mb(pid: int) -> float:
    """Resident memory of the process and its children (the worker's noise helper)."""
    total = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            total += int(line.split()[1]) / 1024
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += rss_mb(int(child))
    return total


def code_at(rev: str) -> dict:
    """Environment for a worker that runs the code of git revision ``rev``: a ``dpstream``
    package whose subpackages are that revision's folders, first on PYTHONPATH (ahead of
    the editable install's finder, which Python consults after the path)."""
    root = Path(tempfile.mkdtemp(prefix="dpstream-rev-"))
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", rev], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    package = root / "shim" / "dpstream"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in ("mechanisms", "learners", "agents", "streams", "schemas"):
        (package / name).symlink_to(root / name)
    return {"PYTHONPATH": f"{root / 'shim'}:{root}"}


def raw_rate(data: list[bytes]) -> float:
    prefix = f"rw{uuid.uuid4().hex[:6]}-"
    asyncio.run(P.create([prefix + "in", prefix + "out"]))
    asyncio.run(P.produce(prefix + "in", data))
    try:
        return len(data) / asyncio.run(P.raw_loop(prefix + "in", prefix + "out", len(data)))
    finally:
        asyncio.run(P.delete_prefixed(prefix))


def start_worker(model: dict, args: tuple[str, ...] = (), env: dict | None = None,
                 setup=None, command: tuple[str, ...] | None = None) -> tuple[P.Worker, str]:
    prefix = f"wt{uuid.uuid4().hex[:6]}-"
    if setup is not None:
        setup(prefix)
    worker = P.Worker(P.BROKER, prefix, Path(tempfile.mkdtemp(prefix="dpstream-wt-")), "w",
                      args=args, env=env, **({"command": command} if command else {})).start()
    asyncio.run(P.produce(prefix + "models", [json.dumps(model).encode()]))
    asyncio.run(P.drain(prefix + "model-events", 1, timeout=60))
    return worker, prefix


def retire(worker, prefix: str) -> None:
    """Stop a measurement's worker and delete its topics (``pipeline.delete_prefixed``)."""
    try:
        worker.stop()
    finally:
        asyncio.run(P.delete_prefixed(prefix))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process and its live children (the noise helper)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += cpu_seconds(int(child))
    return total


def worker_rate(model: dict, data: list[bytes], args: tuple[str, ...] = (), env: dict | None = None,
                setup=None, cpu: list | None = None) -> float:
    """Records/s over the span of the worker's own predictions (their timestamps:
    ``pipeline.produced_rate``); with ``cpu``, also appends the worker's CPU
    microseconds per record (its process and helper, from /proc: far less moved by the
    machine's other load than the rate, so the better regression check)."""
    worker, prefix = start_worker(model, args, env, setup)
    try:
        before = cpu_seconds(worker.proc.pid)
        asyncio.run(P.produce(prefix + "examples", data))
        predictions, _ = asyncio.run(P.drain(prefix + "predictions", len(data)))
        if cpu is not None:
            cpu.append(1e6 * (cpu_seconds(worker.proc.pid) - before) / len(data))
    finally:
        retire(worker, prefix)
    return P.produced_rate(predictions)


def _generate(topic: str, data: list[bytes], rate: float, nice: int, cpus: set[int] | None) -> None:
    os.nice(nice)
    if cpus:
        os.sched_setaffinity(0, cpus)
    asyncio.run(P.produce_paced(topic, data, rate))


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` on ``cpus`` (threads started later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except (ProcessLookupError, PermissionError):      # a thread that just ended
            pass


def latency(model: dict, data: list[bytes], rate: float, args: tuple[str, ...] = (),
            nice: int = 0, env: dict | None = None, own_core: bool = False,
            pace: str = "default") -> dict:
    """The worker (traced, bench/trace_worker.py) fed ``data`` at ``rate`` per second by a
    load generator in its own process (``nice``: its scheduling priority, 19 the lowest):
    the per-stage breakdown of the events after the first 20% (warm-up). With ``env``
    from ``code_at``, that revision's worker (traced by this bench/trace_worker.py, so
    that both carry the same tracer).
    With ``own_core``, the worker's process alone on the first CPU (its noise helper
    process free to run anywhere), the broker (scripts/kafka.sh's pid file) and the load
    generator on the others: as a deployment with the broker on other machines would
    have it, as far as two cores can show. ``pace``: the fetch pacing under load,
    ``min_bytes,max_wait_ms`` (bench/trace_worker.py ``BENCH_PACE``), or the worker's own."""
    trace = Path(tempfile.mkdtemp(prefix="dpstream-trace-")) / "trace.jsonl"
    switches = {"BENCH_TRACE": str(trace), **({} if pace == "default" else {"BENCH_PACE": pace})}
    worker, prefix = start_worker(model, args, env={**switches, **(env or {})},
                                  command=(str(HERE / "trace_worker.py"),))
    every = os.sched_getaffinity(0)
    first, others = {min(every)}, every - {min(every)}
    if own_core and not others:
        retire(worker, prefix)
        raise SystemExit("--layouts own-core needs two or more CPUs")
    broker = int((BROKER_GC_LOG.parent / "kafka.pid").read_text()) if own_core else None
    try:
        if own_core:
            pin(worker.proc.pid, first)
            pin(broker, others)
        generator = multiprocessing.get_context("spawn").Process(
            target=_generate, args=(prefix + "examples", data, rate, nice, others if own_core else None))
        cpu0, machine0 = cpu_seconds(worker.proc.pid), machine_busy()
        generator.start()
        generator.join()
        if generator.exitcode != 0:
            raise RuntimeError(f"the load generator failed (exit code {generator.exitcode})")
        preds, _ = asyncio.run(P.drain(prefix + "predictions", len(data)))
        cpu1, machine1 = cpu_seconds(worker.proc.pid), machine_busy()
        inputs, _ = asyncio.run(P.drain(prefix + "examples", len(data)))
        time.sleep(1.0)                     # the trace's last lines (flushed every 0.5 s)
    finally:
        if broker is not None:
            pin(broker, every)
        retire(worker, prefix)
    warm = sorted(r.timestamp for r in inputs)[len(inputs) // 5]
    result = T.breakdown(trace, inputs, preds, warm, BROKER_GC_LOG)
    result["cpu_us"] = 1e6 * (cpu1 - cpu0) / len(data)
    result["machine_busy"] = (machine1[0] - machine0[0]) / max(1e-9, machine1[1] - machine0[1])
    return result


async def produce_in_batches(topic: str, values: list[bytes], batch_bytes: int) -> None:
    """All of ``values`` as fast as the producer goes, in record batches of at most
    ``batch_bytes`` (a broker returns whole record batches, so these set fetch sizes)."""
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(**P.CONNECTION, linger_ms=5, max_batch_size=batch_bytes)
    await p.start()
    try:
        await asyncio.gather(*[await p.send(topic, key=b"bench", value=v) for v in values])
    finally:
        await p.stop()


def batch_cost(model: dict, data: list[bytes], small: bool, env: dict | None = None,
               profile: Path | None = None) -> dict:
    """The traced worker draining ``data``, produced before it reads any (its consumer
    is started but the records land faster than it applies them): CPU per record and
    requests per batch over what it applies after the last input is produced. ``small``:
    stream-sized batches (16 KiB producer batches, 24 KiB fetches, no merging). With
    ``profile``, py-spy samples the worker meanwhile into that file (bench/pyspy.py)."""
    trace = Path(tempfile.mkdtemp(prefix="dpstream-trace-")) / "trace.jsonl"
    switches = {"BENCH_TRACE": str(trace), **({"BENCH_FETCH_BYTES": "24576"} if small else {})}
    # this trace_worker.py for any code (``env``: another revision's), so that both have
    # the same switches and request counts
    worker, prefix = start_worker(model, (), env={**switches, **(env or {})},
                                  command=(str(HERE / "trace_worker.py"),))
    try:
        asyncio.run(produce_in_batches(prefix + "examples", data, 16_384 if small else 262_144))
        with pyspy.recording(worker.proc.pid, profile) if profile else contextlib.nullcontext():
            t0, c0 = time.time(), cpu_seconds(worker.proc.pid)
            preds, _ = asyncio.run(P.drain(prefix + "predictions", len(data)))
            c1 = cpu_seconds(worker.proc.pid)
        time.sleep(1.0)                     # the trace's last lines (flushed every 0.5 s)
    finally:
        retire(worker, prefix)
    after = [r.timestamp / 1000 for r in preds if r.timestamp / 1000 > t0]
    requests = T.requests_per_batch(T._load(trace), t0, max(after, default=t0)) or \
        {"batches": 0, "fetch": 0.0, "produce": 0.0, "changelog": 0.0}
    return {"cpu_us": 1e6 * (c1 - c0) / max(1, len(after)), "records": len(after),
            "per_batch": len(after) / max(1, requests["batches"]), "profile": profile, **requests}


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat (jiffies)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]                    # idle + iowait
    return float(sum(fields) - idle), float(sum(fields))


def percentiles(result: dict) -> tuple[float, float]:
    total = result["stages"]["total"]
    return float(np.percentile(total, 50)), float(np.percentile(total, 99))


def memory(model: dict, n: int) -> tuple[float, float]:
    worker, prefix = start_worker(model)
    try:
        first = n // 10
        asyncio.run(P.produce(prefix + "examples", P.payloads(first, seed=7)))
        asyncio.run(P.drain(prefix + "predictions", first))
        early = rss_mb(worker.proc.pid)
        chunk = 100_000
        for a in range(first, n, chunk):
            asyncio.run(P.produce(prefix + "examples", P.payloads(min(chunk, n - a), seed=8 + a)))
        asyncio.run(P.drain(prefix + "predictions", n, timeout=7200))
        return early, rss_mb(worker.proc.pid)
    finally:
        retire(worker, prefix)


def scale_out(n: int, models: int = 4) -> tuple[float, float]:
    """DP-Winnow rate over ``models`` models that sit on distinct partitions (of 4), with one
    worker and with two workers in one consumer group (fresh topics each), n examples
    spread round-robin over the models."""
    from dpstream.streams.worker.observe import model_partition
    ids, i = [], 0
    while len(ids) < models:                    # one model per partition
        name = f"bench-{i}"
        if model_partition(name, 4) not in {model_partition(m, 4) for m in ids}:
            ids.append(name)
        i += 1
    data = [json.dumps({**json.loads(v), "model_id": ids[j % models]}).encode()
            for j, v in enumerate(P.payloads(n, seed=3))]
    keys = [ids[j % models].encode() for j in range(n)]
    rates = []
    for count in (1, 2):
        prefix = f"so{uuid.uuid4().hex[:6]}-"
        tmp = Path(tempfile.mkdtemp(prefix="dpstream-so-"))
        workers = [P.Worker(P.BROKER, prefix, tmp, f"w{k}").start() for k in range(count)]
        try:
            time.sleep(15)                      # let the group settle after the second join
            asyncio.run(P.produce(prefix + "models",
                                  [json.dumps({**P.MODEL, "model_id": m}).encode() for m in ids],
                                  keys=[m.encode() for m in ids]))
            asyncio.run(P.drain(prefix + "model-events", models, timeout=120))
            asyncio.run(P.produce(prefix + "examples", data, keys=keys))
            rates.append(P.produced_rate(asyncio.run(P.drain(prefix + "predictions", n))[0]))
        finally:
            for w in workers:
                w.stop()
            asyncio.run(P.delete_prefixed(prefix))
    return rates[0], rates[1]


def secure_rates(state: Path, data: list[bytes], runs: int) -> dict[str, list[float]]:
    """The raw loop and the DP-Winnow worker over PLAINTEXT and over SASL_SSL (the raw loop
    as the admin; the worker as the worker principal, its ACLs granted for each fresh
    prefix), interleaved run by run so that neither broker's warm-up favours one side."""
    from dpstream.streams.tools.acls import plan
    from dpstream.streams.worker.faust_seam import create_acls
    from dpstream.streams.worker.kafka import Kafka, running
    admin = Kafka.from_settings(None, str(state / "clients" / "admin.properties"), environ={})
    worker_args = ("--client-config", str(state / "clients" / "worker.properties"))

    def grant(prefix: str) -> None:
        async def go():
            async with running(admin.admin()) as client:
                refused = await create_acls(client, plan(prefix, prefix + "app"))
            assert not refused, refused
        asyncio.run(go())
    plain = P.BROKER, P.CONNECTION
    out: dict[str, list[float]] = {"raw": [], "raw_tls": [], "worker": [], "worker_tls": []}
    for _ in range(runs):
        out["raw"].append(raw_rate(data))
        out["worker"].append(worker_rate(P.MODEL, data))
        P.connect(admin)
        try:
            out["raw_tls"].append(raw_rate(data))
            out["worker_tls"].append(worker_rate(P.MODEL, data, worker_args, setup=grant))
        finally:
            P.BROKER, P.CONNECTION = plain
    return out


def capacity(args, data: list[bytes]) -> tuple[float, float]:
    """The throughput table (and the SASL_SSL and --compare-with rows); returns the
    DP-Winnow and continual-Winnow workers' median rates."""
    # The raw loop's median too: its first run on a fresh broker also waits for the group
    # coordinator (the offsets topic is created then), and one such run measured 22,545/s
    # against 108,663 and 119,185 for the next two bench runs on the same broker.
    raw_runs = [raw_rate(data) for _ in range(args.capacity_runs)]
    rows = [(f"raw aiokafka consume -> produce (median of {len(raw_runs)})", float(np.median(raw_runs)))]
    rows.append(("faust pass-through, per event, defaults", faust_passthrough("default", data)))
    rows.append(("faust pass-through, tuned for bulk", faust_passthrough("tuned", data)))
    # The capacity that "half capacity" halves: the median of --capacity-runs runs (one
    # run moved by 1.7x between two otherwise equal bench runs).
    # With --compare-with, each run of this code is followed by one of REV's: interleaved,
    # because a broker warms up over a bench run (REV's workers, run after all of ours,
    # once measured 1.48x ours; interleaved, 0.97x).
    env = code_at(args.compare_with) if args.compare_with else None
    dp_runs, continual_runs, rev_runs = [], [], {"DP-Winnow d=1000 eps 4": [], "continual Winnow eps 2": []}
    cpu = {(who, name): [] for who in ("this", "rev") for name in rev_runs}     # us per record
    for _ in range(args.capacity_runs):
        dp_runs.append(worker_rate(P.MODEL, data, cpu=cpu["this", "DP-Winnow d=1000 eps 4"]))
        if env:
            rev_runs["DP-Winnow d=1000 eps 4"].append(
                worker_rate(P.MODEL, data, env=env, cpu=cpu["rev", "DP-Winnow d=1000 eps 4"]))
    for _ in range(args.capacity_runs):
        continual_runs.append(worker_rate(CONTINUAL, data, cpu=cpu["this", "continual Winnow eps 2"]))
        if env:
            rev_runs["continual Winnow eps 2"].append(
                worker_rate(CONTINUAL, data, env=env, cpu=cpu["rev", "continual Winnow eps 2"]))
    dp_winnow = float(np.median(dp_runs))
    continual = float(np.median(continual_runs))
    rows.append((f"dpstream worker, DP-Winnow d=1000 eps 4 (median of {len(dp_runs)})", dp_winnow))
    rows.append(("dpstream worker --consumer-thread (faust's consumer thread), DP-Winnow",
                 worker_rate(P.MODEL, data, ("--consumer-thread",))))
    rows.append((f"dpstream worker, continual Winnow eps 2 (median of {len(continual_runs)})", continual))
    for name, runs in rev_runs.items():
        if runs:
            rows.append((f"dpstream worker at {args.compare_with}, {name} (median of {len(runs)})",
                         float(np.median(runs))))
    if args.secure_state:
        tls = secure_rates(args.secure_state, data, args.capacity_runs)
        rows.append((f"raw aiokafka consume -> produce over SASL_SSL (median of {len(tls['raw_tls'])})",
                     float(np.median(tls["raw_tls"]))))
        rows.append((f"dpstream worker over SASL_SSL with ACLs, DP-Winnow (median of {len(tls['worker_tls'])})",
                     float(np.median(tls["worker_tls"]))))
    raw = rows[0][1]
    print(f"\nthroughput, {args.n:,} records each (noisy 2-core machine: quote the ratios)")
    print(f"| path | records/s | ratio to raw |\n|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / raw:.3f} |")
    print("capacity runs (records/s): raw " + ", ".join(f"{r:,.0f}" for r in raw_runs) + "; DP-Winnow " + ", ".join(f"{r:,.0f}" for r in dp_runs)
          + "; continual Winnow " + ", ".join(f"{r:,.0f}" for r in continual_runs))
    if env:
        print(f"this code / {args.compare_with}: DP-Winnow {dp_winnow / np.median(rev_runs['DP-Winnow d=1000 eps 4']):.3f}, "
              f"continual Winnow {continual / np.median(rev_runs['continual Winnow eps 2']):.3f} (runs at "
              f"{args.compare_with}: " + "; ".join(", ".join(f"{r:,.0f}" for r in v) for v in rev_runs.values()) + ")")
    print("worker CPU per record (us, medians; process and noise helper): " + "; ".join(
        f"{name} {np.median(cpu['this', name]):.1f}" + (
            f" against {np.median(cpu['rev', name]):.1f} at {args.compare_with} "
            f"({np.median(cpu['this', name]) / np.median(cpu['rev', name]):.3f})" if env else "")
        for name in rev_runs))
    if args.secure_state:
        runs = "; ".join(f"{k} " + ", ".join(f"{r:,.0f}" for r in v) for k, v in tls.items())
        print(f"SASL_SSL / PLAINTEXT, interleaved runs: raw loop "
              f"{np.median(tls['raw_tls']) / np.median(tls['raw']):.3f}, DP-Winnow worker "
              f"{np.median(tls['worker_tls']) / np.median(tls['worker']):.3f} ({runs})")
    return dp_winnow, continual


def main() -> None:
    global BROKER_GC_LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30_000)
    ap.add_argument("--latency-secs", type=float, default=10.0,
                    help="seconds of steady input per latency measurement")
    ap.add_argument("--latency-at", type=float, nargs="*", default=[300.0, 1_000.0, 3_000.0],
                    help="more steady rates (examples/s) to measure latency at")
    ap.add_argument("--latency-runs", type=int, default=1,
                    help="runs of each half-capacity latency measurement (each with its breakdown)")
    ap.add_argument("--latency-paths", nargs="*",
                    default=["DP-Winnow", "DP-Winnow --consumer-thread", "continual Winnow"],
                    help="which half-capacity latency paths to measure")
    ap.add_argument("--generator-nice", type=int, nargs="+", default=[0],
                    help="scheduling priorities of the load generator's process, interleaved per "
                         "latency run (e.g. 0 19: how much of the tail is the generator's CPU)")
    ap.add_argument("--layouts", nargs="+", choices=("shared", "own-core"), default=["shared"],
                    help="where the worker runs in the latency runs, interleaved per run: shared "
                         "(any core) or own-core (its process alone on the first core, the broker "
                         "and the load generator on the others: how much of the tail is contention)")
    ap.add_argument("--paces", nargs="+", default=["default"], metavar="PACE",
                    help="fetch pacings under load, interleaved per latency run: default (the "
                         "worker's) or min_bytes,max_wait_ms (e.g. default 32768,20: bigger "
                         "batches, fewer of them)")
    ap.add_argument("--half-at", type=float, nargs=2, metavar=("DP_WINNOW", "CONTINUAL"),
                    help="measure latency at these rates (examples/s) instead of half of a "
                         "capacity measured first (skips the throughput table)")
    ap.add_argument("--broker-gc-log", type=Path, default=BROKER_GC_LOG,
                    help="the broker's GC log (scripts/kafka.sh writes gc.log in its state directory)")
    ap.add_argument("--capacity-runs", type=int, default=3,
                    help="runs of the raw loop and of each bulk worker; ratios use their "
                         "medians, half capacity halves the workers'")
    ap.add_argument("--rss-n", type=int, default=1_000_000)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--skip-scale-out", action="store_true")
    ap.add_argument("--compare-with", metavar="REV",
                    help="also run the workers of this git revision, in the same run")
    ap.add_argument("--secure-state", metavar="DIR", type=Path,
                    help="a secured broker's state directory (KAFKA_SECURE=1 scripts/kafka.sh start): "
                         "also run the raw loop and the worker over SASL_SSL")
    ap.add_argument("--only-capacity", action="store_true",
                    help="only the throughput table (no latency, scale-out or memory)")
    ap.add_argument("--batch-cost", type=int, metavar="RUNS",
                    help="only the cost of stream-sized batches against backlog batches, RUNS "
                         "times interleaved")
    ap.add_argument("--batch-cost-n", type=int, default=120_000)
    ap.add_argument("--profile", action="store_true",
                    help="with --batch-cost: py-spy the worker, and print where the CPU of "
                         "stream-sized batches goes beyond the backlog's (bench/pyspy.py)")
    args = ap.parse_args()
    BROKER_GC_LOG = args.broker_gc_log
    if args.profile and pyspy.executable() is None:
        raise SystemExit("--profile needs py-spy (pip install -e '.[bench]')")
    if args.batch_cost:
        data = P.payloads(args.batch_cost_n, seed=3)
        codes = ("this", args.compare_with) if args.compare_with else ("this",)
        envs = {code: None if code == "this" else code_at(code) for code in codes}
        for run, (name, model) in itertools.product(range(args.batch_cost),
                                                     (("DP-Winnow", P.MODEL), ("continual Winnow", CONTINUAL))):
            for code in codes if run % 2 == 0 else codes[::-1]:
                drains = {}
                for small in (True, False):
                    profile = Path(tempfile.mkdtemp(prefix="dpstream-spy-")) / "raw.txt" \
                        if args.profile else None
                    r = drains[small] = batch_cost(model, data, small, envs[code], profile)
                    print(f"{name}{'' if code == 'this' else ', ' + code}, "
                          f"{'stream-sized' if small else 'backlog'} batches of "
                          f"{r['per_batch']:,.0f} records: {r['cpu_us']:.1f} us of CPU per record "
                          f"(over {r['records']:,}); per batch {r['fetch']:.2f} fetch and "
                          f"{r['produce']:.2f} produce requests ({r['changelog']:.2f} with table "
                          f"changelog records)", flush=True)
                if args.profile:
                    print(pyspy.compare(drains[True], drains[False]), flush=True)
        return
    data = P.payloads(args.n)

    if args.half_at:
        dp_half, continual_half = args.half_at
    else:
        dp_winnow, continual = capacity(args, data)
        if args.only_capacity:
            return
        dp_half, continual_half = dp_winnow / 2, continual / 2
    for name, model, rate, extra in (("DP-Winnow", P.MODEL, dp_half, ()),
                                     ("DP-Winnow --consumer-thread", P.MODEL, dp_half, ("--consumer-thread",)),
                                     ("continual Winnow", CONTINUAL, continual_half, ())):
        if name not in args.latency_paths:
            continue
        for run in range(args.latency_runs):
            # interleaved: each run at every niceness, in every layout, pacing, with each
            # code (every other run in reverse order)
            settings = list(itertools.product(
                args.generator_nice, args.layouts, args.paces,
                ("this", args.compare_with) if args.compare_with else ("this",)))
            for nice, layout, pace, code in settings if run % 2 == 0 else settings[::-1]:
                result = latency(model, P.payloads(int(rate * args.latency_secs), seed=1 + run),
                                 rate=rate, args=extra, nice=nice, own_core=layout == "own-core",
                                 env=None if code == "this" else code_at(code), pace=pace)
                p50, p99 = percentiles(result)
                print(f"\nlatency at {'the given rate' if args.half_at else 'half capacity'} "
                      f"({rate:,.0f} examples/s, {name}, run {run + 1}"
                      + (f", load generator at nice {nice}" if args.generator_nice != [0] else "")
                      + (f", worker {'on its own core' if layout == 'own-core' else 'on shared cores'}"
                         if args.layouts != ["shared"] else "")
                      + (f", fetch pacing {pace}" if args.paces != ["default"] else "")
                      + (f", {'this code' if code == 'this' else code}" if args.compare_with else "")
                      + f"): p50 {p50:.0f} ms, p99 {p99:.0f} ms; worker CPU "
                      f"{result['cpu_us']:.1f} us per record ({result['cpu_us'] * rate / 1e6:.2f} "
                      f"cores at this rate), machine {result['machine_busy']:.0%} busy")
                print(T.report(result))
    for rate in args.latency_at:
        p50, p99 = percentiles(latency(CONTINUAL, P.payloads(max(1_000, int(args.latency_secs * rate)), seed=2), rate=rate))
        print(f"latency at {rate:,.0f} examples/s (continual Winnow): p50 {p50:.0f} ms, p99 {p99:.0f} ms")
    if not args.skip_scale_out:
        one, two = scale_out(args.n)
        print(f"scale-out, DP-Winnow over 4 models on 4 partitions: 1 worker {one:,.0f}/s, "
              f"2 workers {two:,.0f}/s (ratio {two / one:.2f}; 2 cores shared with the broker)")
    if not args.skip_rss:
        early, late = memory(CONTINUAL, args.rss_n)
        print(f"worker RSS over {args.rss_n:,} events: {early:.1f} MB after 10%, {late:.1f} MB at "
              f"the end ({100 * (late - early) / early:+.1f}%)")


if __name__ == "__main__":
    main()
