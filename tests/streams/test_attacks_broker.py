"""Issue 41, the broker's side, as attacks that must now be refused: each test does what
an attacker did against the secured dev broker (``KAFKA_SECURE=1 scripts/kafka.sh
start``) and says in its docstring what that did before. Another local OS user is
``nobody`` (``runuser -u nobody``, with Kafka's own Java client: tests/streams/attacker/);
another tenant is a prefix with its own users. One secured broker serves the whole
session (conftest ``secured``); threat model: docs/security.md."""
import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from dpstream.streams.tools.acls import CLUSTER, plan, worker_topics
from dpstream.streams.worker.faust_seam import describe_acls
from dpstream.streams.worker.kafka import Kafka, running
from dpstream.streams.worker.topic_admin import ensure_topics

from .secure_broker import SCRIPT, Attacker, CommandLines, dpstream, free_port, libs

kafka = pytest.mark.kafka


def one_line(done) -> str:
    """The single line a failed command wrote (no traceback)."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1, (done.returncode, done.stderr[-3000:])
    return lines[0]


@pytest.fixture(scope="module")
def attacker(secured):
    kit = Attacker(libs())
    shutil.copy(secured.state / "tls" / "ca.pem", kit.kit / "ca.pem")   # the CA is public
    (kit.kit / "ca.pem").chmod(0o644)
    yield kit
    kit.close()


def acls_on(secured) -> set:
    async def ask():
        async with running(secured.as_("admin").admin()) as admin:
            return set(await describe_acls(admin))
    return asyncio.run(ask())


# ------------------------------------------------------------------ item 1
@kafka
def test_another_local_user_cannot_administer_the_cluster_through_the_controller_or_internal_port(
        secured, attacker):
    """Before: the CONTROLLER listener was PLAINTEXT and User:ANONYMOUS a super user. As
    ``nobody``, with no secret, requests to the controller port created a SCRAM user,
    granted it ALL on both tenants and set retention.ms=1 on a ledger. Now the controller
    and the internal listener want a client certificate signed by the broker's CA (whose
    key is thrown away): without one, whatever the protocol, the handshake is refused."""
    ca = f"ssl.truststore.location={attacker.kit}/ca.pem"
    controller = f"bootstrap.controllers=127.0.0.1:{secured.controller_port}"
    internal = f"bootstrap.servers=127.0.0.1:{secured.internal_port}"
    before = acls_on(secured)
    tries = {
        "plaintext controller": attacker.admin("grant", controller),
        "TLS controller, no certificate": attacker.admin("grant", controller, "security.protocol=SSL",
                                                         "ssl.truststore.type=PEM", ca),
        "TLS internal listener, no certificate": attacker.admin("scram", "evil", internal, "security.protocol=SSL",
                                                                "ssl.truststore.type=PEM", ca),
    }
    for what, line in tries.items():
        assert line.startswith("REFUSED"), (what, line)
    assert "SslAuthenticationException" in tries["TLS controller, no certificate"], tries
    assert "SslAuthenticationException" in tries["TLS internal listener, no certificate"], tries
    assert acls_on(secured) == before
    assert not any(p == "User:ANONYMOUS" for _, _, _, p, _ in before)
    props = (secured.state / "server.properties").read_text()
    assert "ANONYMOUS" not in props and "CONTROLLER:SSL" in props
    assert "listener.name.controller.ssl.client.auth=required" in props
    # the broker recorded the refused handshakes
    assert "Failed authentication with /127.0.0.1" in (secured.state / "server.log").read_text()


# ------------------------------------------------------------------ item 3
@kafka
def test_no_password_is_on_any_command_line_while_the_secured_broker_starts_or_rotates(secured):
    """Before: every SCRAM password, admin's included, was an argument of ``kafka-storage
    format --add-scram`` while the broker was formatted (and the compose broker's at every
    start): any local user saw them with ``ps``. Now the users are set after the start
    through the admin API from the 0600 files; every command line seen while the session's
    broker started (read from /proc/*/cmdline every 20 ms) and while a password is
    rotated is free of every password."""
    if secured.started is None:
        pytest.skip("the session reuses a running secured broker ($DPSTREAM_SECURE_KAFKA_STATE)")
    user = f"ps{uuid.uuid4().hex[:6]}"
    with CommandLines() as rotating:
        assert secured.script("users", user).returncode == 0
        assert secured.script("rotate", user).returncode == 0
    seen = secured.started.seen | rotating.seen
    assert any("ScramUsers" in line for line in secured.started.seen)      # it watched the user setup
    assert any("kafka.Kafka" in line for line in seen)
    for password in secured.passwords():
        assert len(password) == 32
        assert not [line for line in seen if password in line]


# ------------------------------------------------------------------ item 4
@kafka
def test_a_state_directory_another_user_made_or_can_open_is_refused(tmp_path):
    """Before: if another user owned $DPSTREAM_KAFKA_STATE (default under /tmp), kafka.sh
    used its TLS key and passwords, and its owner then read the log segments (0644). Now a
    state directory that is not the caller's, not 0700, or a link is refused in one line
    before anything is written or started (and so is ``stop`` on one: its pid file could
    name any process)."""
    squat = Path(f"/tmp/dpstream-squat-{uuid.uuid4().hex[:8]}")
    subprocess.run(["runuser", "-u", "nobody", "--", "mkdir", "-m", "777", str(squat)], check=True)
    mine_open = tmp_path / "open"
    mine_open.mkdir(mode=0o755)
    mine_open.chmod(0o755)
    good = tmp_path / "good"
    good.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(good)
    try:
        for state in (squat, mine_open, link):
            env = {**os.environ, "DPSTREAM_KAFKA_STATE": str(state), "KAFKA_PORT": str(free_port()),
                   "KAFKA_CONTROLLER_PORT": str(free_port())}
            for command in ("start", "stop"):
                done = subprocess.run([SCRIPT, command], env=env, capture_output=True, text=True, timeout=60)
                line = one_line(done)
                assert f"refusing the state directory {state}" in line and "mode 0700" in line, line
            assert not (Path(state) / "kafka.pid").exists() and not (Path(state) / "server.properties").exists()
    finally:
        subprocess.run(["rm", "-rf", str(squat)])
    # the default is under the caller's home, not /tmp
    env = {k: v for k, v in os.environ.items()
           if k not in ("DPSTREAM_KAFKA_STATE", "XDG_STATE_HOME", "KAFKA_PORT", "KAFKA_SECURE")}
    done = subprocess.run([SCRIPT, "status"], env={**env, "HOME": str(tmp_path)}, capture_output=True, text=True)
    assert f"state in {tmp_path}/.local/state/dpstream/kafka-9092" in done.stdout, done.stdout


@kafka
def test_the_brokers_files_are_readable_by_no_other_user(secured):
    """Before: the log segments were 0644 (any user who could enter the directory read
    every topic, the private ones included). Now everything kafka.sh and the broker write
    is made under umask 077: nothing in the state directory but the public CA is readable
    by group or others, and ``nobody`` cannot read a segment."""
    asyncio.run(ensure_topics(secured.as_("admin"), prefix=f"m{uuid.uuid4().hex[:6]}-"))
    open_files = [p for p in secured.state.rglob("*") if p.stat().st_mode & 0o077 and p.name != "ca.pem"]
    assert open_files == []
    segment = next(secured.state.glob("data/*/00000000000000000000.log"))
    done = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(segment)], capture_output=True, text=True)
    assert done.returncode != 0 and "Permission denied" in done.stderr


