"""Attacks on dpstream's clients (issue 41, items 6, 7, 8, 9, 11, 12, 14, 15): each test
is an attack, or a careless client, that must now be refused. Its docstring says what
happened before. Most need no broker (a TLS server or a silent listener stands in for
one); those that do are marked ``kafka``. docs/security-clients.md states the rules."""
from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.acls import plan
from dpstream.streams.cli.commands import main
from dpstream.streams.worker.kafka import ClientConfigError, Kafka

from .kafka_helpers import KEY_HEX, ROOT, Worker, create_topic, per_model, produce, read_all
from .workload import examples, models, queries

NOBODY = 65534


def props(tmp_path: Path, text: str, name: str = "client.properties") -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def one_line(capsys) -> str:
    """The single stderr line of a failed command (no traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class Listener:
    """A TCP port that accepts and records what a client sends: a broker stand-in that
    shows whether anything left the client before it refused."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received, self.connections = b"", 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(1.0)
            try:
                self.received += conn.recv(4096)
            except OSError:
                pass
            conn.close()

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()


@pytest.fixture
def listener():
    srv = Listener()
    yield srv
    srv.close()


# ------------------------------------------------------------------ item 6: no silent PLAINTEXT
@pytest.mark.parametrize("settings", [
    "sasl.mechanism=SCRAM-SHA-512\nsasl.username=worker\nsasl.password=pw-1\n",
    "ssl.ca.location=/etc/dpstream/ca.pem\n",
    'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="w" password="pw-1";\n',
])
def test_a_config_with_sasl_or_ssl_but_no_protocol_sends_nothing_in_plaintext(tmp_path, capsys, listener, settings):
    """Before: security.protocol defaulted to PLAINTEXT whatever else the file said, and
    the command connected unencrypted and unauthenticated (the listener received a Kafka
    request in the clear). Kafka's Java client and librdkafka also default to PLAINTEXT
    and infer nothing, so dpstream refuses instead of guessing."""
    path = props(tmp_path, f"bootstrap.servers=127.0.0.1:{listener.port}\n{settings}")
    assert main(["consume", "--topic", "predictions", "--timeout", "1", "--client-config", path]) == 2
    line = one_line(capsys)
    assert "security.protocol is not" in line and "PLAINTEXT" in line and "pw-1" not in line, line
    assert listener.connections == 0 and listener.received == b""


def test_sasl_without_a_mechanism_is_refused_instead_of_sending_the_password_as_plain(tmp_path, capsys, listener):
    """Before: sasl.mechanism defaulted to PLAIN, which hands the password itself to whatever
    answers. Kafka's clients default to GSSAPI (Kerberos), which dpstream does not speak:
    with no mechanism named, the command refuses and says which ones it takes."""
    path = props(tmp_path, f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=SASL_PLAINTEXT\n"
                 "sasl.username=worker\nsasl.password=pw-2\n")
    assert main(["consume", "--topic", "predictions", "--timeout", "1", "--client-config", path]) == 2
    line = one_line(capsys)
    assert "no sasl.mechanism" in line and "GSSAPI" in line and "SCRAM-SHA-512" in line, line
    assert listener.connections == 0


@pytest.mark.parametrize("text,says", [
    ("security.protocol=SSL\nsasl.username=u\nsasl.password=p\n",
     "sasl.password is set but security.protocol=SSL makes no SASL login"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=u\nsasl.password=p\n"
     "ssl.ca.location=ca.pem\n", "ssl.ca.location is set but security.protocol=SASL_PLAINTEXT does not use TLS"),
    ("security.protocol=PLAINTEXT\nssl.endpoint.identification.algorithm=https\n", "does not use TLS"),
])
def test_settings_the_protocol_would_ignore_are_refused(tmp_path, text, says):
    """Before: credentials under SSL, or a CA under SASL_PLAINTEXT, were silently unused:
    the user believed they logged in, or that the connection was encrypted."""
    with pytest.raises(ClientConfigError, match=says) as err:
        Kafka.from_settings(None, props(tmp_path, text), environ={})
    assert "=p\n" not in str(err.value)


# ------------------------------------------------------------------ TLS stand-ins (items 7, 11)
def _certs():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(subject, issuer, key, sign_key, *, ca=False, names=(), days=(-1, 30)):
        b = (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(name(issuer))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now + dt.timedelta(days=days[0]))
             .not_valid_after(now + dt.timedelta(days=days[1])))
        if ca:
            b = b.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        if names:
            sans = []
            for n in names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(n)))
                except ValueError:
                    sans.append(x509.DNSName(n))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(sign_key, hashes.SHA256())

    def pem(c):
        return c.public_bytes(serialization.Encoding.PEM)

    def key_pem(k):
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.NoEncryption())

    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("dpstream test CA", "dpstream test CA", ca_key, ca_key, ca=True)
    leaves = {}
    ours, theirs = "dpstream test CA", "someone else's CA"
    for case, issuer, sign, names, days in (
            ("for-kafka", ours, ca_key, ("kafka", "localhost"), (-1, 30)),
            ("expired", ours, ca_key, ("127.0.0.1",), (-30, -2)),
            ("not-yet", ours, ca_key, ("127.0.0.1",), (3, 30)),
            ("unknown-ca", theirs, other_key, ("127.0.0.1",), (-1, 30))):
        k = ec.generate_private_key(ec.SECP256R1())
        leaves[case] = (pem(cert(names[0], issuer, k, sign, names=names, days=days)), key_pem(k))
    return pem(ca), leaves


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    ca_pem, leaves = _certs()
    (d / "ca.pem").write_bytes(ca_pem)
    for case, (cert, key) in leaves.items():
        (d / f"{case}.pem").write_bytes(cert)
        (d / f"{case}.key").write_bytes(key)
    return d


