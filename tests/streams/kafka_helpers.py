"""Helpers for tests against a real broker: worker processes, producing, reading topics."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


ROOT = Path(__file__).resolve().parents[2]
KEY_HEX = "0f1e2d3c4b5a69788796a5b4c3d2e1f00123456789abcdeffedcba9876543210"


class Worker:
    def __init__(self, bootstrap: str, prefix: str, tmp: Path, name: str = "w",
                 web_port: int | None = None, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, command: tuple[str, ...] = ("-m", "dpstream.streams.cli")):
        self.bootstrap, self.prefix, self.dir = bootstrap, prefix, tmp / name
        self.web_port, self.args, self.env, self.command = web_port, args, env or {}, command
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "worker.log"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90.0) -> "Worker":
        env = {**os.environ, "DPSTREAM_SECRET_KEY": KEY_HEX, "PYTHONPATH": str(ROOT), **self.env}
        self._log_fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, *self.command, "worker", "--broker", self.bootstrap,
             "--prefix", self.prefix, "--app-id", f"{self.prefix}app", "--loglevel", "info",
             "--data-dir", str(self.dir / "data")]
            + (["--web-port", str(self.web_port)] if self.web_port else []) + list(self.args),
            cwd=ROOT, env=env, stdout=self._log_fh, stderr=subprocess.STDOUT)
        start = time.time()
        seen = self.log.stat().st_size if self.log.exists() else 0
        while time.time() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited: {self.log.read_text()[-3000:]}")
            if b"dpstream worker ready" in self.log.read_bytes()[seen:]:
                return self
            time.sleep(0.5)
        raise TimeoutError(f"worker not ready in {timeout}s: {self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def client_args(target) -> dict:
    """aiokafka's connection arguments for a bootstrap string (a plaintext broker) or a
    ``Kafka`` settings object (a secured one, as a given principal)."""
    return {"bootstrap_servers": target} if isinstance(target, str) else target.client_args()


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from dpstream.streams.worker.kafka import Kafka
    from dpstream.streams.worker.topics import create_topic as create
    await create(Kafka(bootstrap), topic, partitions)


async def produce(bootstrap, topic: str, payloads) -> None:
    producer = AIOKafkaProducer(**client_args(bootstrap), acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for p in payloads:
            value = p if isinstance(p, bytes) else json.dumps(p).encode()
            key = p.get("model_id") if isinstance(p, dict) else None
            await producer.send(topic, key=key.encode() if key else None, value=value)
        await producer.flush()
    finally:
        await producer.stop()


async def read_all(bootstrap, topic: str, *, until: int | None = None, timeout: float = 60.0,
                   idle: float = 2.0, stall: float = 20.0) -> list[dict]:
    """Values of ``topic`` from the start: until ``until`` distinct records arrived (identical
    re-deliveries count once) or ``timeout``; without ``until``, until ``idle`` s of silence.
    With ``until``, a consumer that sees nothing new for ``stall`` s is replaced by a fresh
    one reading from the start: on this loaded 2-core machine a live consumer was seen to
    miss records appended to a partition it had already read to its end (a fresh consumer
    then read them at once), and a test must judge the worker, not its own consumer."""
    deadline = time.time() + timeout
    while True:
        out, distinct, stalled = await _read_from_start(bootstrap, topic, until, deadline, idle, stall)
        if not stalled or time.time() >= deadline:
            return out


async def _read_from_start(bootstrap, topic, until, deadline, idle, stall):
    consumer = AIOKafkaConsumer(topic, **client_args(bootstrap), auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    out: list[dict] = []
    distinct: set[bytes] = set()
    progress = time.time()
    try:
        while time.time() < deadline and (until is None or len(distinct) < until):
            batch = await consumer.getmany(timeout_ms=int(idle * 1000))
            if not batch and until is None:
                break
            before = len(distinct)
            for records in batch.values():
                out.extend(json.loads(r.value) for r in records)
                distinct.update(r.value for r in records)
            if len(distinct) > before:
                progress = time.time()
            elif until is not None and time.time() - progress > stall:
                return out, distinct, True
    finally:
        await consumer.stop()
    return out, distinct, False


def per_model(values: list[dict], drop=("source",)) -> dict[str, list[dict]]:
    """Outputs grouped by model in seq order, duplicates (identical re-deliveries) removed;
    raises if one (model, seq) has two different outputs."""
    seen: dict[tuple, dict] = {}
    for v in values:
        k = (v["model_id"], v["seq"], v.get("charges"))
        body = {f: x for f, x in v.items() if f not in drop}
        if k in seen and seen[k] != body:
            raise AssertionError(f"two different outputs for {k}: {seen[k]} vs {body}")
        seen[k] = body
    out: dict[str, list[dict]] = defaultdict(list)
    for (model, _, _), body in sorted(seen.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)):
        out[model].append(body)
    return dict(out)
