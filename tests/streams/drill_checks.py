"""What every drill of the worker checks, and the worker processes a drill runs and
watches. Shared by the rebalance drill (tests/streams/drill.py) and the broker drills
(tests/streams/broker_drill.py).

After a drill, each output topic the worker wrote is compared with the embedded
runtime's outputs on the same inputs, keyed by (model, seq, charge index, mechanism,
window): missing, extra, conflicting (two different records for one key, or one that
differs from the reference) and identical duplicates, counted apart (the worker is
at-least-once: a re-delivery may publish a record twice, identically). Every input is
valid, so a dead letter is a failure; so is a worker that exited without being told to;
and ``dpstream replay`` with the key must reproduce every release.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from .kafka_helpers import KEY_HEX, ROOT, Worker, client_args


# ---------------------------------------------------------------- comparing outputs
@dataclass
class Comparison:
    """One output topic against the reference."""
    missing: int = 0
    extra: int = 0
    conflicting: int = 0
    duplicates: int = 0          # identical re-deliveries: allowed

    @property
    def clean(self) -> bool:
        return self.missing == self.extra == self.conflicting == 0


def output_key(v: dict) -> tuple:
    """Where an output belongs: (model, seq, charge index, mechanism, window)."""
    return v["model_id"], v["seq"], v.get("charges"), v.get("mechanism"), v.get("window")


def compare(got: list[dict], want: list[dict], drop=("source",)) -> Comparison:
    """``got`` against ``want``, outputs keyed by (model, seq, charge index, mechanism,
    window); the fields in ``drop`` (where the input sat) are not compared."""
    def keyed(values):
        out, dups, conflicts = {}, 0, set()
        for v in values:
            k = output_key(v)
            body = {f: x for f, x in v.items() if f not in drop}
            if k in out:
                if out[k] == body:
                    dups += 1
                else:
                    conflicts.add(k)
            else:
                out[k] = body
        return out, dups, conflicts
    g, dups, inner = keyed(got)
    w, _, _ = keyed(want)
    return Comparison(missing=sum(1 for k in w if k not in g), extra=sum(1 for k in g if k not in w),
                      conflicting=len(inner | {k for k in g if k in w and g[k] != w[k]}), duplicates=dups)


def interleaved(items: list[dict]) -> list[dict]:
    """Round robin over models, each model's items in their order (the embedded
    runtime sees the same per-model order: one topic, one partition per model)."""
    by_model: dict[str, list[dict]] = {}
    for e in items:
        by_model.setdefault(e["model_id"], []).append(e)
    queues, out = [list(reversed(v)) for v in by_model.values()], []
    while queues:
        for q in queues:
            out.append(q.pop())
        queues = [q for q in queues if q]
    return out


@dataclass
class Checks:
    """What a drill found: per output topic its comparison, dead letters, the workers
    that exited by themselves, and replay's verdict (its first line)."""
    outputs: dict[str, Comparison] = field(default_factory=dict)
    dead_letters: int = 0
    exited: list[str] = field(default_factory=list)
    replay: str = ""

    @property
    def ok(self) -> bool:
        return (all(c.clean for c in self.outputs.values()) and self.dead_letters == 0
                and not self.exited and self.replay.startswith("OK"))

    def text(self) -> str:
        parts = []
        for topic, c in self.outputs.items():
            if topic == "ledger":
                parts.append(f"ledger missing {c.missing}, extra {c.extra}, conflicting {c.conflicting}")
            else:
                parts.append(f"{topic} missing {c.missing}, extra {c.extra}, conflicting {c.conflicting}, "
                             f"identical duplicates {c.duplicates}")
        return "; ".join([*parts, f"dead letters {self.dead_letters}",
                          f"workers that exited by themselves {self.exited or 0}", f"replay {self.replay or '?'}"])


def judge(published: "Published", want: dict[str, list[dict]], *, topics=("predictions", "ledger"),
          timeout: float = 600, log=print) -> Checks:
    """Wait until each of ``topics`` holds as many distinct outputs as ``want``'s (the
    embedded runtime's outputs on the same inputs; at most ``timeout`` s in all: a topic
    the worker writes in the same call as another may land a moment later), then compare
    what each holds, and read the dead letters to their end."""
    deadline = time.monotonic() + timeout
    got = {}
    for topic in topics:
        while True:
            got[topic] = asyncio.run(published.read(topic, timeout=timeout))
            if len({output_key(v.value) for v in got[topic]}) >= len({output_key(w) for w in want.get(topic, [])}) \
                    or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
    checks = Checks()
    for topic in topics:
        checks.outputs[topic] = compare([r.value for r in got[topic]], want.get(topic, []))
    rejected = asyncio.run(published.read("rejected", timeout=timeout))
    checks.dead_letters = len(rejected)
    if rejected:
        log(f"  dead letters: {Counter(r.value.get('reason') for r in rejected).most_common(3)}")
    return checks


# ---------------------------------------------------------------- reading a topic
@dataclass(frozen=True)
class Read:
    """One record as read back: where it sits, its timestamp (ms, the producer's clock),
    its JSON value."""
    partition: int
    offset: int
    timestamp: int
    value: dict


