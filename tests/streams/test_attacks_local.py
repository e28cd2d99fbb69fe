"""Attacks by another local user of the same machine (client configs and the status pages): each test
is one that must now be refused; its docstring says what happened before. Other local
users are not trusted (docs/security.md, "Threat model"): they own files and directories
of their own, write where the mode lets them, and connect to every port on 127.0.0.1.
The rules are in docs/security-clients.md. Tests that hand a file to another user need
root (they make the user ``dpstream-other`` when it is missing); the worker's pages are
tested against the plaintext broker (marked ``kafka``)."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request, urlopen

import pytest

from dpstream.streams.cli.commands import main

from .kafka_helpers import KEY_HEX, ROOT, Worker
from .test_attacks_client import Listener, _certs, one_line, props, shared_tmp

OTHER = "dpstream-other"
needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="hands files to another user: needs root and useradd")


@pytest.fixture(scope="module")
def other_uid() -> int:
    """The uid of another, unprivileged local user (made, without a home, when missing)."""
    try:
        return pwd.getpwnam(OTHER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", OTHER], check=True, capture_output=True)
        return pwd.getpwnam(OTHER).pw_uid


@pytest.fixture
def listener():
    srv = Listener()
    yield srv
    srv.close()


shared = shared_tmp       # the same directory other users can reach (a fixture)


@pytest.fixture
def examples(tmp_path) -> str:
    path = tmp_path / "examples.jsonl"
    path.write_text("\n".join((ROOT / "examples" / "card-fraud.examples.jsonl").read_text().splitlines()[:5]) + "\n")
    return str(path)


def produce(config: str, examples: str) -> int:
    return main(["produce", "--topic", "examples", "--file", examples, "--no-check", "--client-config", config])


# ------------------------------------------------------------------ item 3: client configs
@needs_root
def test_a_client_config_another_user_owns_sends_nothing_to_their_listener(
        shared, capsys, listener, other_uid, examples):
    """Before: dpstream took a client config another local user owned (in a shared
    directory, mode 0644, no password in it), and ``produce`` sent its request in the
    clear to that user's listener: the owner of the file chooses where the examples go."""
    path = shared / "tmp" / "client.properties"
    path.write_text(f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n")
    path.chmod(0o644)
    os.chown(path, other_uid, -1)
    capsys.readouterr()
    assert produce(str(path), examples) == 2
    line = one_line(capsys)
    assert f"client config {path} belongs to uid {other_uid}, not to you or root" in line, line
    assert "use a copy of your own" in line
    assert listener.connections == 0 and listener.received == b""


@needs_root
@pytest.mark.parametrize("place,says", [
    ("their-dir", "client.properties's parent {shared}/theirs belongs to uid {uid}"),
    ("their-link", "{shared}/tmp/client.properties is a symbolic link owned by uid {uid}, not by you or root"),
])
def test_a_client_config_another_user_can_swap_is_refused(shared, capsys, listener, other_uid, examples,
                                                          place, says):
    """Before: a config of the caller's own, in a directory another user owns or reached
    through their symbolic link, was read and used: that user could put their own file in
    its place (pointing at their listener) at any time."""
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    text = f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"
    if place == "their-dir":
        theirs = shared / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, other_uid, -1)
        path = Path(props(theirs, text))
    else:
        target = Path(props(mine, text))
        path = shared / "tmp" / "client.properties"
        path.symlink_to(target)
        os.lchown(path, other_uid, -1)
    capsys.readouterr()
    assert produce(str(path), examples) == 2
    line = one_line(capsys)
    assert says.format(shared=shared, uid=other_uid) in line and "keep it in a directory only you" in line, line
    assert listener.connections == 0


def test_a_client_config_or_tls_file_others_may_write_is_refused(shared, tmp_path, capsys, listener, examples):
    """Before: a client config others could write (0666, or in a 0777 directory without the
    sticky bit) was used as it was: anyone could point it at their listener; so was a CA
    file others could write (they add their own CA) and a client key others could read."""
    text = f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"
    writable = Path(props(tmp_path, text, "writable.properties"))
    writable.chmod(0o666)
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    in_open = Path(props(open_dir, text))
    ca_pem, leaves = _certs()
    ca, open_ca = shared / "ca.pem", shared / "open-ca.pem"
    for path, mode in ((ca, 0o644), (open_ca, 0o666)):
        path.write_bytes(ca_pem)
        path.chmod(mode)
    with_open_ca = props(tmp_path, f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=SSL\n"
                         f"ssl.ca.location={open_ca}\n", "ca.properties")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    for path, data in ((cert, leaves["for-kafka"][0]), (key, leaves["for-kafka"][1])):
        path.write_bytes(data)
        path.chmod(0o644)
    with_open_key = props(tmp_path, f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=SSL\n"
                          f"ssl.ca.location={ca}\nssl.certificate.location={cert}\nssl.key.location={key}\n",
                          "key.properties")
    cases = [
        (str(writable), f"client config {writable} is writable by other users (mode 0666), who can change "
                        f"what it says: chmod go-w {writable}"),
        (str(in_open), f"client config {in_open}'s parent {open_dir} is writable by other users without the "
                       "sticky bit (mode 0777)"),
        (with_open_ca, f"ssl.ca.location: {open_ca} is writable by other users (mode 0666)"),
        (with_open_key, f"ssl.key.location: {key} holds a secret and others can read it (mode 0644): chmod 600 {key}"),
    ]
    for config, says in cases:
        capsys.readouterr()
        assert produce(config, examples) == 2, config
        line = one_line(capsys)
        assert line.startswith("dpstream produce: ") and says in line, line
    assert listener.connections == 0


