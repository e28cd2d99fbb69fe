"""The rebalance drill: two workers in one group while examples flow, one leaves (kill -9
or a clean stop) and rejoins, again and again, and in the last cycle one is killed
during the rebalance that the other's rejoin starts; optionally with busy loops beside
them on the machine. Then every output is compared with the embedded runtime's on the
same inputs, the dead letters are counted (every input is valid, so any is a failure),
``dpstream replay`` with the key must reproduce every release, and no worker may have
exited by itself.

    .venv/bin/python -m tests.streams.drill --runs 5 --busy 2            # plaintext broker
    .venv/bin/python -m tests.streams.drill --runs 5 --busy 2 --secure   # TLS + SASL + ACLs

One run is part of the test suite (tests/streams/test_rebalance_drill.py). A run prints
one line: missing / extra / conflicting outputs (by model and seq, against the embedded
runtime), identical duplicates (at-least-once re-deliveries: allowed), dead letters,
workers that exited by themselves, and replay's verdict.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

from .kafka_helpers import KEY_HEX, ROOT, Worker, client_args, produce, read_all
from .workload import examples, models

RATE = 150.0                 # examples per second while the workers come and go (the drill
                             # that found the handoff bug sent 150/s)


@dataclass
class Result:
    missing: int = 0
    extra: int = 0
    conflicting: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    exited: list[str] = field(default_factory=list)
    replay: str = ""
    ledger_missing: int = 0
    ledger_conflicting: int = 0
    seconds: float = 0.0
    killed_in_rebalance: bool = False     # the last kill met a rebalance under way

    @property
    def ok(self) -> bool:
        return (self.missing == self.extra == self.conflicting == self.dead_letters == 0
                and self.ledger_missing == self.ledger_conflicting == 0 and self.killed_in_rebalance
                and not self.exited and self.replay.startswith("OK"))

    def line(self) -> str:
        return (f"{'PASS' if self.ok else 'FAIL'}: predictions missing {self.missing}, extra "
                f"{self.extra}, conflicting {self.conflicting}, identical duplicates "
                f"{self.duplicates}; ledger missing {self.ledger_missing}, conflicting "
                f"{self.ledger_conflicting}; dead letters {self.dead_letters}; workers that "
                f"exited by themselves {self.exited or 0}; replay {self.replay or '?'}; kill "
                f"during a rebalance {'yes' if self.killed_in_rebalance else 'NO (timed out)'}; "
                f"{self.seconds:.0f} s")


def interleaved(items: list[dict]) -> list[dict]:
    """Round robin over models, each model's examples in their order (the embedded
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


def compare(got: list[dict], want: list[dict], drop=("source",)) -> tuple[int, int, int, int]:
    """(missing, extra, conflicting, identical duplicates) of ``got`` against ``want``,
    outputs keyed by (model, seq, charge index)."""
    def keyed(values):
        out, dups, conflicts = {}, 0, set()
        for v in values:
            k = (v["model_id"], v["seq"], v.get("charges"), v.get("mechanism"), v.get("window"))
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
    missing = sum(1 for k in w if k not in g)
    extra = sum(1 for k in g if k not in w)
    conflicting = len(inner | {k for k in g if k in w and g[k] != w[k]})
    return missing, extra, conflicting, dups


