"""On a broker with TLS, SASL/SCRAM and ACLs (``KAFKA_SECURE=1 scripts/kafka.sh start``,
issue 15; the session's one, conftest ``secured``): the README's secured quick start,
verbatim; every forbidden operation fails with one line naming the principal and the
missing right; a client without TLS, without the CA or with a wrong password is refused
with a line that says so; an ACL revoked and restored while records flow loses and
changes nothing. Each test's tenant is a prefix with its own users (issue 41)."""
import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from dpstream.streams.tools.acls import CLUSTER, TOPIC, Acl, plan
from dpstream.streams.worker.faust_seam import create_acls, delete_acls, describe_acls
from dpstream.streams.worker.kafka import Kafka, running
from dpstream.streams.worker.topic_admin import ensure_topics

from .kafka_helpers import KEY_HEX, ROOT, Worker, produce, read_all
from .reference import assert_same_as_embedded
from .secure_broker import Tenant, dpstream
from .workload import examples, models, queries

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def secure(secured) -> Kafka:
    """The secured broker, as its admin."""
    return secured.as_("admin")


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


def _fresh_tenant(secured, secure):
    """A topic prefix with its own five users, its ACLs (streams/tools/acls.py) applied
    through the CLI as an admin would, and its topics; its ACLs removed after."""
    p = f"s{uuid.uuid4().hex[:8]}-"
    t = secured.tenant(p, app_id=p + "app")
    asyncio.run(ensure_topics(secure, prefix=p))
    yield t
    dpstream(secured, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--remove")


@pytest.fixture(scope="module")
def tenant(secured, secure) -> Tenant:
    """A fresh tenant for this module (``_fresh_tenant``)."""
    yield from _fresh_tenant(secured, secure)


@pytest.fixture
def audit_tenant(secured, secure) -> Tenant:
    """A tenant whose outputs no worker writes (the audit test publishes its own)."""
    yield from _fresh_tenant(secured, secure)


def test_the_acl_plan_grants_each_role_only_its_topics():
    acls = plan("p-", "p-app")
    may = {(a.principal, a.operation, a.resource) for a in acls if a.resource_type == TOPIC}
    private = ("p-examples", "p-model-events")
    for role in ("producer", "querier", "consumer", "auditor"):
        assert not any(p == f"User:p-{role}" and op == "Read" and r in private for p, op, r in may), role
    writers = {p for p, op, r in may if op == "Write" and r in ("p-predictions", "p-ledger", "p-releases")}
    assert writers == {"User:p-worker"}
    assert not any(op == "Write" and r == "p-models" for _, op, r in may)       # only the admin
    readers = {p for p, op, r in may if op == "Read" and r == "p-models"}       # public config
    assert readers == {f"User:p-{role}" for role in ("worker", "producer", "querier", "auditor")}
    with pytest.raises(ValueError):
        plan("p-", "other-app")        # a worker's changelogs must carry the team's prefix


def test_apply_creates_exactly_the_plan_and_remove_keeps_only_the_shared_cluster_rights(secured, secure):
    from dpstream.streams.tools.acls import OPERATIONS
    p = f"a{uuid.uuid4().hex[:8]}-"
    names = {v: k for k, v in OPERATIONS.items()}

    async def on_broker():
        async with running(secure.admin()) as admin:
            return {(rt, name, pattern, principal, names[op]) for rt, name, pattern, principal, op
                    in await describe_acls(admin) if principal.startswith(f"User:{p}")}
    want = {(a.resource_type, a.resource, a.pattern, a.principal, a.operation) for a in plan(p, p + "app")}
    shared = {a for a in want if a[0] == CLUSTER}
    assert shared and dpstream(secured, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--apply").returncode == 0
    assert asyncio.run(on_broker()) == want
    done = dpstream(secured, "admin", "acls", "--prefix", p, "--app-id", p + "app", "--remove")
    assert done.returncode == 0 and "keeping 3 cluster-wide ACLs" in done.stderr
    assert asyncio.run(on_broker()) == shared        # another team's worker still writes idempotently


def secured_quick_start_block() -> str:
    """The README's secured quick start (tests/docs/blocks.py reads the README's blocks)."""
    from tests.docs.blocks import block_under
    return block_under("README.md", "Secure deployment", "bash").text


def test_the_readmes_secured_quick_start_runs_verbatim(secured, tmp_path):
    """The README's secured quick start block, run as it stands against the session's
    secured broker (its ``scripts/kafka.sh start`` finds it running: the environment names
    its state directory and ports, as a user's shell would after starting it), with the
    key the quick start above exported. Every principal is a separate user; the audit
    export replays."""
    if not (ROOT / ".venv" / "bin" / "dpstream").exists():
        pytest.skip("the quick start runs the README's .venv (install as the README says)")
    for name in (".venv", "examples", "scripts"):      # the repo's files; audit/ lands in tmp
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in secured.env.items() if k != "KAFKA_SECURE"}
    env["DPSTREAM_SECRET_KEY"] = KEY_HEX
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + secured_quick_start_block()], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "already running" in done.stdout
    last = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert last and last[-1]["model_id"] == "card-fraud", done.stdout[-2000:]
    assert "OK: every release reproduced" in done.stdout, done.stdout[-2000:]
    assert "dpstream worker ready" in done.stderr