class TlsServer(Listener):
    """A TLS listener presenting one certificate; ``received`` is what arrived after a
    completed handshake (a client that accepted the certificate)."""

    def __init__(self, cert: Path, key: Path):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        super().__init__()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(2.0)
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    self.received += tls.recv(4096)
            except OSError:
                conn.close()


@pytest.fixture
def tls_server(certs):
    servers = []

    def start(case: str) -> TlsServer:
        srv = TlsServer(certs / f"{case}.pem", certs / f"{case}.key")
        servers.append(srv)
        return srv
    yield start
    for srv in servers:
        srv.close()


# ------------------------------------------------------------------ item 7: hostname verification
@pytest.mark.parametrize("value", ["none", "http", "NONE", "htps", "false", "0"])
def test_hostname_verification_is_never_turned_off_by_a_value_other_than_empty(
        tmp_path, capsys, certs, tls_server, value):
    """Before: any value but "https" turned hostname verification off, silently, and every
    command ran against a broker reached through a name its certificate does not list (a
    man in the middle with any certificate from the same CA). In Kafka's Java client an
    unknown algorithm fails the handshake and only the empty value disables the check."""
    srv = tls_server("for-kafka")
    path = props(tmp_path, f"bootstrap.servers=127.0.0.1:{srv.port}\nsecurity.protocol=SSL\n"
                 f"ssl.ca.location={certs / 'ca.pem'}\nssl.endpoint.identification.algorithm={value}\n")
    assert main(["consume", "--topic", "predictions", "--timeout", "1", "--client-config", path]) == 2
    line = one_line(capsys)
    assert f"ssl.endpoint.identification.algorithm={value!r} is neither https" in line, line
    assert srv.received == b""


def test_turning_hostname_verification_off_is_said_every_time(tmp_path, caplog):
    """The empty value (Kafka's documented way) turns the check off, with a warning."""
    on = Kafka.from_settings(None, props(tmp_path, "security.protocol=SSL\n"
                                         "ssl.endpoint.identification.algorithm=HTTPS\n"), environ={})
    assert on.check_hostname and not caplog.records
    off = Kafka.from_settings(None, props(tmp_path, "security.protocol=SSL\n"
                                          "ssl.endpoint.identification.algorithm=\n"), environ={})
    assert not off.check_hostname and not off.ssl_context().check_hostname
    assert any("hostname verification is OFF" in r.getMessage() and r.levelname == "WARNING"
               for r in caplog.records)


# ------------------------------------------------------------------ item 11: what TLS refused
@pytest.mark.parametrize("case,says", [
    ("for-kafka", "is for kafka, localhost, not 127.0.0.1: hostname verification refused it"),
    ("expired", "expired on 20"),
    ("not-yet", "is not valid before 20"),
    ("unknown-ca", "is signed by CN=someone else's CA, which ssl.ca.location ("),
])
def test_a_refused_certificate_says_what_verification_refused(tmp_path, capsys, certs, tls_server, case, says):
    """Before: a hostname mismatch, an expired certificate and an unknown CA all read "set
    ssl.ca.location to the CA that signed it", the fix for the last only."""
    srv = tls_server(case)
    path = props(tmp_path, f"bootstrap.servers=127.0.0.1:{srv.port}\nsecurity.protocol=SSL\n"
                 f"ssl.ca.location={certs / 'ca.pem'}\n")
    assert main(["consume", "--topic", "predictions", "--timeout", "1", "--client-config", path]) == 1
    line = one_line(capsys)
    assert says in line and f"127.0.0.1:{srv.port}" in line, line
    assert srv.received == b""                          # nothing was sent to it


# ------------------------------------------------------------------ item 8: status pages
def test_the_status_pages_listen_on_loopback_even_when_fausts_environment_says_otherwise(monkeypatch):
    """Before: /status, /metrics and faust's /router listened on 0.0.0.0 (faust's default),
    without authentication: anyone on the network read live per-model event counts; and
    faust lets $WEB_BIND override what the app sets."""
    from dpstream.streams.worker.app import WorkerApp
    from dpstream.streams.worker.observe import exposed, web_bind
    monkeypatch.setenv("WEB_BIND", "0.0.0.0")
    monkeypatch.setenv("WEB_PORT", "1")
    w = WorkerApp(kafka=Kafka("127.0.0.1:1"), rng=KeyedRandomness(b"attacks-client-tests-key-0000000"),
                  web_port=16066, app_id="dpstream-bind-test", emit_override=lambda *a: None)
    assert (w.app.conf.web_bind, w.app.conf.web_port) == ("127.0.0.1", 16066)
    assert web_bind(None, {}) == "127.0.0.1" and not exposed("127.0.0.1") and not exposed("::1")
    assert web_bind(None, {"DPSTREAM_WEB_BIND": "0.0.0.0"}) == "0.0.0.0" and exposed("0.0.0.0")
    assert web_bind("10.0.0.5", {"DPSTREAM_WEB_BIND": "0.0.0.0"}) == "10.0.0.5"