# ------------------------------------------------------------------ item 5
@kafka
def test_a_rotated_or_deleted_password_is_refused_at_once(secured, tmp_path):
    """Before: PLAIN was enabled with static passwords in server.properties, so rotating or
    deleting a user's SCRAM credential left its old password valid over PLAIN. Now PLAIN
    is off; ``kafka.sh rotate`` gives the user a new password and the old one is refused
    (over SCRAM and over PLAIN), the new one accepted; ``kafka.sh remove`` revokes a user."""
    user = f"rot{uuid.uuid4().hex[:6]}"
    assert secured.script("users", user).returncode == 0
    old = tmp_path / "old.properties"
    old.write_text(Path(secured.config(user)).read_text())
    old.chmod(0o600)
    plain = tmp_path / "plain.properties"
    plain.write_text(old.read_text().replace("SCRAM-SHA-512", "PLAIN"))
    plain.chmod(0o600)

    def login(config) -> subprocess.CompletedProcess:
        return dpstream(secured, str(config), "consume", "--topic", "predictions", "--timeout", "1")
    assert "refused the login" not in login(old).stderr          # the right password logs in
    done = secured.script("rotate", user)
    assert done.returncode == 0 and "the old one is refused at its next login" in done.stdout, done.stderr
    assert "sessions logged in with it end within 60 s (connections.max.reauth.ms)" in done.stdout, done.stdout
    line = one_line(login(old))
    assert f"refused the login of User:{user}" in line, line
    assert login(plain).returncode != 0
    assert "refused the login" not in login(secured.config(user)).stderr
    assert "PLAIN" not in (secured.state / "server.properties").read_text()
    new = tmp_path / "new.properties"
    new.write_text(Path(secured.config(user)).read_text())
    new.chmod(0o600)
    done = secured.script("remove", user)
    assert done.returncode == 0 and "sessions logged in with it end within 60 s" in done.stdout, done.stderr
    assert f"refused the login of User:{user}" in one_line(login(new))