def test_a_client_config_of_ones_own_in_a_sticky_shared_directory_is_used(shared, capsys, listener, examples):
    """What stays allowed: the caller's own config (or root's), 0644 without a password, in
    a directory others may write only with the sticky bit (as /tmp): it is used."""
    path = Path(props(shared / "tmp", f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"))
    path.chmod(0o644)
    capsys.readouterr()
    assert produce(str(path), examples) == 1
    assert "client config" not in capsys.readouterr().err
    assert listener.connections >= 1


# ------------------------------------------------------------------ item 7: the worker's pages
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None, scheme: str = "Bearer") -> tuple[int, bytes]:
    request = Request(url, headers={"Authorization": f"{scheme} {token}"} if token is not None else {})
    try:
        with urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except HTTPError as err:
        return err.code, err.read()


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)


@pytest.mark.parametrize("mode,content,says", [
    (0o644, "t" * 43, "holds a secret and others can read it (mode 0644): chmod 600"),
    (0o600, "short", "not a token of 16 or more printable ASCII characters"),
    (0o600, "two words here, long enough", "not a token of 16 or more"),
])
def test_a_web_token_file_others_can_read_or_too_weak_is_refused_before_any_connection(
        tmp_path, capsys, key, mode, content, says):
    """A token file must be the caller's, readable by its owner only, and hold a token
    worth the name; the worker refuses before it connects (the broker here is nowhere)."""
    token = tmp_path / "web.token"
    token.write_text(content + "\n")
    token.chmod(mode)
    assert main(["worker", "--broker", "127.0.0.1:1", "--data-dir", str(tmp_path / "w"), "--web-port",
                 str(_free_port()), "--web-token-file", str(token)]) == 2
    line = one_line(capsys)
    assert line.startswith(f"dpstream worker: --web-token-file {token}") and says in line, line
    assert content not in line


@needs_root
def test_a_web_token_file_another_user_owns_is_refused(tmp_path, capsys, key, other_uid):
    """Its owner knows the token, and could change it."""
    token = tmp_path / "web.token"
    token.write_text("t" * 43)
    token.chmod(0o600)
    os.chown(token, other_uid, -1)
    assert main(["worker", "--broker", "127.0.0.1:1", "--data-dir", str(tmp_path / "w"), "--web-port",
                 str(_free_port()), "--web-token-file", str(token)]) == 2
    assert f"--web-token-file {token} belongs to uid {other_uid}, not to you or root" in one_line(capsys)


def test_a_worker_says_who_can_read_its_pages_when_it_starts():
    """Without a token, the pages are open to every local user (docs/security-clients.md):
    the worker says so at start, on loopback too; with one, only beyond loopback (plain
    HTTP)."""
    from dpstream.streams.worker.observe import web_warning
    assert "every user of this machine can read per-model event counts" in web_warning("127.0.0.1", 6066, False)
    assert "anyone who reaches that port" in web_warning("0.0.0.0", 6066, False)
    assert web_warning("127.0.0.1", 6066, True) is None
    assert "over plain HTTP" in web_warning("0.0.0.0", 6066, True)


@pytest.mark.kafka
def test_with_a_token_file_the_status_pages_answer_only_the_token(kafka_bootstrap, topic_prefix, tmp_path):
    """Before: /status and /metrics on 127.0.0.1 had no authentication: every local user
    read each model's exact event count (here: any request to the port was answered).
    With --web-token-file, every page, faust's /router included, answers 401 without
    ``Authorization: Bearer <token>``."""
    token = "tok-" + "9" * 40
    path = tmp_path / "web.token"
    path.write_text(token + "\n")
    path.chmod(0o600)
    port = _free_port()
    worker = Worker(kafka_bootstrap, topic_prefix + "-", tmp_path, web_port=port,
                    args=("--web-token-file", str(path))).start()
    try:
        base = f"http://127.0.0.1:{port}"
        for page in ("/status/", "/status", "/metrics/", "/router/"):
            for given, scheme in ((None, "Bearer"), ("wrong-" + "9" * 38, "Bearer"), (token[:-1], "Bearer"),
                                  (token, "Basic")):
                code, body = _get(base + page, given, scheme)
                assert code == 401 and b"dpstream_" not in body and b"models" not in body, (page, given, code)
        code, body = _get(base + "/status/", token)
        assert code == 200 and "models" in json.loads(body)
        code, body = _get(base + "/metrics/", token)
        assert code == 200 and b"dpstream_events_out" in body
        assert _get(base + "/status/", token, scheme="bearer")[0] == 200
    finally:
        worker.stop()
    assert "have no authentication" not in worker.log.read_text()