def test_compose_publishes_the_status_port_on_the_hosts_loopback_only():
    """Before: compose published 6066 on every host interface ("6066:6066")."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    published = [p for s in services.values() for p in s.get("ports", []) if str(p).endswith(":6066")]
    assert published and all(str(p).startswith("127.0.0.1:") for p in published), published
    # inside the container the worker must listen beyond the container's own loopback
    assert "ENV DPSTREAM_WEB_BIND=0.0.0.0" in (ROOT / "Dockerfile").read_text()


# ------------------------------------------------------------------ item 9: --out
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                                reason="plants files as another user: needs root and runuser")


def as_nobody(*cmd: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *cmd], check=True, capture_output=True)


@pytest.fixture
def shared_tmp():
    """A directory other users can reach (pytest's own is 0700), with a 1777 ``tmp``
    inside, like /tmp."""
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="dpstream-attacks-", dir="/tmp"))
    base.chmod(0o755)
    (base / "tmp").mkdir()
    (base / "tmp").chmod(0o1777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)


@pytest.fixture
def export(tmp_path, key) -> Path:
    """A small export of the shipped example (one model and 200 examples)."""
    examples = tmp_path / "examples.jsonl"
    lines = (ROOT / "examples" / "card-fraud.examples.jsonl").read_text().splitlines()[:200]
    examples.write_text("\n".join(lines) + "\n")
    out = tmp_path / "export"
    assert main(["run", "--models", str(ROOT / "examples" / "card-fraud.model.json"),
                 "--examples", str(examples), "--out", str(out), "--quiet"]) == 0
    return out


def out_commands(export: Path):
    """Each command with an --out, as a function of the directory."""
    return {
        "run": lambda out: ["run", "--models", str(ROOT / "examples" / "card-fraud.model.json"),
                            "--out", out, "--quiet"],
        "export": lambda out: ["export", "--broker", "127.0.0.1:1", "--timeout", "1", "--out", out],
        "audit-report --internal": lambda out: ["audit-report", "--dir", str(export), "--out", out,
                                                "--internal"],
    }


@needs_root
@pytest.mark.parametrize("command", ["run", "export", "audit-report --internal"])
def test_a_shared_sticky_out_is_refused_and_keeps_its_mode(shared_tmp, capsys, export, command):
    """Before: the command chmod-ed the existing --out to 0700 (a 1777 directory lost its
    sticky bit) and wrote through a symbolic link another user had planted in it (as root,
    it overwrote a file outside the directory)."""
    capsys.readouterr()
    shared, victim = shared_tmp / "tmp", shared_tmp / "victim"
    victim.write_text("not yours\n")
    for name in ("predictions.jsonl", "report.html", "model-events.jsonl"):
        as_nobody("ln", "-s", str(victim), str(shared / name))
    assert main(out_commands(export)[command](str(shared))) == 2
    line = one_line(capsys)
    assert f"--out {shared} is writable by other users (mode 1777)" in line, line
    assert oct(shared.stat().st_mode & 0o7777) == "0o1777" and victim.read_text() == "not yours\n"


@needs_root
@pytest.mark.parametrize("command", ["run", "audit-report --internal"])
def test_a_directory_or_link_of_another_user_is_refused(shared_tmp, capsys, export, command):
    """Before: root wrote into a directory another user owned (who could then read or swap
    the private files), and followed that user's symbolic link to wherever it pointed."""
    capsys.readouterr()
    sticky = shared_tmp / "tmp"
    theirs = sticky / "theirs"
    as_nobody("mkdir", "-m", "700", str(theirs))
    assert main(out_commands(export)[command](str(theirs))) == 2
    assert f"{theirs} belongs to uid {NOBODY}, not to you" in one_line(capsys)
    mine = shared_tmp / "mine"
    mine.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(mine), str(sticky / "out"))    # where the user's dir was expected
    assert main(out_commands(export)[command](str(sticky / "out"))) == 2
    assert f"is a symbolic link owned by uid {NOBODY}" in one_line(capsys)
    assert not any(mine.iterdir())


@needs_root
def test_missing_parents_are_judged_where_they_are_made(shared_tmp, capsys, export):
    """Before: ``--out theirs/x/y`` under another user's 0777 directory was accepted (only the
    immediate parent, ``x``, made by dpstream itself, was judged), and that user could then
    swap ``x`` for a tree of their own, which ``replay --dir`` read."""
    capsys.readouterr()
    evil = shared_tmp / "tmp" / "evil"
    as_nobody("mkdir", "-m", "777", str(evil))
    for out in (evil / "x", evil / "x" / "y", evil / "x" / "y" / "z"):
        assert main(out_commands(export)["run"](str(out))) == 2
        assert f"belongs to uid {NOBODY}" in one_line(capsys)
        assert not any(evil.iterdir())
    # a symbolic link on the way that another user owns: refused (they could repoint it)
    mine = shared_tmp / "mine"
    mine.mkdir(mode=0o700)
    as_nobody("ln", "-s", str(mine), str(shared_tmp / "tmp" / "via"))
    assert main(out_commands(export)["run"](str(shared_tmp / "tmp" / "via" / "new" / "out"))) == 2
    assert f"is a symbolic link owned by uid {NOBODY}" in one_line(capsys)
    assert not any(mine.iterdir())


@needs_root
def test_links_and_dot_dots_cannot_lead_an_out_or_a_json_file_through_another_users_directory(
        shared_tmp, capsys, export, monkeypatch):
    """A second attacker's pass: ``missing/../theirs-link/out`` was not judged past the missing
    name and wrote through another user's link; the caller's own link into another
    user's link was followed unjudged; ``demo --json`` judged no directory at all."""
    capsys.readouterr()
    target = shared_tmp / "target"                      # root's, 0755: where a link would lead
    target.mkdir(mode=0o755)
    sticky = shared_tmp / "tmp"
    as_nobody("ln", "-s", str(target), str(sticky / "results"))
    monkeypatch.chdir(sticky)
    assert main(out_commands(export)["run"]("build/../results/run")) == 2
    assert "climbs (..) out of a directory it would make" in one_line(capsys)
    assert not (sticky / "build").exists()
    mine = shared_tmp / "mine"
    mine.mkdir(mode=0o700)
    (mine / "lnk").symlink_to(sticky / "results")       # the caller's own link, into theirs
    assert main(out_commands(export)["run"](str(mine / "lnk" / "run"))) == 2
    assert f"is a symbolic link owned by uid {NOBODY}" in one_line(capsys)
    assert main(["demo", "--json", str(sticky / "results" / "summary.json"), "--fraud-events", "20",
                 "--queries", "5", "--quiet"]) == 2
    assert f"is a symbolic link owned by uid {NOBODY}" in one_line(capsys)
    assert not any(target.iterdir())