# ------------------------------------------------------------------ a revoked password's live sessions
def reauth_window(secured) -> float:
    """The broker's session lifetime in seconds (connections.max.reauth.ms); 60, the one
    rotate and remove promise, where it is not set."""
    found = re.search(r"^connections\.max\.reauth\.ms=(\d+)$", (secured.state / "server.properties").read_text(), re.M)
    return int(found.group(1)) / 1000 if found else 60.0


def read(secured, topics: list[str]) -> list[list[bytes]]:
    """Every record value of each topic, read as admin (all at once)."""
    async def values(topic):
        consumer = secured.as_("admin").consumer(topic, auto_offset_reset="earliest", enable_auto_commit=False,
                                                 group_id=None)
        out = []
        async with running(consumer):
            while batch := await consumer.getmany(timeout_ms=3000):
                out += [r.value for records in batch.values() for r in records]
        return out

    async def all_of():
        return await asyncio.gather(*(values(topic) for topic in topics))
    return asyncio.run(all_of())


@kafka
@pytest.mark.slow
def test_a_revoked_password_ends_the_sessions_logged_in_with_it_within_the_window(secured):
    """Before: connections.max.reauth.ms was not set, so a SASL session lasted as long as
    its connection: a producer logged in before ``kafka.sh rotate`` (or ``remove``) went on
    writing for as long as it ran (122 s, until it was stopped, in one run), while rotate
    said "the old one is refused". Now every session ends within the broker's window (60
    s) of its login: of two users writing while one's password is rotated and the other
    is removed, no record sent later than the window after the revocation lands, and
    every later write is refused; a user whose password stands writes on across its
    sessions' end (aiokafka does not re-authenticate: it logs in again on a new
    connection)."""
    window = reauth_window(secured)
    t = secured.tenant(f"re{uuid.uuid4().hex[:6]}-")
    asyncio.run(ensure_topics(secured.as_("admin"), prefix=t.prefix))
    writers = {"rotated": ("producer", "examples"), "removed": ("worker", "predictions"), "kept": ("querier", "queries")}
    sent = {name: [] for name in writers}           # (send time, delivered) of every attempt

    async def write(name, producer, topic, until):
        i = 0
        while time.time() < until[0]:
            at = time.time()
            try:
                await asyncio.wait_for(producer.send_and_wait(topic, json.dumps({"i": i, "t": at}).encode()), 4)
                sent[name].append((at, True))
            except Exception:                       # refused (aiokafka retries a refused login until the timeout)
                sent[name].append((at, False))
            i += 1
            await asyncio.sleep(0.3)

    async def attack():
        producers = {name: t.as_(role).producer(acks="all", enable_idempotence=True, request_timeout_ms=4000)
                     for name, (role, _) in writers.items()}
        for producer in producers.values():
            await producer.start()
        logged_in = time.time()
        until = [logged_in + 3 * window]            # set to its end once the passwords are revoked
        tasks = [asyncio.create_task(write(name, producers[name], t.prefix + topic, until))
                 for name, (_, topic) in writers.items()]
        await asyncio.sleep(2)
        for done in await asyncio.gather(asyncio.to_thread(secured.script, "rotate", t.user("producer")),
                                         asyncio.to_thread(secured.script, "remove", t.user("worker"))):
            assert done.returncode == 0, done.stderr
        revoked = time.time()
        until[0] = revoked + window + 8
        await asyncio.gather(*tasks)
        # a revoked producer's batches can never be sent: its stop is cut short
        await asyncio.gather(*(asyncio.wait_for(p.stop(), 5) for p in producers.values()), return_exceptions=True)
        return logged_in, revoked
    logged_in, revoked = asyncio.run(attack())
    landed = dict(zip(writers, read(secured, [t.prefix + topic for _, topic in writers.values()])))
    for name in ("rotated", "removed"):
        last = max(json.loads(v)["t"] for v in landed[name])
        assert last < revoked + window, (name, f"a record sent {last - revoked:.1f} s after the revocation landed")
        late = [ok for at, ok in sent[name] if at > revoked + window]
        assert late and not any(late), (name, f"{sum(late)} of {len(late)} writes after the window landed")
    assert max(json.loads(v)["t"] for v in landed["kept"]) > logged_in + window + 2    # past its first session
    assert all(ok for _, ok in sent["kept"]), [at - logged_in for at, ok in sent["kept"] if not ok]


