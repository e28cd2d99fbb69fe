"""Attacks on what ``scripts/kafka.sh`` trusts on disk (the compose secrets, the state directory, the jar cache): the
compose secrets directory, the state directory and the jar cache. Another local OS user
is ``nobody`` (``runuser -u nobody``), as in the other attack suites; each test's
docstring says what the attack did before. The rule every one of these directories now
meets (kafka.sh ``safe_dir``, as streams/tools/outdir.py for ``--out``): yours (or root's)
and writable by no one else, every directory above it yours or root's (sticky if others
may write to it), nothing in it a link or another user's, every file made new and renamed
into place. No broker is needed: each refusal comes before anything starts."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from .secure_broker import SCRIPT, free_port

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None,
                                reason="plants files as another user: needs root and runuser")


def as_nobody(*cmd) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *map(str, cmd)], check=True, capture_output=True)


def script(*args, env: dict | None = None, timeout: float = 120, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, **(env or {})}
    return subprocess.run([SCRIPT, *map(str, args)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def one_line(done) -> str:
    """The single line a failed command wrote (no traceback)."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    return lines[0]


@pytest.fixture
def shared():
    """A 1777 directory like /tmp (in a root-owned 0755 one): where another user makes
    what they plant. pytest's own tmp_path is 0700, which nobody cannot enter."""
    base = Path(tempfile.mkdtemp(prefix="dpstream-scripts-", dir="/tmp"))
    base.chmod(0o755)
    (base / "tmp").mkdir()
    (base / "tmp").chmod(0o1777)
    yield base / "tmp"
    shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ item 2
@needs_root
def test_compose_secrets_refuses_a_directory_another_user_made_and_writes_through_no_planted_link(shared, tmp_path):
    """Before: ``kafka.sh compose-secrets DIR`` took a DIR another user had made. A link
    that user planted at ``DIR/clients/admin.properties.new`` received the admin's client
    config, password included (written through ``>``, then the link renamed into place);
    and a DIR that user filled beforehand (``kafka/server.properties``, their own TLS key,
    their users) was answered "already holds the compose secrets" and deployed as it was.
    Now such a DIR is refused in one line before anything is written, and so is a DIR of
    the caller's with a link or another user's file in it."""
    loot = shared / "loot"
    as_nobody("sh", "-c", f"umask 0; : > {loot}")
    theirs = shared / "secrets"
    as_nobody("mkdir", "-m", "777", theirs)
    as_nobody("mkdir", "-m", "777", theirs / "clients")
    as_nobody("ln", "-s", loot, theirs / "clients" / "admin.properties.new")
    line = one_line(script("compose-secrets", theirs))
    assert f"refusing the compose secrets directory {theirs} (owner uid {NOBODY}, mode 777)" in line, line
    assert loot.read_text() == "" and not (theirs / "kafka").exists()

    filled = shared / "filled"            # made ready by another user, writable by no one else
    as_nobody("mkdir", "-m", "755", filled)
    as_nobody("mkdir", "-m", "755", filled / "kafka")
    as_nobody("sh", "-c", f"echo 'super.users=User:ANONYMOUS' > {filled}/kafka/server.properties")
    line = one_line(script("compose-secrets", filled))
    assert f"refusing the compose secrets directory {filled} (owner uid {NOBODY}, mode 755)" in line, line

    under = shared / "theirs"             # the caller's directory in one another user owns
    as_nobody("mkdir", "-m", "755", under)
    (under / "secrets").mkdir(mode=0o700)
    line = one_line(script("compose-secrets", under / "secrets"))
    assert f"its parent {under} belongs to uid {NOBODY}" in line, line
    assert not any((under / "secrets").iterdir())

    mine = tmp_path / "secrets"           # the caller's own, with a link or another user's file in it
    (mine / "clients").mkdir(parents=True, mode=0o700)
    (mine / "clients" / "admin.properties.new").symlink_to(loot)
    line = one_line(script("compose-secrets", mine))
    assert f"{mine}/clients/admin.properties.new in it is a symbolic link" in line, line
    (mine / "clients" / "admin.properties.new").unlink()
    (mine / "kafka").mkdir(mode=0o700)
    (mine / "kafka" / "server.properties").write_text("super.users=User:ANONYMOUS\n")
    os.chown(mine / "kafka" / "server.properties", NOBODY, -1)
    line = one_line(script("compose-secrets", mine))
    assert f"{mine}/kafka/server.properties in it is owned by uid {NOBODY}" in line, line
    assert loot.read_text() == ""

    fresh = tmp_path / "fresh" / "secrets"  # a new one is made 0700, every file new, and it says its window
    done = script("compose-secrets", fresh)
    assert done.returncode == 0, done.stderr
    assert (fresh.stat().st_mode & 0o777) == 0o700
    assert "connections.max.reauth.ms=60000" in (fresh / "kafka" / "server.properties").read_text()
    assert not [p for p in fresh.rglob("*") if p.is_symlink() or p.name.startswith(".")]