class Busy:
    """``n`` processes spinning on the CPU (a loaded machine)."""

    def __init__(self, n: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


class Drill:
    """One run. ``admin``: who reads every topic (a bootstrap string, or a ``Kafka`` of a
    secured broker's admin); ``producer``: who writes the inputs; ``worker_args``: the
    workers' extra flags (client config); ``replay_args``: replay's."""

    def __init__(self, bootstrap: str, prefix: str, tmp: Path, *, admin=None, producer=None,
                 worker_args: tuple[str, ...] = (), replay_args: tuple[str, ...] = (),
                 app_id: str | None = None, n: int = 1500, busy: int = 0, log=print):
        self.bootstrap, self.prefix, self.tmp = bootstrap, prefix, tmp
        self.admin, self.producer = admin or bootstrap, producer or bootstrap
        self.app_id = app_id or prefix + "app"
        self.worker_args = tuple(worker_args) + ("--app-id", self.app_id)
        self.replay_args, self.n, self.busy, self.say = tuple(replay_args), n, busy, log
        self.workers: dict[str, Worker] = {}
        self.expected_down: set[str] = set()
        self.exited: list[str] = []

    # ------------------------------------------------------------ workers
    def worker(self, name: str) -> Worker:
        if name not in self.workers:
            self.workers[name] = Worker(self.bootstrap, self.prefix, self.tmp, name, args=self.worker_args)
        return self.workers[name]

    def check_alive(self) -> None:
        for name, w in self.workers.items():
            if name not in self.expected_down and w.proc is not None and w.proc.poll() is not None \
                    and name not in self.exited:
                self.exited.append(name)
                self.say(f"  worker {name} exited by itself (code {w.proc.returncode})")

    def start(self, name: str, wait: bool = True) -> None:
        w = self.worker(name)
        self.expected_down.discard(name)
        if wait:
            w.start(timeout=180)
        else:                              # started in the background: Worker.start's command
            import threading
            threading.Thread(target=lambda: _start_quietly(w), daemon=True).start()

    def kill(self, name: str) -> None:
        self.expected_down.add(name)
        self.workers[name].kill()

    def stop(self, name: str) -> None:
        self.expected_down.add(name)
        self.workers[name].stop()

    def rebalances(self, name: str) -> int:
        """How many rebalances worker ``name`` has seen start: its heartbeat refused because
        the group rebalances (aiokafka, INFO), or its partitions revoked (the worker)."""
        w = self.workers[name]
        if not w.log.exists():
            return 0
        text = w.log.read_bytes()
        return text.count(b"because it is rebalancing") + text.count(b"a rebalance started")

    # ------------------------------------------------------------ the run
    async def _send(self, producer: AIOKafkaProducer, items: list[dict], done: asyncio.Event) -> int:
        """Send ``items`` at RATE until all are sent or ``done`` is set (the chaos ended)."""
        sent = 0
        start = time.monotonic()
        for e in items:
            if done.is_set():
                break
            await producer.send(self.prefix + "examples", key=e["model_id"].encode(), value=json.dumps(e).encode())
            sent += 1
            ahead = start + sent / RATE - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
        await producer.flush()
        return sent

    def run(self) -> Result:
        began = time.monotonic()
        result = Result()
        inputs = interleaved(examples(self.n))
        self.say(f"drill: {len(inputs)} examples at {RATE:.0f}/s, prefix {self.prefix}, busy loops {self.busy}")
        self.start("a")
        self.start("b")
        asyncio.run(produce(self.admin, self.prefix + "models", models()))     # only an admin registers
        asyncio.run(read_all(self.admin, self.prefix + "model-events", until=len(models()), timeout=120))
        busy = Busy(self.busy)
        try:
            sent = asyncio.run(self._chaos(inputs, result))
        finally:
            busy.stop()
        self.check_alive()
        inputs = inputs[:sent]
        rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
        asyncio.run(rt.feed_all([("models", m) for m in models()] + [("examples", e) for e in inputs]))
        want_preds, want_ledger = rt.outputs["predictions"], rt.outputs["ledger"]
        preds = asyncio.run(read_all(self.admin, self.prefix + "predictions", until=len(want_preds),
                                     timeout=600))
        ledger = asyncio.run(read_all(self.admin, self.prefix + "ledger", idle=5))
        rejected = asyncio.run(read_all(self.admin, self.prefix + "rejected", idle=3))
        self.check_alive()
        for name in list(self.workers):
            if name not in self.expected_down:
                self.stop(name)
        result.missing, result.extra, result.conflicting, result.duplicates = compare(preds, want_preds)
        result.ledger_missing, _, result.ledger_conflicting, _ = compare(ledger, want_ledger)
        result.dead_letters = len(rejected)
        if rejected:
            self.say(f"  dead letters: {Counter(r.get('reason') for r in rejected).most_common(3)}")
        result.exited = list(self.exited)
        result.replay = self.replay()
        result.seconds = time.monotonic() - began
        return result

    async def _chaos(self, inputs: list[dict], result: Result) -> int:
        """Examples at RATE while: kill -9 a, a rejoins; b stops cleanly, b rejoins; a
        stops cleanly, a rejoins and b is killed during the rebalance a's rejoin starts;
        b rejoins. Examples flow throughout (until the workload is all sent). Returns how
        many examples were sent."""
        producer = AIOKafkaProducer(**client_args(self.producer), acks="all", enable_idempotence=True)
        await producer.start()
        sending = None
        try:
            done = asyncio.Event()
            sending = asyncio.ensure_future(self._send(producer, inputs, done))
            step = 5.0

            async def pause(seconds):
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    self.check_alive()
                    await asyncio.sleep(0.5)

            await pause(step)
            self.say("  kill -9 a");                        self.kill("a")
            await pause(step)
            self.say("  a rejoins");                        await asyncio.to_thread(self.start, "a")
            await pause(step)
            self.say("  b stops cleanly");                  await asyncio.to_thread(self.stop, "b")
            await pause(step)
            self.say("  b rejoins");                        await asyncio.to_thread(self.start, "b")
            await pause(step)
            self.say("  a stops cleanly");                  await asyncio.to_thread(self.stop, "a")
            await pause(step / 2)
            before = self.rebalances("b")
            self.say("  a rejoins; b is killed in the rebalance it starts")
            self.start("a", wait=False)
            deadline = time.monotonic() + 120
            while self.rebalances("b") == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            result.killed_in_rebalance = self.rebalances("b") > before
            self.kill("b")
            await pause(step)
            self.say("  b rejoins");                        await asyncio.to_thread(self.start, "b")
            await pause(step)
            done.set()
            return await sending
        finally:
            done.set()
            if sending is not None and not sending.done():
                sending.cancel()
            await producer.stop()

    def replay(self) -> str:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSTREAM_SECRET_KEY": KEY_HEX}
        env.pop("DPSTREAM_KAFKA_CONFIG", None)
        done = subprocess.run([sys.executable, "-m", "dpstream.streams.cli", "replay", "--broker", self.bootstrap,
                               "--prefix", self.prefix, "--timeout", "5", *self.replay_args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        first = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["(nothing)"])[0]
        return ("OK" if done.returncode == 0 else f"FAILED (exit {done.returncode})") + f": {first[:160]}"


def _start_quietly(w: Worker) -> None:
    try:
        w.start(timeout=180)
    except Exception:              # noqa: BLE001 - judged by check_alive and the outputs
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--busy", type=int, default=2, help="busy loops beside the workers")
    ap.add_argument("--examples", type=int, default=1500, help="the workload's size (workload.examples n)")
    ap.add_argument("--broker", default="127.0.0.1:9092")
    ap.add_argument("--secure", action="store_true", help="a secured broker of its own (KAFKA_SECURE=1)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="dpstream-drill-"))
    secured = None
    if args.secure:
        from .secure_broker import Secured
        secured = Secured.start(tmp / "broker")
    failed = 0
    try:
        for run in range(args.runs):
            prefix = f"drill{uuid.uuid4().hex[:8]}-"
            if secured is None:
                drill = Drill(args.broker, prefix, tmp / prefix, n=args.examples, busy=args.busy)
            else:
                drill = secured_drill(secured, prefix, tmp / prefix, n=args.examples, busy=args.busy)
            result = drill.run()
            failed += not result.ok
            print(f"run {run + 1}: {result.line()}", flush=True)
    finally:
        if secured is not None:
            secured.script("stop", timeout=120)
    return 1 if failed else 0


def secured_drill(secured, prefix: str, tmp: Path, **kwargs) -> Drill:
    """A drill as a tenant of a secured broker: its producer writes, its worker works,
    the broker's admin reads the topics for the comparison and replays."""
    tenant = secured.tenant(prefix)
    admin = secured.config("admin")
    return Drill(secured.bootstrap, prefix, tmp, admin=secured.as_("admin"), producer=tenant.as_("producer"),
                 worker_args=("--client-config", tenant.config("worker")), app_id=tenant.app_id,
                 replay_args=("--client-config", admin), **kwargs)


if __name__ == "__main__":
    sys.exit(main())