# ------------------------------------------------------------------ item 10
@kafka
def test_the_broker_logs_refused_logins_and_denied_operations(secured, tmp_path):
    """Before: SLF4J 1.7 (Kafka 4.0.1's API) with the SLF4J 2 binding: the broker wrote no
    log at all, so no refused login or denied operation was recorded. Now server.log has
    the refused login and authorizer.log the denied operation, naming the principal."""
    t = secured.tenant(f"l{uuid.uuid4().hex[:6]}-")
    asyncio.run(ensure_topics(secured.as_("admin"), prefix=t.prefix))
    bad = tmp_path / "bad.properties"
    bad.write_text(Path(t.config("consumer")).read_text().replace("sasl.password=", "sasl.password=x"))
    bad.chmod(0o600)
    dpstream(secured, str(bad), "consume", "--topic", "predictions", "--prefix", t.prefix, "--timeout", "1")
    dpstream(secured, t.config("producer"), "consume", "--topic", "examples", "--prefix", t.prefix, "--timeout", "1")
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in (secured.state / "server.log").read_text()
    denied = (secured.state / "authorizer.log").read_text()
    assert f"Principal = User:{t.user('producer')} is Denied operation = READ" in denied
    assert f"Topic:LITERAL:{t.prefix}examples" in denied
    assert "SLF4J" not in (secured.state / "stdout.log").read_text()


