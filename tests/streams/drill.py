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
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime

from .drill_checks import Checks, Published, Workers, interleaved, judge, replay
from .kafka_helpers import KEY_HEX, client_args, produce, read_all
from .workload import examples, models

RATE = 150.0                 # examples per second while the workers come and go (the drill
                             # that found the handoff bug sent 150/s)


@dataclass
class Result:
    checks: Checks = field(default_factory=Checks)
    seconds: float = 0.0
    killed_in_rebalance: bool = False     # the last kill met a rebalance under way

    @property
    def ok(self) -> bool:
        return self.checks.ok and self.killed_in_rebalance

    def line(self) -> str:
        return (f"{'PASS' if self.ok else 'FAIL'}: {self.checks.text()}; kill during a rebalance "
                f"{'yes' if self.killed_in_rebalance else 'NO (timed out)'}; {self.seconds:.0f} s")


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
        self.workers = Workers(bootstrap, prefix, tmp, args=self.worker_args, log=log)

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
        self.workers.start("a")
        self.workers.start("b")
        asyncio.run(produce(self.admin, self.prefix + "models", models()))     # only an admin registers
        asyncio.run(read_all(self.admin, self.prefix + "model-events", until=len(models()), timeout=120))
        busy = Busy(self.busy)
        try:
            sent = asyncio.run(self._chaos(inputs, result))
        finally:
            busy.stop()
        inputs = inputs[:sent]
        rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
        asyncio.run(rt.feed_all([("models", m) for m in models()] + [("examples", e) for e in inputs]))
        checks = judge(Published(self.admin, self.prefix), rt.outputs, log=self.say)
        self.workers.stop_all()
        checks.exited = list(self.workers.exited)
        checks.replay = replay(self.bootstrap, self.prefix, self.replay_args)
        result.checks = checks
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
                    self.workers.check_alive()
                    await asyncio.sleep(0.5)

            await pause(step)
            self.say("  kill -9 a");                        self.workers.kill("a")
            await pause(step)
            self.say("  a rejoins");                        await asyncio.to_thread(self.workers.start, "a")
            await pause(step)
            self.say("  b stops cleanly");                  await asyncio.to_thread(self.workers.stop, "b")
            await pause(step)
            self.say("  b rejoins");                        await asyncio.to_thread(self.workers.start, "b")
            await pause(step)
            self.say("  a stops cleanly");                  await asyncio.to_thread(self.workers.stop, "a")
            await pause(step / 2)
            before = self.rebalances("b")
            self.say("  a rejoins; b is killed in the rebalance it starts")
            self.workers.start("a", wait=False)
            deadline = time.monotonic() + 120
            while self.rebalances("b") == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            result.killed_in_rebalance = self.rebalances("b") > before
            self.workers.kill("b")
            await pause(step)
            self.say("  b rejoins");                        await asyncio.to_thread(self.workers.start, "b")
            await pause(step)
            done.set()
            return await sending
        finally:
            done.set()
            if sending is not None and not sending.done():
                sending.cancel()
            await producer.stop()

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