@needs_root
def test_another_users_hidden_file_in_a_shared_directory_does_not_refuse_a_json_file(shared_tmp, capsys):
    """A third attacker's pass (left out then): ``demo --json /tmp/summary.json`` wrote
    through ``/tmp/.summary.json.partial``; another user who made that name first refused
    every such run of a non-root caller (the sticky bit keeps it from removing the name),
    and a root caller removed the other user's file. The hidden file's name is now
    random: the run succeeds and theirs stays untouched."""
    capsys.readouterr()
    sticky = shared_tmp / "tmp"
    as_nobody("touch", str(sticky / ".summary.json.partial"))
    assert main(["demo", "--json", str(sticky / "summary.json"), "--fraud-events", "20",
                 "--queries", "5", "--quiet"]) == 0, capsys.readouterr().err
    summary = sticky / "summary.json"
    assert summary.stat().st_uid == os.geteuid() and oct(summary.stat().st_mode & 0o777) == "0o600"
    assert json.loads(summary.read_text())
    left = sorted(p.name for p in sticky.iterdir())
    assert left == [".summary.json.partial", "summary.json"]           # theirs, and ours only
    assert (sticky / ".summary.json.partial").stat().st_uid == NOBODY


def test_an_existing_private_file_is_replaced_not_rewritten_in_place(tmp_path, capsys, export):
    """Before: ``audit-report --internal`` (and ``demo --json``) truncated and rewrote an
    existing, public file, so whoever had it open read the private content."""
    from dpstream.streams.tools.outdir import private_file
    capsys.readouterr()
    out = tmp_path / "rep"
    assert main(["audit-report", "--dir", str(export), "--out", str(out)]) == 0
    before = (out / "report.html").open("rb")            # a reader of the public report
    public = before.read()
    out.chmod(0o700)                   # an internal report goes where only its owner may open
    assert main(["audit-report", "--dir", str(export), "--out", str(out), "--internal"]) == 0
    before.seek(0)
    assert before.read() == public and b"INTERNAL" not in public
    assert b"INTERNAL" in (out / "report.html").read_bytes()
    summary = tmp_path / "summary.json"
    summary.write_text("{}")
    summary.chmod(0o644)
    reader = summary.open("rb")
    with private_file(summary) as fh:
        fh.write(b"private")
    assert reader.read() == b"{}" and summary.read_bytes() == b"private"
    assert oct(summary.stat().st_mode & 0o777) == "0o600"


def test_a_group_writable_directory_of_a_private_group_is_the_users_own(tmp_path, capsys, export):
    """User private groups (Debian, Fedora: umask 002 makes ~/projects 0775) were refused as
    writable by other users; a group with another member still is."""
    import grp
    import pwd
    from dpstream.streams.tools.outdir import _private_group
    capsys.readouterr()
    shared = tmp_path / "projects"
    shared.mkdir()
    shared.chmod(0o775)
    st = shared.stat()
    me = pwd.getpwuid(st.st_uid).pw_name
    group = grp.getgrgid(st.st_gid)
    alone = {u.pw_name for u in pwd.getpwall() if u.pw_gid == st.st_gid} | set(group.gr_mem) == {me}
    assert _private_group(st) == alone
    code = main(out_commands(export)["run"](str(shared / "run1")))
    assert code == (0 if alone else 2)
    shared.chmod(0o777)                                   # others may write: never the user's own
    assert not _private_group(shared.stat())
    if os.geteuid() == 0:                                 # a group nobody is in: not the user's own
        nogroup = pwd.getpwuid(NOBODY).pw_gid
        os.chown(shared, -1, nogroup)
        shared.chmod(0o775)
        assert not _private_group(shared.stat())
        capsys.readouterr()
        assert main(out_commands(export)["run"](str(shared / "run2"))) == 2
        assert "is writable by other users" in one_line(capsys)


@needs_root
def test_a_link_another_user_puts_where_a_parent_is_about_to_be_made_is_refused(
        shared_tmp, capsys, export, monkeypatch):
    """A third pass: the name of a missing parent in a shared directory, judged missing, was
    then made by ``mkdir``; when another user's link appeared there first (a race won on
    the first try), the FileExistsError was taken as "made meanwhile" and the export went
    through the link. Here the link appears exactly in that window."""
    from dpstream.streams.tools import outdir
    capsys.readouterr()
    target = shared_tmp / "target"
    target.mkdir(mode=0o755)
    sticky = shared_tmp / "tmp"
    planted = sticky / "race"
    real_check = outdir._check_parent

    def check_then_plant(d):
        real_check(d)
        if d == planted and not os.path.lexists(planted):
            planted.symlink_to(target)
            os.lchown(planted, NOBODY, NOBODY)
    monkeypatch.setattr(outdir, "_check_parent", check_then_plant)
    assert main(out_commands(export)["run"](str(planted / "sub" / "out"))) == 2
    assert f"is a symbolic link owned by uid {NOBODY}" in one_line(capsys)
    assert not any(target.iterdir())