# ------------------------------------------------------------------ item 3
@needs_root
def test_a_state_directory_another_user_can_swap_is_refused_and_clients_checks_what_it_prints(shared, tmp_path):
    """Before: the state check looked at its parent's mode, not its owner: the caller's
    0700 state directory in a 0755 directory another user owns was accepted; that user
    renamed it and put their own in its place, and ``kafka.sh clients`` printed the
    swapped ``$STATE/clients`` without any check. Now a state directory whose parent (or
    any directory above) is another user's is refused in one line, by ``clients`` too,
    which also judges the directory it prints."""
    parent = shared / "theirs"
    as_nobody("mkdir", "-m", "755", parent)
    state = parent / "state"
    state.mkdir(mode=0o700)
    (state / "clients").mkdir(mode=0o700)
    env = {"KAFKA_SECURE": "1", "DPSTREAM_KAFKA_STATE": str(state), "KAFKA_PORT": str(free_port()),
           "KAFKA_CONTROLLER_PORT": str(free_port()), "KAFKA_INTERNAL_PORT": str(free_port())}
    for command in ("clients", "status", "stop"):
        line = one_line(script(command, env=env))
        assert f"refusing the state directory {state}: its parent {parent} belongs to uid {NOBODY}" in line, line
    as_nobody("mv", state, parent / "moved")           # the swap
    as_nobody("mkdir", "-m", "700", state)
    as_nobody("mkdir", "-m", "700", state / "clients")
    line = one_line(script("clients", env=env))
    assert f"refusing the state directory {state}" in line and f"belongs to uid {NOBODY}" in line, line

    mine = tmp_path / "state"                          # the caller's own, its clients another user's
    (mine / "clients").mkdir(parents=True, mode=0o700)
    mine.chmod(0o700)
    os.chown(mine / "clients", NOBODY, -1)
    env["DPSTREAM_KAFKA_STATE"] = str(mine)
    line = one_line(script("clients", env=env))
    assert f"refusing the state directory {mine}: {mine}/clients in it is owned by uid {NOBODY}" in line, line
    os.chown(mine / "clients", 0, -1)
    done = script("clients", env=env)
    assert done.returncode == 0 and done.stdout.strip() == f"{mine}/clients", done.stderr
    (mine / "clients").rmdir()
    line = one_line(script("clients", env=env))
    assert f"no client configs in {mine}/clients" in line, line


# ------------------------------------------------------------------ item 5
def libs_name() -> str:
    """The jar directory's name in a cache, as kafka.sh derives it (``libs-`` and the
    cksum of its dependency list, read from the script itself)."""
    text = Path(SCRIPT).read_text()
    version = re.search(r'^VERSION="\$\{KAFKA_VERSION:-([^}]+)\}"$', text, re.M).group(1)
    log4j = re.search(r"^LOG4J=(\S+)$", text, re.M).group(1)
    deps = re.search(r'^DEPS="([^"]+)"$', text, re.M).group(1).replace("$VERSION", version).replace("$LOG4J", log4j)
    cksum = subprocess.run(["cksum"], input=deps + "\n", capture_output=True, text=True, check=True).stdout.split()[0]
    return f"libs-{cksum}"


