"""The secured broker the Kafka tests share (one per session: tests/streams/conftest.py
``secured``), its tenants, and another local user's toolkit (``Attacker``).

The broker is ``KAFKA_SECURE=1 scripts/kafka.sh start`` on free ports. While it starts, a
thread reads every process's command line (``/proc/*/cmdline``) again and again; what it
saw is kept, so a test can check that no password was ever on one (issue 41, item 3)."""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from dpstream.streams.worker.kafka import Kafka, running

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "kafka.sh")
ROLES = ("worker", "producer", "querier", "consumer", "auditor")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CommandLines:
    """Every distinct process command line seen while it runs (a background thread)."""

    def __init__(self):
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    try:
                        with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                            self.seen.add(fh.read().replace(b"\0", b" ").decode(errors="replace"))
                    except OSError:
                        pass
            self._stop.wait(0.02)

    def __enter__(self) -> "CommandLines":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class Secured:
    """A secured broker's state directory: its ports, each user's client config, the
    script's commands on it, and its tenants."""

    def __init__(self, state: Path):
        self.state = state
        props = (state / "server.properties").read_text()
        ports = dict(re.findall(r"(\w+)://127\.0\.0\.1:(\d+)", re.search(r"^listeners=(.*)$", props, re.M).group(1)))
        self.port, self.controller_port, self.internal_port = (int(ports[k]) for k in ("SASL_SSL", "CONTROLLER", "BROKER"))
        self.started: CommandLines | None = None     # command lines seen while it started

    @property
    def env(self) -> dict:
        """The environment in which scripts/kafka.sh means this broker."""
        env = {**os.environ, "KAFKA_SECURE": "1", "DPSTREAM_KAFKA_STATE": str(self.state),
               "PYTHON": sys.executable, "KAFKA_PORT": str(self.port),
               "KAFKA_CONTROLLER_PORT": str(self.controller_port), "KAFKA_INTERNAL_PORT": str(self.internal_port)}
        env.pop("DPSTREAM_KAFKA_CONFIG", None)
        return env

    def script(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        return subprocess.run([SCRIPT, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def config(self, user: str) -> str:
        return str(self.state / "clients" / f"{user}.properties")

    def as_(self, user: str) -> Kafka:
        return Kafka.from_settings(None, self.config(user), environ={})

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def passwords(self) -> list[str]:
        return [line.split("=", 1)[1] for path in (self.state / "clients").glob("*.properties")
                for line in path.read_text().splitlines() if line.startswith("sasl.password=")]

    def answers(self) -> bool:
        async def ask():
            async with running(self.as_("admin").admin(request_timeout_ms=5000)) as admin:
                await asyncio.wait_for(admin.list_topics(), 10)
        try:
            asyncio.run(ask())
            return True
        except Exception:
            return False

    def tenant(self, prefix: str, app_id: str | None = None) -> "Tenant":
        """A tenant: its own five users (prefix + role, made with ``kafka.sh users``) and
        its ACLs, applied through the CLI as an admin would (``dpstream acls --apply``)."""
        done = self.script("users", *(prefix + role for role in ROLES))
        assert done.returncode == 0, done.stderr
        app_id = app_id or prefix + "dpstream"
        done = dpstream(self, "admin", "acls", "--prefix", prefix, "--app-id", app_id, "--apply")
        assert done.returncode == 0 and "ACLs created" in done.stderr, done.stderr
        return Tenant(self, prefix, app_id)

    @classmethod
    def start(cls, base: Path) -> "Secured":
        """Start one with the script on free ports, state in ``base``/state."""
        state = base / "state"
        env = {**os.environ, "KAFKA_SECURE": "1", "DPSTREAM_KAFKA_STATE": str(state), "PYTHON": sys.executable,
               "KAFKA_PORT": str(free_port()), "KAFKA_CONTROLLER_PORT": str(free_port()),
               "KAFKA_INTERNAL_PORT": str(free_port())}
        with CommandLines() as seen:
            done = subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"could not start a secured Kafka broker: {done.stderr[-1500:]}")
        broker = cls(state)
        broker.started = seen
        return broker


class Tenant:
    """One prefix with its own users and app id on a secured broker."""

    def __init__(self, broker: Secured, prefix: str, app_id: str):
        self.broker, self.prefix, self.app_id = broker, prefix, app_id

    def user(self, role: str) -> str:
        return self.prefix + role

    def config(self, role: str) -> str:
        return self.broker.config(self.user(role))

    def as_(self, role: str) -> Kafka:
        return self.broker.as_(self.user(role))


def dpstream(broker: Secured, user: str | None, *args: str, timeout: float = 120, env: dict | None = None):
    """One CLI command as ``user`` (its client config; a path is taken as is), from the
    repo's checkout."""
    from .kafka_helpers import KEY_HEX
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSTREAM_SECRET_KEY": KEY_HEX, **(env or {})}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    cmd = [sys.executable, "-m", "dpstream.streams.cli", *args]
    if user:
        cmd += ["--client-config", user if "/" in user else broker.config(user)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


class Attacker:
    """Another local user (``nobody``) with Kafka's Java client: a world-readable kit in
    /tmp (the kafka-clients jar and its logging API from the jar cache, tests/streams/
    attacker/Attack.java compiled), run through ``runuser -u nobody``."""

    def __init__(self, libs: Path):
        self.kit = Path(tempfile.mkdtemp(prefix="dpstream-attacker-"))
        for pattern in ("kafka-clients-*.jar", "slf4j-api-*.jar"):
            for jar in libs.glob(pattern):
                shutil.copy(jar, self.kit)
        src = Path(__file__).parent / "attacker" / "Attack.java"
        subprocess.run(["javac", "-nowarn", "-cp", f"{self.kit}/*", "-d", str(self.kit), str(src)],
                       check=True, capture_output=True, timeout=120)
        for path in [self.kit, *self.kit.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """A command as nobody, in the kit (its working directory)."""
        return subprocess.run(["runuser", "-u", "nobody", "--", *args], cwd=self.kit, capture_output=True,
                              text=True, timeout=timeout)

    def admin(self, action: str, *args: str) -> str:
        """Attack.java's one line for ``action`` with ``args`` (ARG, then key=value config)."""
        done = self.run("java", "-cp", f"{self.kit}:{self.kit}/*", "Attack", action, *args)
        lines = [line for line in done.stdout.splitlines() if line.startswith(("OK", "REFUSED"))]
        assert len(lines) == 1, (done.stdout[-2000:], done.stderr[-2000:])
        return lines[0]

    def close(self) -> None:
        shutil.rmtree(self.kit, ignore_errors=True)


def libs() -> Path:
    """The jar directory (``scripts/kafka.sh fetch`` prints it)."""
    done = subprocess.run([SCRIPT, "fetch"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])