@needs_root
def test_a_data_dir_through_another_users_link_is_refused_before_any_advice(shared_tmp, capsys, key):
    """``--data-dir`` through another user's link said "open to other users ... chmod 700
    LINK", advice that as root would chmod the link's target."""
    capsys.readouterr()
    target = shared_tmp / "target"
    target.mkdir(mode=0o755)
    as_nobody("ln", "-s", str(target), str(shared_tmp / "tmp" / "wd"))
    assert main(["worker", "--bootstrap-server", "127.0.0.1:1", "--data-dir", str(shared_tmp / "tmp" / "wd")]) == 2
    line = one_line(capsys)
    assert f"is a symbolic link owned by uid {NOBODY}" in line and "chmod" not in line, line
    assert oct(target.stat().st_mode & 0o777) == "0o755"


def test_a_json_file_in_a_missing_directory_and_an_unreadable_export_are_one_line(
        tmp_path, capsys, export, monkeypatch):
    """``demo --json`` into a directory that does not exist (made later by path, it could be
    another user's link by then) is refused; an export directory the caller may not read
    ended ``replay`` in a PermissionError traceback."""
    capsys.readouterr()
    assert main(["demo", "--json", str(tmp_path / "nod" / "d.json"), "--fraud-events", "20",
                 "--queries", "5", "--quiet"]) == 2
    assert "nod does not exist" in one_line(capsys)
    real = os.listdir

    def refuse(p="."):
        if str(p) == str(export):
            raise PermissionError(13, "Permission denied")
        return real(p)
    monkeypatch.setattr(os, "listdir", refuse)
    for args in (["replay", "--dir", str(export)], ["replay", "--dir", str(export), "--no-key"]):
        assert main(args) == 2
        assert f"{export} cannot be read (Permission denied)" in one_line(capsys)


def test_a_failed_command_removes_only_the_directories_it_made(tmp_path):
    """Before: the cleanup removed by path, so a link on the way repointed during the run
    made it remove another tree's empty directories of the same names."""
    from dpstream.streams.tools.outdir import OutDir
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    (second / "new" / "out").mkdir(parents=True)            # someone's empty directories
    link = tmp_path / "via"
    link.symlink_to(first)
    with pytest.raises(RuntimeError):
        with OutDir(link / "new" / "out", private=True):
            assert (first / "new" / "out").is_dir()
            link.unlink()
            link.symlink_to(second)                           # repointed mid-run
            raise RuntimeError
    assert (second / "new" / "out").is_dir()                  # not ours: left alone