@needs_root
@pytest.mark.skipif(shutil.which("javac") is None, reason="compiles the planted class: needs a JDK")
def test_a_jar_cache_another_user_made_is_refused_before_any_of_its_code_runs(shared, tmp_path):
    """Before: DPSTREAM_KAFKA_HOME was used whoever owned it. Another user's cache with a
    ``.complete`` marker and a jar of their own was taken as fetched, and ``kafka.sh
    start`` ran that jar's ``kafka.tools.StorageTool`` as the caller (root here: the
    planted class wrote the user it ran as into a file of the attacker's). Now a jar cache
    that is not the caller's (or root's), or that lies in a directory another user may
    change, is refused in one line before any of its code runs."""
    cache = shared / "cache"
    libs = cache / libs_name()
    as_nobody("mkdir", "-m", "755", cache)
    as_nobody("mkdir", "-m", "755", libs)
    pwned = shared / "pwned"
    as_nobody("sh", "-c", f"umask 0; : > {pwned}")
    src = tmp_path / "kafka" / "tools" / "StorageTool.java"
    src.parent.mkdir(parents=True)
    src.write_text("package kafka.tools;\npublic class StorageTool { public static void main(String[] a)"
                   f" throws Exception {{ java.nio.file.Files.writeString(java.nio.file.Path.of(\"{pwned}\"),"
                   " System.getProperty(\"user.name\")); } }\n")
    subprocess.run(["javac", "-d", str(tmp_path / "classes"), str(src)], check=True, capture_output=True, timeout=120)
    jar = shared / "evil.jar"             # where nobody can read it (tmp_path is 0700)
    with zipfile.ZipFile(jar, "w") as z:
        z.write(tmp_path / "classes" / "kafka" / "tools" / "StorageTool.class", "kafka/tools/StorageTool.class")
    jar.chmod(0o644)
    as_nobody("cp", jar, libs / "evil.jar")
    as_nobody("touch", libs / ".complete")
    state = tmp_path / "state"
    env = {"DPSTREAM_KAFKA_HOME": str(cache), "DPSTREAM_KAFKA_STATE": str(state),
           "KAFKA_PORT": str(free_port()), "KAFKA_CONTROLLER_PORT": str(free_port())}
    try:
        line = one_line(script("start", env=env))
    finally:
        script("stop", env=env)
    assert pwned.read_text() == "", "the planted jar ran as " + pwned.read_text()
    assert f"refusing the jar cache {cache} (owner uid {NOBODY}, mode 755)" in line, line
    line = one_line(script("fetch", env=env))
    assert f"refusing the jar cache {cache}" in line, line

    parent = shared / "theirs"             # a cache of the caller's in a directory another user owns
    as_nobody("mkdir", "-m", "755", parent)
    (parent / "cache").mkdir(mode=0o700)
    line = one_line(script("fetch", env={"DPSTREAM_KAFKA_HOME": str(parent / "cache")}))
    assert f"refusing the jar cache {parent}/cache: its parent {parent} belongs to uid {NOBODY}" in line, line


# ------------------------------------------------------------------ review F3, F4, F6
@needs_root
def test_python_in_kafka_sh_imports_nothing_from_the_working_directory(shared, tmp_path):
    """Before: kafka.sh ran its Python as ``python -`` (and ``-c``), which puts the
    current directory first on sys.path: run from a directory another user may write to
    (/tmp), their ``uuid.py`` ran as the caller at ``cluster-ids`` (and ``start``), their
    ``datetime.py`` or ``tempfile.py`` at ``compose-secrets`` (root here: the planted
    module wrote its uid into a file). Now every Python it starts has -P and
    PYTHONSAFEPATH=1: nothing is imported from the working directory."""
    pwned = shared / "PWNED"
    plant = shared / "plant.py"
    for module in ("uuid", "datetime", "tempfile"):
        plant.write_text(f"import os\nopen({str(pwned)!r}, 'a').write('{module} ran as uid %d\\n' % os.getuid())\n")
        plant.chmod(0o644)
        as_nobody("cp", plant, shared / f"{module}.py")
    plant.unlink()
    done = script("cluster-ids", "3", cwd=shared)
    assert not pwned.exists(), pwned.read_text()
    assert done.returncode == 0 and len(done.stdout.split()) == 3, done.stderr
    done = script("compose-secrets", tmp_path / "secrets", cwd=shared)
    assert not pwned.exists(), pwned.read_text()
    assert done.returncode == 0, done.stderr