@kafka
def test_a_failed_start_shows_the_brokers_own_error_and_a_taken_port_is_not_ready(secured, tmp_path):
    """Before: a failed start printed three SLF4J lines and no reason; and ``kafka.sh
    start`` on a port another broker held said "ready" (it asked the other broker; its own
    JVM had died). Now a taken port is refused in one line before anything starts, and a
    broker that dies while starting is reported with its own last error."""
    state = tmp_path / "taken"
    env = {**os.environ, "DPSTREAM_KAFKA_STATE": str(state), "KAFKA_PORT": str(secured.port),
           "KAFKA_CONTROLLER_PORT": str(free_port())}
    line = one_line(subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=120))
    assert f"127.0.0.1:{secured.port} is taken by another process" in line, line
    state = tmp_path / "broken"
    (state / "data").mkdir(parents=True, mode=0o700)
    state.chmod(0o700)
    (state / "data" / "meta.properties").write_text("version=1\nnode.id=7\ncluster.id=AAAAAAAAAAAAAAAAAAAAAA\n")
    env = {**env, "DPSTREAM_KAFKA_STATE": str(state), "KAFKA_PORT": str(free_port())}
    try:
        line = one_line(subprocess.run([SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=300))
    finally:
        subprocess.run([SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
    assert "the broker exited during start: " in line and "SLF4J" not in line, line
    assert "node" in line.lower(), line          # Kafka's own words about the stored node id


# ------------------------------------------------------------------ item 2
@kafka
def test_a_tenants_worker_cannot_reach_another_tenant_whose_names_start_like_its_own(secured):
    """Before: the worker had PREFIXED rights on its app id; the default tenant's worker
    (prefix "", app id ``dpstream``) read ``dpstream-prod-examples``, registered a model
    there and committed offset 1,000,000 to group ``dpstream-prod-dpstream`` (that
    tenant's worker would have skipped every example); ``--prefix a- --app-id a-`` gave
    the worker Write on a-models, a-examples, a-queries. Now every right names one
    resource literally, an app id that is not the prefix plus a name is refused, and so is
    a plan whose group or topics another tenant's principal already holds."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
    secured.tenant("")
    prod = secured.tenant("dpstream-prod-")
    asyncio.run(ensure_topics(secured.as_("admin"), prefix="dpstream-prod-"))
    line = one_line(dpstream(secured, "worker", "consume", "--topic", "dpstream-prod-examples", "--timeout", "2"))
    assert "principal User:worker may not Read topic dpstream-prod-examples" in line, line

    async def commit():
        worker = secured.as_("worker")
        consumer = AIOKafkaConsumer(group_id=prod.app_id, enable_auto_commit=False, **worker.client_args())
        await consumer.start()
        try:
            tp = TopicPartition("dpstream-prod-examples", 0)
            consumer.assign([tp])
            await consumer.commit({tp: 1_000_000})
        finally:
            await consumer.stop()
    with pytest.raises((GroupAuthorizationFailedError, TopicAuthorizationFailedError)):
        asyncio.run(commit())
    line = one_line(dpstream(secured, "admin", "acls", "--app-id", prod.app_id, "--apply"))
    assert "refused, nothing applied: User:dpstream-prod-worker already holds" in line, line
    assert f"on group {prod.app_id}, which covers this plan's group {prod.app_id}" in line, line
    line = one_line(dpstream(secured, None, "acls", "--prefix", "a-", "--app-id", "a-"))
    assert "--app-id 'a-': the worker's app id must start with the topic prefix 'a-' and go on with a name" in line, line
    worker_writes = {a.resource for a in plan("a-", "a-x") if a.operation == "Write" and a.principal == "User:a-worker"}
    assert not worker_writes & {"a-models", "a-examples", "a-queries"}
    assert all(a.pattern == 3 for a in plan("", "dpstream"))             # LITERAL only
    line = one_line(dpstream(secured, None, "acls", "--user", "worker=*"))   # Kafka's wildcard principal
    assert "--user worker='*'" in line, line


def test_the_workers_literal_rights_are_the_names_faust_actually_uses():
    """The plan's internal topic names (streams/tools/acls.py ``worker_topics``) are the
    changelogs and the leader assignor topic of a real WorkerApp with that app id, and its
    consumer group is the app id: a faust upgrade that renamed them would fail here, not
    leave the worker without a right on a secured broker."""
    from dpstream.mechanisms.randomness import KeyedRandomness
    from dpstream.streams.worker.app import WorkerApp
    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"acl-contract-key-000000000000000"),
                  app_id="t-app", prefix="t-")
    used = set(w.state.topics()) | {w.app._leader_assignor._leader_topic_name}
    assert used >= {topic.get_topic_name() for topic in w.changelogs.values()}
    assert used == set(worker_topics("t-app"))
    assert w.app.conf.id == "t-app"
    groups = {a.resource for a in plan("t-", "t-app") if a.resource_type == 3}
    assert groups == {"t-app"}


# ------------------------------------------------------------------ item 13
@kafka
def test_acls_apply_is_all_or_nothing_remove_counts_what_matched_and_each_prefix_has_its_users(secured):
    """Before: ``acls --apply --app-id ""`` stopped half-way (26 of 33 applied, then an
    error); ``--remove`` counted ACLs that matched nothing as removed; without ``--user``
    every prefix got the same principals. Now the plan is checked before anything is
    applied, ``--remove`` counts what it found, and each prefix's principals are its own."""
    before = acls_on(secured)
    line = one_line(dpstream(secured, "admin", "acls", "--app-id", "", "--apply"))
    assert "--app-id ''" in line, line
    assert acls_on(secured) == before
    p = f"r{uuid.uuid4().hex[:6]}-"
    done = dpstream(secured, "admin", "acls", "--prefix", p, "--apply")
    total = len(plan(p))
    assert done.returncode == 0 and f"{total} ACLs created for topic prefix '{p}' (0 were already there)" in done.stderr
    assert {pr for _, _, _, pr, _ in acls_on(secured) - before} == {f"User:{p}{r}" for r in
                                                                      ("worker", "producer", "querier", "consumer", "auditor")}
    again = dpstream(secured, "admin", "acls", "--prefix", p, "--apply")
    assert f"0 ACLs created for topic prefix '{p}' ({total} were already there)" in again.stderr
    kept = len([a for a in plan(p) if a.resource_type == CLUSTER])
    done = dpstream(secured, "admin", "acls", "--prefix", p, "--remove")
    assert f"{total - kept} ACLs removed" in done.stderr, done.stderr
    done = dpstream(secured, "admin", "acls", "--prefix", p, "--remove")
    assert f"0 ACLs removed for topic prefix '{p}' ({total - kept} of the plan were not there)" in done.stderr