def test_the_docs_second_tenant_block_runs_verbatim(secured, tmp_path):
    """docs/deployment.md's users, plan and rotation for a second tenant, on the session's
    secured broker as its operator's shell would run them; the rotated user's old
    password is refused, its new one works."""
    from tests.docs.blocks import block_under
    block = block_under("docs/deployment.md", "The secured quick start", "bash")
    if not (ROOT / ".venv" / "bin" / "dpstream").exists():
        pytest.skip("the docs run the README's .venv (install as the README says)")
    for name in (".venv", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in secured.env.items() if k != "KAFKA_SECURE"}
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + block.text], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ALLOW User:blue-producer" in done.stdout and "topic blue-examples" in done.stdout
    assert "new password for blue-producer" in done.stdout and "the old one is refused" in done.stdout
    # the new password logs in (no ACLs were applied: the broker then refuses the read, not the login)
    line = one_line(dpstream(secured, secured.config("blue-producer"), "consume", "--topic", "models",
                             "--prefix", "blue-", "--timeout", "3"))
    assert "refused the login" not in line and "not authorized: principal User:blue-producer" in line, line


CHANGELOG = "app-model-state-changelog"          # the worker's table changelog (app id P + "app")


@pytest.mark.parametrize("role,args,missing", [
    ("producer", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    ("producer", ("consume", "--topic", "model-events"), "Read topic {p}model-events"),
    ("producer", ("consume", "--topic", CHANGELOG), "Read topic {p}" + CHANGELOG),
    ("consumer", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    ("consumer", ("consume", "--topic", "model-events"), "Read topic {p}model-events"),
    ("querier", ("consume", "--topic", CHANGELOG), "Read topic {p}" + CHANGELOG),
    ("auditor", ("consume", "--topic", "examples"), "Read topic {p}examples"),
    # --no-check: the querier may read the registrations, and produce refuses records of an
    # unregistered model before it writes (none is registered in this tenant)
    ("querier", ("produce", "--topic", "examples", "--file", "examples/card-fraud.examples.jsonl", "--no-check"),
     "Write topic {p}examples"),
    ("producer", ("models", "register", "examples/card-fraud.model.json"), "Write topic {p}models"),
    ("auditor", ("export", "--out", "{tmp}/audit"), "Read topic {p}"),
    ("producer", ("worker", "--data-dir", "{tmp}/w"), "Describe and Create the topics"),
])
def test_every_forbidden_operation_fails_in_one_line_naming_principal_and_right(
        secured, tenant, tmp_path, role, args, missing):
    args = [a.format(tmp=tmp_path) for a in args]
    prefix, user = tenant.prefix, tenant.config(role)
    done = dpstream(secured, user, *args, "--prefix", prefix, "--timeout", "3") if args[0] in ("consume", "export") \
        else dpstream(secured, user, *args, "--prefix", prefix)
    line = one_line(done)
    assert f"not authorized: principal User:{prefix}{role} may not {missing.format(p=prefix)}" in line, line
    assert "dpstream acls --apply" in line
    assert not (tmp_path / "audit").exists() or not any((tmp_path / "audit").iterdir())


@pytest.mark.parametrize("role", ["producer", "querier", "consumer", "auditor"])
def test_only_the_worker_may_write_the_ledger_and_the_outputs(tenant, role):
    from aiokafka.errors import TopicAuthorizationFailedError

    async def write(topic):
        async with running(tenant.as_(role).producer(acks="all")) as producer:
            await producer.send_and_wait(tenant.prefix + topic, b"{}")
    for topic in ("ledger", "predictions", "releases", "rejected", "model-events", "models"):
        with pytest.raises(TopicAuthorizationFailedError):
            asyncio.run(write(topic))


def _variant(tenant, tmp_path, role: str, name: str, change) -> str:
    """A copy of ``role``'s client config, changed by ``change(dict)``, mode 0600."""
    props = dict(line.split("=", 1) for line in Path(tenant.config(role)).read_text().splitlines() if "=" in line)
    change(props)
    path = tmp_path / f"{name}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize("name,change,says", [
    ("plaintext", lambda p: [p.pop(k) for k in list(p) if k != "bootstrap.servers"],
     "a plaintext client on a TLS listener"),
    ("wrong-password", lambda p: p.update({"sasl.password": "not-the-password"}),
     "refused the login of User:{p}consumer"),
    ("wrong-mechanism", lambda p: p.update({"sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "x"}),
     "refused the login of User:{p}consumer"),
    ("no-ca", lambda p: p.pop("ssl.ca.location"), "which this machine's CA store does not hold"),
])
def test_a_client_that_cannot_prove_itself_is_refused_with_a_line_that_says_why(
        secured, tenant, tmp_path, name, change, says):
    path = _variant(tenant, tmp_path, "consumer", name, change)
    t0 = time.monotonic()
    line = one_line(dpstream(secured, path, "consume", "--topic", "predictions", "--timeout", "2", timeout=180))
    assert says.format(p=tenant.prefix) in line, line
    assert "not-the-password" not in line and "password=" not in line
    assert time.monotonic() - t0 < 120


def test_a_client_config_with_a_password_others_can_read_is_refused(secured, tenant, tmp_path):
    path = _variant(tenant, tmp_path, "consumer", "readable", lambda p: None)
    Path(path).chmod(0o644)
    line = one_line(dpstream(secured, path, "consume", "--topic", "predictions", "--timeout", "2"))
    assert f"chmod 600 {path}" in line and "sasl.password" not in line


def test_an_acl_revoked_and_restored_while_records_flow_loses_and_changes_nothing(secure, tenant, tmp_path):
    """The worker loses its right to write predictions after the models arrived: it keeps
    running, says which right is missing, and once the right is back its outputs equal
    the embedded runtime's, event for event (nothing lost, nothing doubled)."""
    prefix = tenant.prefix
    producer, consumer = tenant.as_("producer"), tenant.as_("consumer")
    write = [Acl(f"User:{tenant.user('worker')}", "Write", TOPIC, prefix + "predictions")]
    worker = Worker(secure.bootstrap, prefix, tmp_path, args=("--client-config", tenant.config("worker"),
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
        asyncio.run(produce(tenant.as_("querier"), prefix + "queries", queries()))
        total = len(examples()) + len(queries())
        preds = asyncio.run(read_all(consumer, prefix + "predictions", until=total, timeout=240))
        ledger = asyncio.run(read_all(secure, prefix + "ledger", idle=3))
        releases = asyncio.run(read_all(secure, prefix + "releases", idle=2))
        assert worker.proc.poll() is None
    finally:
        worker.stop()
    assert_same_as_embedded(preds, ledger, releases)


def test_an_auditor_checks_the_public_record_without_reading_the_private_log(secure, secured, audit_tenant, tmp_path):
    """The auditor (Read on the public topics only) runs ``replay --no-key`` from Kafka
    and on an export it makes itself (``export --public``); a forged ledger charge it then
    finds. Before (issue 41): both read model-events first, which the auditor may not
    read, so the auditor could verify nothing; plain ``export`` said only that the right
    was missing. The outputs are an embedded run's, written by the admin (no worker: the
    check reads only what is published)."""
    from dpstream.mechanisms.randomness import KeyedRandomness
    from dpstream.streams.tools.embedded import EmbeddedRuntime
    rt = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
    config = next(m for m in models() if m["params"]["kind"] == "continual_winnow")
    asyncio.run(rt.feed_all([("models", config)] + [("examples", e) for e in examples()
                                                    if e["model_id"] == config["model_id"]][:120]
                            + [("queries", q) for q in queries() if q["model_id"] == config["model_id"]][:20]))
    tenant = audit_tenant
    p = tenant.prefix
    for topic, values in rt.outputs.items():
        asyncio.run(produce(secure, p + topic, values))
    auditor = tenant.config("auditor")
    done = dpstream(secured, auditor, "replay", "--no-key", "--prefix", p, "--timeout", "3")
    assert done.returncode == 0 and done.stdout.startswith("OK: "), done.stdout + done.stderr[-2000:]
    out = tmp_path / "public"
    done = dpstream(secured, auditor, "export", "--public", "--out", str(out), "--prefix", p, "--timeout", "3")
    assert done.returncode == 0 and "public topics only" in done.stdout, done.stderr[-2000:]
    assert not (out / "model-events.jsonl").exists()
    assert dpstream(secured, None, "replay", "--no-key", "--dir", str(out)).returncode == 0
    refused = one_line(dpstream(secured, auditor, "export", "--out", str(tmp_path / "all"), "--prefix", p,
                                "--timeout", "3"))
    assert f"may not Read topic {p}model-events" in refused and "--public" in refused, refused
    forged = dict(rt.outputs["ledger"][0], epsilon=0.01, spent_epsilon=0.01)
    ledger = out / "ledger.jsonl"
    ledger.write_text(json.dumps(forged) + "\n" + ledger.read_text())      # before the honest one
    done = dpstream(secured, None, "replay", "--no-key", "--dir", str(out))
    assert done.returncode == 1 and "published twice, differently" in done.stdout, done.stdout