@needs_root
@pytest.mark.skipif(shutil.which("mvn") is None or shutil.which("java") is None, reason="runs Maven: needs mvn and java")
def test_fetch_takes_no_maven_settings_from_a_directory_above_the_jar_cache(shared):
    """Before: ``kafka.sh fetch`` ran ``mvn -f CACHE/pom.xml``, and Maven looks for the
    first ``.mvn`` directory upward from the pom: with the cache in /tmp, another user's
    ``/tmp/.mvn/jvm.config`` (``-javaagent:...``) gave the JVM that ran as the caller
    their options. Here the planted option logs to a file, which the caller's JVM wrote
    (MAVEN_OPTS=-version keeps Maven itself from running, so nothing is downloaded). Now
    the cache has its own ``.mvn`` and is Maven's base directory (MAVEN_BASEDIR)."""
    pwned = shared / "PWNED"
    as_nobody("mkdir", "-m", "755", shared / ".mvn")
    as_nobody("sh", "-c", f"echo '-Xlog:os=info:file={pwned}' > {shared}/.mvn/jvm.config")
    cache = shared / "cache"
    env = {"DPSTREAM_KAFKA_HOME": str(cache), "MAVEN_OPTS": "-version", "MAVEN_BASEDIR": ""}
    script("fetch", env=env)                   # fails at the end (-version fetched nothing): what ran is the point
    assert not pwned.exists(), "the planted .mvn/jvm.config was applied, as uid %d" % pwned.stat().st_uid
    assert (cache / ".mvn").is_dir() and (cache / "pom.xml").is_file()


def posix_acl(*entries: tuple[int, int, int]) -> bytes:
    """A system.posix_acl_access value (what ``setfacl`` writes): version 2, then (tag,
    permissions, id) for each entry, sorted by tag."""
    import struct
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def grant_nobody(path: Path, owner: int, others: int) -> None:
    """``setfacl -m u:nobody:rwx PATH`` (the owner's and others' permissions kept, the
    group's r-x): its mode then shows the mask, group rwx."""
    anyone = 0xFFFFFFFF
    acl = posix_acl((0x01, owner, anyone), (0x02, 7, NOBODY), (0x04, 5, anyone), (0x10, 7, anyone),
                    (0x20, others, anyone))
    try:
        os.setxattr(path, "system.posix_acl_access", acl)
    except OSError as e:
        pytest.skip(f"no POSIX ACLs here: {e}")


@needs_root
def test_a_jar_cache_an_acl_lets_another_user_write_to_is_refused(tmp_path):
    """Before: a POSIX ACL granting another user write (``setfacl -m u:nobody:rwx``) got
    past "writable by no one else": the mode's group bits show the ACL's mask, and a
    group-writable directory whose group has the owner as its only member (root's group
    here) counts as private. The cache, and a jar in it nobody could rewrite, were used.
    Now nothing with an access ACL is taken for private-group-writable."""
    cache = tmp_path / "cache"
    libs = cache / libs_name()
    libs.mkdir(parents=True)
    (libs / ".complete").touch()
    cache.chmod(0o775)                         # root:root, group writable: root's private group
    os.chown(cache, 0, 0)
    env = {"DPSTREAM_KAFKA_HOME": str(cache)}
    done = script("fetch", env=env)
    assert done.returncode == 0 and done.stdout.strip() == str(libs), done.stderr
    cache.chmod(0o755)
    grant_nobody(cache, 7, 5)
    assert (cache.stat().st_mode & 0o777) == 0o775
    line = one_line(script("fetch", env=env))
    assert f"refusing the jar cache {cache} (owner uid 0, mode 775)" in line, line

    os.removexattr(cache, "system.posix_acl_access")
    cache.chmod(0o700)
    jar = libs / "kafka.jar"                   # a jar in it another user may rewrite
    jar.write_bytes(b"")
    jar.chmod(0o644)
    os.chown(jar, 0, 0)
    grant_nobody(jar, 6, 4)
    line = one_line(script("fetch", env=env))
    assert f"refusing the jar cache {cache}: {jar} in it is writable by other users (mode 674)" in line, line