def _acl_granting_write(path: Path, uid: int) -> None:
    """``setfacl -m u:UID:rwx PATH`` without the acl package: the kernel's xattr form of a
    POSIX access ACL (version 2; entries tag, perm, id, sorted by tag)."""
    import struct
    undefined = 0xFFFFFFFF
    entries = [(0x01, 7, undefined), (0x02, 7, uid), (0x04, 5, undefined), (0x10, 7, undefined),
               (0x20, 5, undefined)]
    os.setxattr(path, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


@needs_root
def test_a_directory_an_acl_lets_another_user_write_is_not_a_private_group(shared, capsys, listener,
                                                                           other_uid, examples):
    """From an attack: an ACL granting another user write shows only as the group bits
    (its mask), and the private-group exemption took the directory as the owner's alone,
    so a config there was used while that user could rename it away and put theirs in
    its place. Now a path with an access ACL gets no exemption."""
    directory = shared / "acl"
    directory.mkdir(mode=0o755)
    try:
        _acl_granting_write(directory, other_uid)
    except OSError as err:
        pytest.skip(f"this file system takes no POSIX ACLs ({err.strerror})")
    text = f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"
    config = props(directory, text)
    capsys.readouterr()
    assert produce(config, examples) == 2
    line = one_line(capsys)
    assert "writable by other users" in line, line
    assert listener.connections == 0


def test_a_client_config_named_with_a_tilde_is_judged_as_it_is_read(shared, capsys, listener, examples,
                                                                    monkeypatch, tmp_path):
    """From an attack: ``--client-config=~/x`` (a shell leaves it as it is) was judged after
    expanding ``~`` to $HOME (a good file) but read as ./~/x, a file another user planted
    in the shared directory the command ran in. Now it is judged as it is read."""
    text = f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"
    home = tmp_path / "home"
    home.mkdir()
    props(home, text, "x.properties")
    planted = shared / "tmp" / "~"
    planted.mkdir()
    planted.chmod(0o777)
    (planted / "x.properties").write_text(text)
    (planted / "x.properties").chmod(0o666)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(shared / "tmp")
    capsys.readouterr()
    assert produce("~/x.properties", examples) == 2
    line = one_line(capsys)
    assert "writable by other users" in line, line
    assert listener.connections == 0


@needs_root
def test_a_config_reached_through_a_link_in_another_users_directory_is_refused(shared, capsys, listener,
                                                                               other_uid, examples):
    """From an attack: a link of the caller's, in a directory another user owns, pointing
    at the caller's own config: only the directories on the resolved path were judged,
    so the link's directory was not, and its owner could put their own link in its place
    between the check and the read. Now every directory passed through is judged."""
    text = f"bootstrap.servers=127.0.0.1:{listener.port}\nsecurity.protocol=PLAINTEXT\n"
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    props(mine, text)
    team = shared / "team"
    team.mkdir(mode=0o755)
    os.chown(team, other_uid, -1)
    (team / "configs").symlink_to(mine)
    capsys.readouterr()
    assert produce(str(team / "configs" / "client.properties"), examples) == 2
    line = one_line(capsys)
    assert f"belongs to uid {other_uid}" in line, line
    assert listener.connections == 0


@needs_root
def test_a_config_swapped_after_its_check_is_judged_on_the_file_read(shared, other_uid, monkeypatch):
    """From an attack: the config was judged by its name, then read again by its name, so
    a file put in its place between the two was read unjudged (266 of ~43,000 loads won
    the race). Now the file read is the file judged: its owner and mode come from the
    open descriptor."""
    from dpstream.streams.worker import kafka
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    config = mine / "client.properties"
    config.write_text("bootstrap.servers=127.0.0.1:9\n")
    config.chmod(0o600)
    theirs = mine / "theirs.properties"
    theirs.write_text("bootstrap.servers=6.6.6.6:9092\n")
    os.chown(theirs, other_uid, -1)
    resolved = kafka._resolved

    def swapped_after_the_check(path):
        where = resolved(path)
        os.rename(theirs, config)          # the name now holds another user's file
        return where
    monkeypatch.setattr(kafka, "_resolved", swapped_after_the_check)
    data, problem = kafka.read_trusted(str(config))
    assert data is None and f"belongs to uid {other_uid}" in problem
