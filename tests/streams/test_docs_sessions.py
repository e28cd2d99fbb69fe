"""The README and the docs as a user runs them (issue 44): each page's unmarked shell
blocks, in order, in one bash session, against a real broker (tests/docs/blocks.py says
which blocks run where; docs/development.md, "Docs that cannot rot").

The README's session is the user's guide end to end with one broker and one worker: the
Kafka quick start, your own data (a declaration from a public sample, a model file, CSV
records in, answers out), the run without Kafka, and the audit (export, replay with and
without the key, the public and internal reports). It replaces the quick-start test of
issue 10, which ran the quick start block alone, and keeps its checks (a fresh broker,
no ERROR line from the worker, every release reproduced)."""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.docs.blocks import PAGES, ROOT, block_under, session

DEFAULT_TOPICS = {"models", "examples", "queries", "model-events", "predictions", "ledger"}
KEY = "00112233445566778899aabbccddeeff" * 2


def user_env(**extra) -> dict:
    """A user's shell: no key and no secured broker unless the page sets them."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DPSTREAM_SECRET_KEY") and k not in ("KAFKA_SECURE", "DPSTREAM_KAFKA_CONFIG")}
    env.update(extra)
    return env


def user_dir(tmp_path: Path, *names: str) -> Path:
    """A working directory with the repository's files a user's checkout has (the README's
    paths are relative to it); what the session writes lands in tmp."""
    for name in names:
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def run(script: str, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def needs_the_readme_venv() -> None:
    if not (ROOT / ".venv" / "bin" / "dpstream").exists():
        pytest.skip("the docs run the README's .venv (install as the README says)")


def checkout(tmp_path: Path) -> Path:
    """A copy of the repository's files as a clone has them (tracked, and new files not
    ignored), without its .venv: a new user's checkout."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    dest = tmp_path / "dpstream"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow
def test_the_setup_commands_run_verbatim(tmp_path):
    """README, "Set up": the first line a user types, in a checkout of its own with a venv
    of its own (pip's cache holds the wheels the README's test command fetched). Not in the
    repository's .venv: re-installing the project there removes its command and its import
    hook for a moment, under the feet of the tests that run beside this one."""
    block = block_under("README.md", "Set up", "bash")
    done = run(block.text, checkout(tmp_path), user_env())
    assert done.returncode == 0, done.stderr[-3000:]
    out = " ".join(done.stdout.split())
    for model in ("card-fraud", "credit-risk", "risk-score"):
        assert model in out
    assert "22000" in out and "2000/2000" in out        # 20,000 examples and 2,000 queries
    assert "public demo key (not private)" in out


async def _topics(bootstrap: str) -> set:
    from aiokafka.admin import AIOKafkaAdminClient
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


@pytest.mark.kafka
def test_the_readme_runs_as_a_user_would(kafka_bootstrap, tmp_path):
    """The README's session on the broker $DPSTREAM_KAFKA_BOOTSTRAP names, as a user's
    shell would after ``KAFKA_PORT=P scripts/kafka.sh start`` and ``export
    DPSTREAM_KAFKA_BOOTSTRAP=127.0.0.1:P``: the block's own ``scripts/kafka.sh start``
    finds that broker running (its state directory: $DPSTREAM_KAFKA_STATE, else the
    script's default for the port)."""
    port = kafka_bootstrap.rsplit(":", 1)[1]
    env = user_env(KAFKA_PORT=port, DPSTREAM_KAFKA_BOOTSTRAP=kafka_bootstrap)
    status = subprocess.run([str(ROOT / "scripts" / "kafka.sh"), "status"], env=env, capture_output=True, text=True)
    required = os.environ.get("DPSTREAM_REQUIRE_KAFKA") == "1"
    if status.returncode != 0:
        msg = (f"the broker at {kafka_bootstrap} is not scripts/kafka.sh's in {status.stdout.strip()} "
               "(set DPSTREAM_KAFKA_STATE to its state directory)")
        pytest.fail(msg) if required else pytest.skip(msg)
    if DEFAULT_TOPICS & asyncio.run(_topics(kafka_bootstrap)):
        msg = "the README's session needs a fresh broker (its default topics exist already)"
        pytest.fail(msg) if required else pytest.skip(msg)
    needs_the_readme_venv()
    done = run(session("README.md"), user_dir(tmp_path, ".venv", "examples", "scripts"), env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    # the quick start: answers, then the last of 22,000 predictions
    assert [r["model_id"] for r in records[:3]] == ["card-fraud"] * 3 and records[0]["kind"] == "query"
    assert records[3]["model_id"] == "card-fraud"
    assert "continual_winnow" in done.stdout                                      # models list
    # your own data: the credit model's answers, from CSV queries, named by their query_id
    credit = [r for r in records[4:] if r["model_id"] == "credit"]
    assert len(credit) == 2 and all(r["kind"] == "query" and r["query_id"].startswith("c") for r in credit)
    assert all(r["label"] in (-1, 1) and r["status"] == "answered" for r in credit)
    # without Kafka, and the audit
    assert (tmp_path / "out" / "predictions.jsonl").exists()
    assert "OK: every release reproduced" in done.stdout
    assert (tmp_path / "report" / "report.html").exists()
    internal = (tmp_path / "internal" / "report.html").read_text()
    assert "INTERNAL: this report contains information about the private examples" in internal
    assert "dpstream worker ready" in done.stderr
    errors = [line for line in done.stderr.splitlines() if "[ERROR]" in line]
    assert errors == [], errors          # a fresh broker's start-up is not an error
    # what the session leaves in a user's clone is ignored by git (.gitignore)
    left = sorted(p.name + "/" * p.is_dir() for p in tmp_path.iterdir() if not p.is_symlink())
    kept = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *left],
                          cwd=ROOT, capture_output=True, text=True).stdout
    assert [line.split("\t")[-1] for line in kept.splitlines() if line.startswith("::")] == [], kept


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _operations(script: str, prefix: str) -> str:
    """The operations page's worker under a prefix and on a port no other run holds."""
    return script.replace("ops-", prefix).replace("6066", str(free_port()))


