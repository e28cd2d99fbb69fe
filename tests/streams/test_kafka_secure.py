"""On a broker with TLS, SASL/SCRAM and ACLs (``KAFKA_SECURE=1 scripts/kafka.sh start``,
issue 15): the quick start as separate least-privilege principals; every forbidden
operation fails with one line naming the principal and the missing right; a client
without TLS, without the CA or with a wrong password is refused with a line that says
so; an ACL revoked and restored while records flow loses and changes nothing."""
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dpstream.streams.acls import CLUSTER, TOPIC, Acl, plan
from dpstream.streams.faust_seam import create_acls, delete_acls, describe_acls
from dpstream.streams.kafka import Kafka, running
from dpstream.streams.topics import ensure_topics

from .kafka_helpers import KEY_HEX, ROOT, Worker, produce, read_all
from .reference import assert_same_as_embedded
from .workload import examples, models, queries

pytestmark = pytest.mark.kafka
STATE = Path(os.environ.get("DPSTREAM_SECURE_KAFKA_STATE", "/tmp/dpstream-kafka-9094"))


class Secured:
    """A secured broker's state directory: each user's client config and settings."""

    def __init__(self, state: Path):
        self.state = state

    def config(self, role: str) -> str:
        return str(self.state / "clients" / f"{role}.properties")

    def as_(self, role: str) -> Kafka:
        return Kafka.from_settings(None, self.config(role), environ={})

    def answers(self) -> bool:
        if not Path(self.config("admin")).exists():
            return False

        async def ask():
            async with running(self.as_("admin").admin(request_timeout_ms=5000)) as admin:
                await asyncio.wait_for(admin.list_topics(), 10)
        try:
            asyncio.run(ask())
            return True
        except Exception:
            return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The secured broker in $DPSTREAM_SECURE_KAFKA_STATE (default: the one
    ``KAFKA_SECURE=1 scripts/kafka.sh start`` runs) when it answers; else one started here
    with the same script on free ports, stopped afterwards. Skips when none can run (no
    Java), fails instead in CI (DPSTREAM_REQUIRE_KAFKA=1)."""
    found = Secured(STATE)
    if found.answers():
        yield found
        return
    state = tmp_path_factory.mktemp("secure-kafka")
    env = {**os.environ, "KAFKA_SECURE": "1", "DPSTREAM_KAFKA_STATE": str(state), "PYTHON": sys.executable,
           "KAFKA_PORT": str(_free_port()), "KAFKA_CONTROLLER_PORT": str(_free_port())}
    script = str(ROOT / "scripts" / "kafka.sh")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=600)
    try:
        own = Secured(state)
        if started.returncode != 0 or not own.answers():
            msg = f"could not start a secured Kafka broker: {started.stderr[-1500:]}"
            if os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1":
                pytest.fail(msg)
            pytest.skip(msg)
        yield own
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def secure(broker) -> Kafka:
    """The secured broker, as its admin."""
    return broker.as_("admin")


def dpstream(broker: Secured, role: str | None, *args: str, timeout: float = 120, env: dict | None = None):
    """One CLI command as ``role`` (its client config), from the repo's checkout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DPSTREAM_SECRET_KEY": KEY_HEX, **(env or {})}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    cmd = [sys.executable, "-m", "dpstream.streams.cli", *args]
    if role:
        cmd += ["--client-config", broker.config(role) if "/" not in role else role]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def one_line(done) -> str:
    """The single line a failed command wrote (no traceback, no aiokafka noise)."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return lines[0]


async def _grant(admin_kafka: Kafka, acls, remove=False) -> None:
    async with running(admin_kafka.admin()) as admin:
        errors = await (delete_acls if remove else create_acls)(admin, acls)
    assert errors == []


@pytest.fixture
def prefix(broker, secure) -> str:
    """A fresh topic prefix whose topics exist and whose ACLs (streams/acls.py) are applied
    through the CLI, as an admin would; removed afterwards."""
    p = f"s{uuid.uuid4().hex[:8]}-"
    done = dpstream(broker, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--apply")
    assert done.returncode == 0 and f"{len(plan(p, p + 'app'))} ACLs created" in done.stderr, done.stderr
    asyncio.run(ensure_topics(secure, prefix=p))
    yield p
    asyncio.run(_grant(secure, [a for a in plan(p, p + "app") if a.resource_type != CLUSTER], remove=True))


def test_the_acl_plan_grants_each_role_only_its_topics():
    acls = plan("p-", "p-app")
    may = {(a.principal, a.operation, a.resource) for a in acls if a.resource_type == TOPIC}
    private = ("p-examples", "p-model-events")
    for role in ("producer", "querier", "consumer", "auditor"):
        assert not any(p == f"User:{role}" and op == "Read" and r in private for p, op, r in may), role
    writers = {p for p, op, r in may if op == "Write" and r in ("p-predictions", "p-ledger", "p-releases")}
    assert writers == {"User:worker"}
    assert not any(op == "Write" and r == "p-models" for _, op, r in may)       # only the admin
    with pytest.raises(ValueError):
        plan("p-", "other-app")        # a worker's changelogs must carry the team's prefix


def test_apply_creates_exactly_the_plan_and_remove_keeps_only_the_shared_cluster_rights(broker, secure):
    from dpstream.streams.acls import OPERATIONS
    p = f"a{uuid.uuid4().hex[:8]}-"
    names = {v: k for k, v in OPERATIONS.items()}

    async def on_broker():
        async with running(secure.admin()) as admin:
            return {(rt, name, pattern, principal, names[op]) for rt, name, pattern, principal, op
                    in await describe_acls(admin) if name.startswith(p) or rt == CLUSTER}
    want = {(a.resource_type, a.resource, a.pattern, a.principal, a.operation) for a in plan(p, p + "app")}
    shared = {a for a in want if a[0] == CLUSTER}
    assert shared and dpstream(broker, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--apply").returncode == 0
    assert asyncio.run(on_broker()) == want
    done = dpstream(broker, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--remove")
    assert done.returncode == 0 and "keeping 3 cluster-wide ACLs" in done.stderr
    assert asyncio.run(on_broker()) == shared        # another team's worker still writes idempotently


def test_the_quick_start_runs_as_separate_least_privilege_principals(broker, secure, prefix, tmp_path):
    lines = (ROOT / "examples" / "card-fraud.examples.jsonl").read_text().splitlines()
    qlines = (ROOT / "examples" / "card-fraud.queries.jsonl").read_text().splitlines()
    (tmp_path / "ex.jsonl").write_text("\n".join(lines[:2000]) + "\n")
    (tmp_path / "q.jsonl").write_text("\n".join(qlines[:500]) + "\n")
    worker = Worker(secure.bootstrap, prefix, tmp_path, args=("--client-config", broker.config("worker"),
                                                              "--app-id", prefix + "app"))
    worker.start()
    try:
        for role, args in (("admin", ("models", "register", "examples/card-fraud.model.json")),
                           ("producer", ("produce", "--topic", "examples", "--file", str(tmp_path / "ex.jsonl"))),
                           ("querier", ("produce", "--topic", "queries", "--file", str(tmp_path / "q.jsonl")))):
            done = dpstream(broker, role, *args, "--prefix", prefix)
            assert done.returncode == 0, (role, done.stderr)
        done = dpstream(broker, "consumer", "consume", "--topic", "predictions", "--prefix", prefix,
                        "--from-beginning", "--max", "2500", "--timeout", "90")
        got = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
        assert done.returncode == 0 and len({p["seq"] for p in got}) == 2500, done.stderr[-2000:]
        done = dpstream(broker, "auditor", "consume", "--topic", "ledger", "--prefix", prefix,
                        "--from-beginning", "--timeout", "3")
        assert done.returncode == 0 and '"model_id": "card-fraud"' in done.stdout.replace('":"', '": "')
        done = dpstream(broker, "admin", "export", "--prefix", prefix, "--out", str(tmp_path / "audit"))
        assert done.returncode == 0, done.stderr
    finally:
        worker.stop()
    done = dpstream(broker, None, "replay", "--dir", str(tmp_path / "audit"))
    assert done.returncode == 0 and "OK: every release reproduced" in done.stdout, done.stdout[-2000:]
    assert "[ERROR]" not in worker.log.read_text()


CHANGELOG = "app-model-state-changelog"          # the worker's table changelog (app id P + "app")


@pytest.mark.parametrize("role,args,missing", [
    ("producer", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    ("producer", ("consume", "--topic", "model-events"), "Read topic {p}model-events"),
    ("producer", ("consume", "--topic", CHANGELOG), "Read topic {p}" + CHANGELOG),
    ("consumer", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    ("consumer", ("consume", "--topic", "model-events"), "Read topic {p}model-events"),
    ("querier", ("consume", "--topic", CHANGELOG), "Read topic {p}" + CHANGELOG),
    ("auditor", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    ("querier", ("produce", "--topic", "examples", "--file", "examples/card-fraud.examples.jsonl"),
     "Write topic {p}examples"),
    ("producer", ("models", "register", "examples/card-fraud.model.json"), "Write topic {p}models"),
    ("auditor", ("export", "--out", "{tmp}/audit"), "Read topic {p}"),
    ("producer", ("worker", "--data-dir", "{tmp}/w"), "Describe and Create the topics"),
])
def test_every_forbidden_operation_fails_in_one_line_naming_principal_and_right(
        broker, secure, prefix, tmp_path, role, args, missing):
    args = [a.format(tmp=tmp_path) for a in args]
    done = dpstream(broker, role, *args, "--prefix", prefix, "--timeout", "3") if args[0] in ("consume", "export") \
        else dpstream(broker, role, *args, "--prefix", prefix)
    line = one_line(done)
    assert f"not authorized: principal User:{role} may not {missing.format(p=prefix)}" in line, line
    assert "dpstream acls --apply" in line
    assert not (tmp_path / "audit").exists() or not any((tmp_path / "audit").iterdir())


@pytest.mark.parametrize("role", ["producer", "querier", "consumer", "auditor"])
def test_only_the_worker_may_write_the_ledger_and_the_outputs(broker, prefix, role):
    from aiokafka.errors import TopicAuthorizationFailedError

    async def write(topic):
        async with running(broker.as_(role).producer(acks="all")) as producer:
            await producer.send_and_wait(prefix + topic, b"{}")
    for topic in ("ledger", "predictions", "releases", "rejected", "model-events", "models"):
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(write(topic))


def _variant(broker, tmp_path, role: str, name: str, change) -> str:
    """A copy of ``role``'s client config, changed by ``change(dict)``, mode 0600."""
    props = dict(line.split("=", 1) for line in Path(broker.config(role)).read_text().splitlines() if "=" in line)
    change(props)
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize("name,change,says", [
    ("plaintext", lambda p: [p.pop(k) for k in list(p) if k != "bootstrap.servers"],
     "a plaintext client on a TLS listener"),
    ("wrong-password", lambda p: p.update({"sasl.password": "not-the-password"}),
     "refused the login of User:consumer"),
    ("wrong-mechanism", lambda p: p.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "x"}),
     "refused the login of User:consumer"),
    ("no-ca", lambda p: p.pop("ssl.ca.location"), "which this machine's CA store does not hold"),
])
def test_a_client_that_cannot_prove_itself_is_refused_with_a_line_that_says_why(
        broker, tmp_path, name, change, says):
    path = _variant(broker, tmp_path, "consumer", name, change)
    t0 = time.monotonic()
    line = one_line(dpstream(broker, path, "consume", "--topic", "predictions", "--timeout", "2", timeout=180))
    assert says in line, line
    assert "not-the-password" not in line and "password=" not in line
    assert time.monotonic() - t0 < 120