def test_missing_parents_are_never_writable_by_others_whatever_the_umask(tmp_path, capsys, export):
    """Before: with umask 000 the parents were made 0777 and then refused (and removed) as
    writable by others, so ``--out u/v/w`` could never work."""
    capsys.readouterr()
    old = os.umask(0)
    try:
        assert main(out_commands(export)["run"](str(tmp_path / "u" / "v" / "w"))) == 0
    finally:
        os.umask(old)
    assert {oct((tmp_path / p).stat().st_mode & 0o777) for p in ("u", "u/v")} == {"0o755"}
    assert oct((tmp_path / "u" / "v" / "w").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("planted", ["symlink", "hardlink"])
def test_a_link_inside_the_out_directory_is_never_written_through(tmp_path, capsys, export, planted):
    """Before: files were opened by path with O_TRUNC, following a symbolic link (or
    writing into a hard link) at a target name to a file outside the directory."""
    capsys.readouterr()
    victim, out = tmp_path / "victim", tmp_path / "out"
    victim.write_text("not yours\n")
    out.mkdir(mode=0o700)
    (os.symlink if planted == "symlink" else os.link)(victim, out / "ledger.jsonl")
    assert main(out_commands(export)["run"](str(out))) == 2
    line = one_line(capsys)
    assert ("is a symbolic link" if planted == "symlink" else "has 2 hard links") in line, line
    assert victim.read_text() == "not yours\n" and not (out / "model-events.jsonl").exists()


def test_a_new_out_is_private_and_an_existing_one_keeps_its_mode(tmp_path, capsys, export):
    """A missing --out is created 0700 with 0600 files; an existing one the user owns and
    only they can write keeps its mode (it is never chmod-ed)."""
    new = tmp_path / "a" / "b"
    assert main(out_commands(export)["run"](str(new))) == 0
    assert oct(new.stat().st_mode & 0o777) == "0o700"
    assert {oct(p.stat().st_mode & 0o777) for p in new.iterdir()} == {"0o600"}
    listed = tmp_path / "listed"
    listed.mkdir()
    listed.chmod(0o755)
    assert main(out_commands(export)["run"](str(listed))) == 0
    assert oct(listed.stat().st_mode & 0o777) == "0o755"
    assert {oct(p.stat().st_mode & 0o777) for p in listed.iterdir()} == {"0o600"}


# ------------------------------------------------------------------ item 12: forged ledger records
@needs_root
def test_a_worker_data_dir_another_user_made_or_can_read_is_refused(shared_tmp, capsys, key):
    """Before: the worker's default --data-dir was /tmp/dpstream-worker; one another local
    user made first was used (its owner then read faust's local table files), and one
    open to others got a warning at most. Now both are refused, before any connection,
    and the default lives under the user's state directory."""
    squat = shared_tmp / "tmp" / "squat"
    as_nobody("mkdir", "-m", "700", str(squat))
    assert main(["worker", "--broker", "127.0.0.1:1", "--data-dir", str(squat)]) == 2
    assert "belongs to uid 65534, not to you" in capsys.readouterr().err
    mine = shared_tmp / "tmp" / "open"
    mine.mkdir(mode=0o755)
    mine.chmod(0o755)
    assert main(["worker", "--broker", "127.0.0.1:1", "--data-dir", str(mine)]) == 2
    assert "is open to other users (mode 0755)" in capsys.readouterr().err
    assert oct(mine.stat().st_mode & 0o777) == "0o755"          # never chmod-ed
    from dpstream.streams.cli.commands import _default_data_dir
    assert not str(_default_data_dir("dpstream")).startswith("/tmp")


def test_a_forged_record_in_an_export_is_a_discrepancy_not_a_traceback(tmp_path, capsys, export):
    """Before: one ``{}`` on the ledger ended ``replay`` in a KeyError traceback."""
    forged_at = len((export / "ledger.jsonl").read_text().splitlines())
    with open(export / "ledger.jsonl", "a") as fh:
        fh.write("{}\n")
    capsys.readouterr()
    assert main(["replay", "--dir", str(export)]) == 1
    out = capsys.readouterr()
    assert f"1 ledger record that is not valid (first: ledger.jsonl line {forged_at + 1}: model_id: Field required) " \
           "skipped: a forged or corrupt record is a discrepancy" in out.out and "FAILED" in out.out
    assert "Traceback" not in out.err
    assert main(["replay", "--dir", str(export), "--no-key"]) == 1
    assert "1 ledger record that is not valid" in capsys.readouterr().out
    # the report is written, and its exit code says the export does not verify
    assert main(["audit-report", "--dir", str(export), "--out", str(tmp_path / "report")]) == 1
    assert (tmp_path / "report" / "report.html").exists()
    err = capsys.readouterr().err
    assert "1 ledger record that is not valid" in err and "Traceback" not in err


# ------------------------------------------------------------------ item 15: children's environment
def test_the_worker_keeps_its_secrets_from_the_processes_it_starts(monkeypatch):
    """Before: the worker's noise helper (a multiprocessing ``spawn``) and the resource
    tracker it starts inherited DPSTREAM_SECRET_KEY and the SASL password variables."""
    from dpstream.streams.worker.app import SECRET_VARIABLES, keep_secrets_from_children
    for name in SECRET_VARIABLES:
        monkeypatch.setenv(name, "secret-" + name)
    monkeypatch.setenv("DPSTREAM_KAFKA_CONFIG", "/etc/dpstream/worker.properties")
    assert sorted(keep_secrets_from_children()) == sorted(SECRET_VARIABLES)
    child = subprocess.run([sys.executable, "-c", "import os,sys; sys.stdout.write(open("
                            "f'/proc/{os.getpid()}/environ','rb').read().decode(errors='replace'))"],
                           capture_output=True, text=True, check=True).stdout
    assert "secret-" not in child and "DPSTREAM_KAFKA_CONFIG=/etc/dpstream" in child


# ------------------------------------------------------------------ with a broker
def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/*/stat)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        todo += kids
    return found


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                found.add(local.rsplit(":", 1)[0])
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.kafka
def test_a_running_worker_hides_secrets_from_children_pages_from_the_network_examples_from_queriers(
        kafka_bootstrap, topic_prefix, tmp_path, capsys, key):
    """Before: /proc/<noise helper>/environ held DPSTREAM_SECRET_KEY and the SASL password
    variables; the status pages listened on 0.0.0.0 (here $WEB_BIND=0.0.0.0, faust's own
    override, is set too); and a querier, who reads predictions, saw one record per
    training example, with its arrival time. Now it reads ``answers``: the query answers
    alone, the same records as on predictions, which replay checks."""
    prefix = topic_prefix + "-"
    port = _free_port()
    worker = Worker(kafka_bootstrap, prefix, tmp_path, web_port=port,
                    env={"DPSTREAM_KAFKA_SASL_PASSWORD": "sasl-secret-15", "WEB_BIND": "0.0.0.0"}).start()
    model, ex = models()[0], [e for e in examples(60) if e["model_id"] == "fraud-a"]
    qs = [q for q in queries(40) if q["model_id"] == "fraud-a"]
    try:
        deadline = time.time() + 30
        kids = []
        while time.time() < deadline and not kids:      # the helper starts once the worker is ready
            kids = _children(worker.proc.pid)
            time.sleep(0.2)
        assert kids, "the worker started no child process"
        for pid in kids:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            assert b"DPSTREAM_SECRET_KEY" not in environ and b"sasl-secret-15" not in environ, pid
        assert KEY_HEX.encode() in Path(f"/proc/{worker.proc.pid}/environ").read_bytes()   # given to it
        assert _listening(port) == {"0100007F"}                                          # 127.0.0.1

        async def feed():
            await produce(kafka_bootstrap, prefix + "models", [model])
            await read_all(kafka_bootstrap, prefix + "model-events", until=1, timeout=60)
            await produce(kafka_bootstrap, prefix + "examples", ex)
            await produce(kafka_bootstrap, prefix + "queries", qs)
            return (await read_all(kafka_bootstrap, prefix + "answers", until=len(qs), timeout=120),
                    await read_all(kafka_bootstrap, prefix + "predictions", until=len(ex) + len(qs), timeout=120))
        answers, predictions = asyncio.run(feed())
    finally:
        worker.stop()
    assert len({(a["model_id"], a["seq"]) for a in answers}) == len(qs) and {a["kind"] for a in answers} == {"query"}
    assert per_model(answers) == per_model([p for p in predictions if p["kind"] == "query"])
    assert len({(p["model_id"], p["seq"]) for p in predictions}) == len(ex) + len(qs)  # copies: per_model
    querier = {(a.operation, a.resource) for a in plan(prefix) if a.principal == f"User:{prefix}querier"}
    assert ("Read", prefix + "answers") in querier and ("Read", prefix + "predictions") not in querier
    assert main(["export", "--broker", kafka_bootstrap, "--prefix", prefix, "--timeout", "2",
                 "--out", str(tmp_path / "audit")]) == 0
    assert main(["replay", "--dir", str(tmp_path / "audit")]) == 0
    out = capsys.readouterr().out
    assert f"answers      matched {len(qs)}," in out and "OK: every release reproduced" in out


@pytest.mark.kafka
def test_forged_records_on_the_ledger_are_counted_by_models_list_and_fail_replay(
        kafka_bootstrap, topic_prefix, tmp_path, capsys, export, key):
    """Before: one ``{}`` (or any record that is not a ledger entry) on the ledger, which
    the worker's principal can write, ended ``models list`` and ``replay`` from Kafka in a
    KeyError traceback."""
    prefix = topic_prefix + "-"
    read = lambda name: [json.loads(line) for line in (export / name).read_text().splitlines()]  # noqa: E731
    log, ledger = read("model-events.jsonl"), read("ledger.jsonl")
    registration = log[0]["value"]["event"]

    async def publish():          # one partition each: the log keeps its order as exported
        for topic in ("models", "model-events", "predictions", "ledger", "releases", "rejected"):
            await create_topic(kafka_bootstrap, prefix + topic, 1)
        await produce(kafka_bootstrap, prefix + "models", [registration])
        await produce(kafka_bootstrap, prefix + "model-events", [r["value"] for r in log])
        await produce(kafka_bootstrap, prefix + "predictions", read("predictions.jsonl"))
        await produce(kafka_bootstrap, prefix + "ledger", [*ledger, {}, b"not json"])
    asyncio.run(publish())
    capsys.readouterr()
    assert main(["models", "list", "--broker", kafka_bootstrap, "--prefix", prefix]) == 0
    out = capsys.readouterr()
    assert "card-fraud" in out.out and "Traceback" not in out.err
    assert f"on {prefix}ledger, 2 ledger records that are not valid (first: record {len(ledger)}: " \
           "model_id: Field required) skipped" in out.err
    assert main(["replay", "--broker", kafka_bootstrap, "--prefix", prefix, "--timeout", "2"]) == 1
    out = capsys.readouterr()
    assert "2 ledger records that are not valid" in out.out and "FAILED" in out.out
    assert "Traceback" not in out.err


@pytest.mark.kafka
def test_models_list_judges_each_registration_as_the_worker_does(kafka_bootstrap, topic_prefix, capsys):
    """``models list`` / ``show`` take the worker's decoder and acceptance rule
    (agents/sequencer.py ``parse``), checked here against the embedded runtime fed the
    same bytes. Before (issue 41): the CLI validated each record with the schema alone, so
    a registration whose feature name holds a lone surrogate was judged apart from the
    worker (which reads it as U+FFFD, and since stop 52 refuses such a new registration),
    one the worker dead-lettered as infeasible was listed as in force, and a record keyed
    by another model id counted too."""
    from aiokafka import AIOKafkaProducer

    from dpstream.streams.tools.embedded import EmbeddedRuntime
    prefix = topic_prefix + "-"
    base = json.loads((ROOT / "examples" / "card-fraud.model.json").read_text())
    surrogate = {**base, "model_id": "surro", "features": [{**base["features"][0], "name": "a\ud800"}]}
    conflicting = {**base, "budget": {**base["budget"], "epsilon": 5.0}}
    infeasible = {**base, "model_id": "tight", "features": None, "dimension": 3,
                  "params": {**base["params"], "max_active": 9}}
    elsewhere = {**base, "model_id": "keyed-elsewhere"}
    records = [(b"surro", surrogate), (b"card-fraud", base), (b"card-fraud", conflicting),
               (b"tight", infeasible), (b"card-fraud", elsewhere)]

    async def publish():
        for topic in ("models", "ledger"):
            await create_topic(kafka_bootstrap, prefix + topic, 1)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            for key, value in records:
                await producer.send_and_wait(prefix + "models", json.dumps(value).encode(), key=key)
        finally:
            await producer.stop()
    asyncio.run(publish())
    worker = EmbeddedRuntime(KeyedRandomness(bytes.fromhex(KEY_HEX)))
    for key, value in records:
        asyncio.run(worker.feed("models", json.dumps(value).encode(), key=key.decode()))
    accepted = {r["value"]["event"]["model_id"]: r["value"]["event"] for r in worker.log}
    dead = [r["reason"] for r in worker.outputs["rejected"]]
    assert sorted(accepted) == ["card-fraud"] and len(dead) == 4
    assert "U+FFFD" in dead[0]

    capsys.readouterr()
    assert main(["models", "list", "--broker", kafka_bootstrap, "--prefix", prefix, "--timeout", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = [line.split()[0] for line in out if " refused " not in line]
    refused = [line for line in out if " refused " in line]
    assert listed == ["card-fraud"], out
    assert [line.split(": ", 1)[1] for line in refused] == dead, refused
    assert [line.split()[0] for line in refused] == ["surro", "card-fraud", "tight", "keyed-elsewhere"]
    assert main(["models", "show", "surro", "--broker", kafka_bootstrap, "--prefix", prefix]) == 1
    err = capsys.readouterr().err
    assert "no registration of 'surro' in force" in err and "U+FFFD" in err, err
    assert main(["models", "show", "tight", "--broker", kafka_bootstrap, "--prefix", prefix]) == 1
    err = capsys.readouterr().err
    assert "no registration of 'tight' in force" in err and "the worker refused its registration at models:0:3" \
        in err and "infeasible model config" in err, err


def test_a_ledger_line_whose_seq_is_beyond_int64_is_a_discrepancy_in_the_report(tmp_path, capsys, export):
    """Before: a copy of a valid ledger entry with ``"seq": 10**400`` (valid JSON, within
    the digit limit) passed the schema and stopped ``audit-report`` in matplotlib's
    ``set_xlim`` with a traceback. Positions and counts on output topics are int64."""
    lines = (export / "ledger.jsonl").read_text().splitlines()
    forged = json.loads(lines[0])
    forged["seq"] = 10 ** 400
    with open(export / "ledger.jsonl", "a") as fh:
        fh.write(json.dumps(forged) + "\n")
    capsys.readouterr()
    for flags in ([], ["--no-key"]):
        assert main(["audit-report", "--dir", str(export), "--out", str(tmp_path / f"r{len(flags)}"),
                     *flags]) == 1
        err = capsys.readouterr().err
        assert "1 ledger record that is not valid" in err and "seq: Input should be less than" in err
        assert "Traceback" not in err and (tmp_path / f"r{len(flags)}" / "report.html").exists()


# ------------------------------------------------------------------ SASL in the clear
PLAIN_CLEAR = "the password crosses the network in the clear"


@pytest.mark.parametrize("command", ["consume", "produce", "worker"])
def test_plain_over_sasl_plaintext_says_the_password_crosses_the_network_in_the_clear(
        tmp_path, caplog, monkeypatch, command):
    """Before: ``security.protocol=SASL_PLAINTEXT`` with ``sasl.mechanism=PLAIN`` was taken
    without a word, while it hands the password itself to anyone on the path. Every
    command and the worker now warn once; SCRAM over the same protocol does not."""
    examples = tmp_path / "examples.jsonl"
    examples.write_text((ROOT / "examples" / "card-fraud.examples.jsonl").read_text().splitlines()[0] + "\n")
    args = {"consume": ["--topic", "predictions", "--timeout", "1"],
            "produce": ["--topic", "examples", "--file", str(examples), "--no-check"],
            "worker": ["--data-dir", str(tmp_path / "w")]}[command]
    for mechanism, warned in (("PLAIN", 1), ("SCRAM-SHA-512", 0)):
        path = props(tmp_path, "bootstrap.servers=127.0.0.1:1\nsecurity.protocol=SASL_PLAINTEXT\n"
                     f"sasl.mechanism={mechanism}\nsasl.username=u\nsasl.password=pw-61\n", f"{mechanism}.properties")
        caplog.clear()
        monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)      # the worker removes it once read
        assert main([command, *args, "--client-config", path]) == 1
        said = [r.getMessage() for r in caplog.records if PLAIN_CLEAR in r.getMessage()]
        assert len(said) == warned, caplog.text
        assert all("use SASL_SSL" in s and "pw-61" not in s and r.levelname == "WARNING"
                   for s, r in zip(said, caplog.records)), said


def test_the_plain_warning_reaches_the_terminal_as_one_line(tmp_path):
    """What a user sees: the warning, then the command's own line, no traceback."""
    path = props(tmp_path, "bootstrap.servers=127.0.0.1:1\nsecurity.protocol=SASL_PLAINTEXT\n"
                 "sasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=pw-61\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DPSTREAM_KAFKA_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "dpstream.streams.cli", "consume", "--topic", "predictions",
                           "--timeout", "1", "--client-config", path], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and len(lines) == 2, done.stderr
    assert lines[0] == (f"warning: {PLAIN_CLEAR} ({path}: sasl.mechanism=PLAIN over "
                        "security.protocol=SASL_PLAINTEXT): anyone on the path reads it; use SASL_SSL, or "
                        "SCRAM-SHA-512 if the broker offers it")
    assert lines[1].startswith("dpstream consume: cannot reach the Kafka broker at 127.0.0.1:1")


@pytest.mark.kafka
def test_a_sasl_mechanism_the_broker_does_not_offer_is_named_with_those_it_offers(secured, tmp_path, capsys):
    """Before: a mechanism the broker does not offer (PLAIN, against the secured broker's
    SCRAM-only listener) read "security.protocol=SASL_SSL starts TLS; is this listener
    plaintext?": aiokafka hides the broker's answer (error 33, UNSUPPORTED_SASL_MECHANISM)
    behind a bare KafkaConnectionError, and the line blamed the protocol. It now names the
    mechanism (Kafka's answer carries no list of those offered that aiokafka passes on)."""
    text = Path(secured.config("admin")).read_text()
    assert "sasl.mechanism=SCRAM-SHA-512" in text
    path = props(tmp_path, text.replace("sasl.mechanism=SCRAM-SHA-512", "sasl.mechanism=PLAIN"))
    capsys.readouterr()
    assert main(["consume", "--topic", "predictions", "--timeout", "2", "--client-config", path]) == 1
    line = one_line(capsys)
    assert (f"the broker at {secured.bootstrap} does not offer SASL mechanism PLAIN (KafkaConnectionError): "
            "set sasl.mechanism to one it offers (SCRAM-SHA-512, SCRAM-SHA-256?") in line, line
    assert "starts TLS" not in line and "password" not in line


def test_a_mechanism_list_the_broker_sends_is_shown_only_as_mechanism_names():
    """When aiokafka's error carries the broker's list (a handshake answered without an
    error code), the line gives it; names from whoever answered are cut to mechanism-like
    words, so a hostile listener cannot write into the user's terminal."""
    from aiokafka.errors import KafkaConnectionError
    kafka = Kafka("127.0.0.1:9", security_protocol="SASL_SSL", sasl_mechanism="PLAIN", username="u", password="p")
    logged = ('Unable connect to "127.0.0.1:9": UnsupportedSaslMechanismError: Kafka broker does not support '
              "PLAIN sasl mechanism. Enabled mechanisms are: ['SCRAM-SHA-512', '\x1b[2Jgotcha', 'OAUTHBEARER']",)
    line = kafka.explain(KafkaConnectionError("Unable to bootstrap"), "Read topic predictions", logged)
    assert line == ("the broker at 127.0.0.1:9 does not offer SASL mechanism PLAIN; it offers SCRAM-SHA-512, "
                    "OAUTHBEARER (KafkaConnectionError): set sasl.mechanism to one it offers"), line