CHECKS = {
    "docs/operations.md": (_operations, ("dpstream_events_in_total", '"card-fraud"', "dpstream_budget_spent_epsilon")),
    "docs/deployment.md": (lambda s, prefix: s, ("OK: every release reproduced",)),
}
KAFKA_COMMANDS = ("dpstream worker", "dpstream produce", "dpstream consume", "dpstream models", "dpstream export")
PAGE_SESSIONS = [pytest.param(p, marks=[pytest.mark.kafka] if any(c in session(p) for c in KAFKA_COMMANDS) else [],
                              id=str(p.relative_to(ROOT)))
                 for p in PAGES if session(p) and p.name != "README.md" and p.parent.name == "docs"]


def test_every_page_session_is_checked_here():
    """A docs page that gains a session gets its checks in CHECKS (or the test below fails)."""
    assert {str(p.values[0].relative_to(ROOT)) for p in PAGE_SESSIONS} == set(CHECKS)


@pytest.mark.parametrize("page", PAGE_SESSIONS)
def test_a_docs_page_runs_as_a_user_would(page, request, tmp_path):
    """The page's session, in a user's directory; a page that talks to Kafka runs against
    the test broker (its own topic prefix, so it shares the broker with the README's)."""
    needs_the_readme_venv()
    env = user_env()
    if "kafka" in request.node.keywords:
        env["DPSTREAM_KAFKA_BOOTSTRAP"] = request.getfixturevalue("kafka_bootstrap")
    adjust, expected = CHECKS[str(page.relative_to(ROOT))]
    prefix = f"ops{uuid.uuid4().hex[:8]}-"
    try:
        done = run(adjust(session(page), prefix), user_dir(tmp_path, ".venv", "examples", "scripts"), env,
                   timeout=600)
    finally:                  # the worker's default data directory for that prefix (app id)
        state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        shutil.rmtree(state / "dpstream" / f"worker-{prefix}dpstream", ignore_errors=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for text in expected:
        assert text in done.stdout, (text, done.stdout[-2000:])
    assert "Traceback" not in done.stderr and "[ERROR]" not in done.stderr, done.stderr[-3000:]


def test_the_examples_regenerate_as_examples_readme_says(tmp_path):
    """examples/README.md's command, into a fresh directory (no ``examples/`` in it: the
    command makes it; before, a FileNotFoundError traceback): the shipped files come out
    byte for byte (the README's session and the docs read them)."""
    needs_the_readme_venv()
    user_dir(tmp_path, ".venv")
    assert not (tmp_path / "examples").exists()
    done = run(session("examples/README.md"), tmp_path, user_env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shipped = sorted(p.name for p in (ROOT / "examples").iterdir() if p.name != "README.md")
    assert sorted(p.name for p in (tmp_path / "examples").iterdir()) == shipped
    for name in shipped:
        assert (tmp_path / "examples" / name).read_bytes() == (ROOT / "examples" / name).read_bytes(), name