def test_a_client_config_with_a_password_others_can_read_is_refused(broker, tmp_path):
    path = _variant(broker, tmp_path, "consumer", "readable", lambda p: None)
    Path(path).chmod(0o644)
    line = one_line(dpstream(broker, path, "consume", "--topic", "predictions", "--timeout", "2"))
    assert f"chmod 600 {path}" in line and "sasl.password" not in line


def test_an_acl_revoked_and_restored_while_records_flow_loses_and_changes_nothing(broker, secure, prefix, tmp_path):
    """The worker loses its right to write predictions after the models arrived: it keeps
    running, says which right is missing, and once the right is back its outputs equal
    the embedded runtime's, event for event (nothing lost, nothing doubled)."""
    producer, consumer = broker.as_("producer"), broker.as_("consumer")
    write = [Acl("User:worker", "Write", TOPIC, prefix + "predictions")]
    worker = Worker(secure.bootstrap, prefix, tmp_path, args=("--client-config", broker.config("worker"),
                                                              "--app-id", prefix + "app"))
    worker.start()
    try:
        asyncio.run(produce(secure, prefix + "models", models()))
        asyncio.run(read_all(secure, prefix + "model-events", until=len(models()), timeout=60))
        asyncio.run(_grant(secure, write, remove=True))
        asyncio.run(produce(producer, prefix + "examples", examples()))
        deadline = time.time() + 90
        while f"may not Write topic {prefix}predictions" not in worker.log.read_text():
            assert time.time() < deadline, worker.log.read_text()[-3000:]
            assert worker.proc.poll() is None, worker.log.read_text()[-3000:]
            time.sleep(1)
        assert asyncio.run(read_all(secure, prefix + "predictions", idle=2)) == []
        asyncio.run(_grant(secure, write))
        asyncio.run(produce(broker.as_("querier"), prefix + "queries", queries()))
        total = len(examples()) + len(queries())
        preds = asyncio.run(read_all(consumer, prefix + "predictions", until=total, timeout=240))
        ledger = asyncio.run(read_all(secure, prefix + "ledger", idle=3))
        releases = asyncio.run(read_all(secure, prefix + "releases", idle=2))
        assert worker.proc.poll() is None
    finally:
        worker.stop()
    assert_same_as_embedded(preds, ledger, releases)