async def read_to_end(target, topic: str, *, since: dict[int, int] | None = None,
                      timeout: float = 120) -> list[Read]:
    """Every record of ``topic`` below the end offsets the broker gives now (from
    ``since``, next offset per partition, else from the start), in order per partition.
    A reader that gets nothing for 20 s while records wait is replaced by a fresh one
    from where it stopped (kafka_helpers.read_all says why); TimeoutError after
    ``timeout`` s."""
    deadline = time.monotonic() + timeout
    positions = dict(since or {})
    out: list[Read] = []
    while True:
        consumer = AIOKafkaConsumer(**client_args(target), enable_auto_commit=False, group_id=None,
                                    request_timeout_ms=15000)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in await partitions_of(target, topic)]
            ends = await consumer.end_offsets(tps)
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, positions.get(tp.partition, 0))
            todo = {tp for tp in tps if positions.get(tp.partition, 0) < ends[tp]}
            progress = time.monotonic()
            while todo and time.monotonic() < deadline and time.monotonic() - progress < 20:
                batch = await consumer.getmany(*todo, timeout_ms=500)
                for tp, records in batch.items():
                    for r in records:
                        if r.offset < ends[tp]:
                            out.append(Read(tp.partition, r.offset, r.timestamp, json.loads(r.value)))
                            positions[tp.partition] = r.offset + 1
                    progress = time.monotonic()
                todo = {tp for tp in todo if positions.get(tp.partition, 0) < ends[tp]}
        finally:
            await consumer.stop()
        if not todo:
            return out
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{topic}: not read to its end within {timeout:.0f} s")


class Published:
    """What a prefix's topics hold, read on from where the last read stopped: ``read``
    returns every record read so far of a topic (``target``: a bootstrap string, or a
    ``Kafka`` that may read every topic)."""

    def __init__(self, target, prefix: str):
        self.target, self.prefix = target, prefix
        self.records: dict[str, list[Read]] = {}
        self.next: dict[str, dict[int, int]] = {}        # topic -> partition -> next offset

    async def read(self, topic: str, *, timeout: float = 120) -> list[Read]:
        since = self.next.setdefault(topic, {})
        records = self.records.setdefault(topic, [])
        for r in await read_to_end(self.target, self.prefix + topic, since=since, timeout=timeout):
            records.append(r)
            since[r.partition] = r.offset + 1
        return records


async def partitions_of(target, topic: str) -> list[int]:
    """The partition numbers of ``topic`` (a metadata answer; none if it does not exist)."""
    admin = AIOKafkaAdminClient(**client_args(target), request_timeout_ms=15000)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(p["partition"] for p in described["partitions"]) if described["error_code"] == 0 else []


# ---------------------------------------------------------------- replay
def replay(bootstrap: str, prefix: str, args: tuple[str, ...] = ()) -> str:
    """``dpstream replay`` with the key over ``prefix``'s topics: "OK: <its first line>" or
    "FAILED (exit N): <its first line>"."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSTREAM_SECRET_KEY": KEY_HEX}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "dpstream.streams.cli", "replay", "--broker", bootstrap,
                           "--prefix", prefix, "--timeout", "5", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    first = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["(nothing)"])[0]
    return ("OK" if done.returncode == 0 else f"FAILED (exit {done.returncode})") + f": {first[:160]}"


# ---------------------------------------------------------------- the workers
class Workers:
    """A drill's worker processes by name, and which of them exited without being told
    to (``check_alive``: a worker killed or stopped by the drill is expected down)."""

    def __init__(self, bootstrap: str, prefix: str, tmp, *, args: tuple[str, ...] = (), log=print):
        self.bootstrap, self.prefix, self.tmp, self.args, self.say = bootstrap, prefix, tmp, tuple(args), log
        self.procs: dict[str, Worker] = {}
        self.expected_down: set[str] = set()
        self.exited: list[str] = []

    def __getitem__(self, name: str) -> Worker:
        if name not in self.procs:
            self.procs[name] = Worker(self.bootstrap, self.prefix, self.tmp, name, args=self.args)
        return self.procs[name]

    def check_alive(self) -> None:
        for name, w in self.procs.items():
            if name not in self.expected_down and w.proc is not None and w.proc.poll() is not None \
                    and name not in self.exited:
                self.exited.append(name)
                self.say(f"  worker {name} exited by itself (code {w.proc.returncode})")

    def start(self, name: str, wait: bool = True) -> None:
        """Start worker ``name`` and wait until it is ready (``wait``), or start it in the
        background (a failed start then shows in ``check_alive`` and the outputs)."""
        w = self[name]
        self.expected_down.discard(name)
        if wait:
            w.start(timeout=180)
        else:
            threading.Thread(target=_start_quietly, args=(w,), daemon=True).start()

    def kill(self, name: str) -> None:
        self.expected_down.add(name)
        self[name].kill()

    def stop(self, name: str) -> None:
        """SIGTERM, and say so when the worker then exits other than as a stop should (0,
        or 143 once the stop guard cut a slow stop short: streams/worker/watchdog.py)."""
        self.expected_down.add(name)
        w = self[name]
        was_running = w.proc is not None and w.proc.poll() is None
        w.stop()
        if was_running and w.proc.returncode not in (0, 143, -15):
            self.say(f"  worker {name} exited with code {w.proc.returncode} when stopped")

    def stop_all(self) -> None:
        """Stop every worker still expected to run (after a last ``check_alive``)."""
        self.check_alive()
        for name in list(self.procs):
            if name not in self.expected_down:
                self.stop(name)


def _start_quietly(w: Worker) -> None:
    try:
        w.start(timeout=180)
    except Exception:              # noqa: BLE001 - judged by check_alive and the outputs
        pass