# ------------------------------------------------------------------ review F5
def complete_cache(cache: Path) -> Path:
    """A jar cache that ``fetch`` takes as fetched (its ``.complete`` marker): it then only
    prints the jar directory, nothing is downloaded."""
    libs = cache / libs_name()
    libs.mkdir(parents=True, mode=0o700)
    (libs / ".complete").touch()
    return libs


@needs_root
def test_a_directory_passed_through_but_not_on_the_resolved_path_is_judged(shared, tmp_path):
    """Before: safe_dir judged only the directories on the resolved path. The caller's
    link ``team/cache -> VCACHE`` in a directory another user owns (``team``, 0755) was
    followed unjudged, ``fetch`` accepted ``team/cache/kafka`` and then went on using the
    name as given (``$HOME_DIR``, ``$LIBS``), through the link that user may rename their
    own over at any time; a directory of theirs left by ``..`` was never looked at either.
    Now both are refused in one line, before anything is used."""
    vcache = tmp_path / "vcache"              # root's, 0700: the link's target is fine
    vcache.mkdir(mode=0o700)
    complete_cache(vcache / "kafka")
    team = shared / "team"
    as_nobody("mkdir", "-m", "755", team)
    (team / "cache").symlink_to(vcache)       # root's link, in nobody's directory
    home = team / "cache" / "kafka"
    line = one_line(script("fetch", env={"DPSTREAM_KAFKA_HOME": str(home)}))
    assert (f"refusing the jar cache {home}: {team}, passed through on the way to it (a link in it followed,"
            f" or left by ..), belongs to uid {NOBODY}") in line, line

    mine = shared / "mine"                    # shared/theirs/../mine: theirs is left by ..
    mine.mkdir(mode=0o755)
    complete_cache(mine / "kafka")
    theirs = shared / "theirs"
    as_nobody("mkdir", "-m", "755", theirs)
    home = f"{theirs}/../mine/kafka"
    line = one_line(script("fetch", env={"DPSTREAM_KAFKA_HOME": home}))
    assert f"refusing the jar cache {home}: {theirs}, passed through" in line and f"uid {NOBODY}" in line, line


@needs_root
def test_a_path_through_a_link_of_roots_in_a_root_owned_directory_is_accepted_and_used_resolved(shared, tmp_path):
    """The rule still takes a link of the caller's (root's) in a directory only root may
    change, and ``..`` out of the caller's own directory; the script then works in the
    resolved directory (what ``fetch`` prints, the state ``status`` names), not through
    the link."""
    base = shared.parent                      # root's, 0755
    vcache = tmp_path / "vcache"
    vcache.mkdir(mode=0o700)
    libs = complete_cache(vcache / "kafka")
    (base / "cache").symlink_to(vcache)
    done = script("fetch", env={"DPSTREAM_KAFKA_HOME": str(base / "cache" / "kafka")})
    assert done.returncode == 0 and done.stdout.strip() == str(libs), done.stderr
    done = script("fetch", env={"DPSTREAM_KAFKA_HOME": f"{tmp_path}/vcache/../vcache/kafka"})
    assert done.returncode == 0 and done.stdout.strip() == str(libs), done.stderr

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (base / "states").symlink_to(tmp_path)   # the state directory itself may not be a link
    env = {"DPSTREAM_KAFKA_STATE": str(base / "states" / "state"), "KAFKA_PORT": str(free_port()),
           "KAFKA_CONTROLLER_PORT": str(free_port())}
    done = script("status", env=env)
    assert done.returncode == 1 and done.stdout.strip() == f"not running (state in {state})", done.stderr
