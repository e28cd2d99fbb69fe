"""The CLI contract (issue 43): every command that ``dpstream --help`` lists runs through
the installed entry point as a user runs it, and its exit code and output are checked.
The commands that need a broker share one worker on one topic prefix (module scope).
``test_every_listed_command_has_a_contract_case`` fails when a command appears without a
case in ``CASES``."""
import asyncio
import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from .kafka_helpers import Worker

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples"
DPSTREAM = str(Path(sys.executable).parent / "dpstream")
KEY = "00112233445566778899aabbccddeeff" * 2
N_EXAMPLES, N_QUERIES = 2000, 200

#: command -> the test that is its contract case
CASES = {"demo": "test_demo", "run": "test_run_replay_and_audit_report",
         "replay": "test_run_replay_and_audit_report", "audit-report": "test_run_replay_and_audit_report",
         "acls": "test_acls", "features": "test_features", "schemas": "test_schemas",
         "worker": "test_worker_models_and_produce", "models": "test_worker_models_and_produce",
         "produce": "test_worker_models_and_produce", "consume": "test_consume",
         "export": "test_export_and_replay_of_the_topics", "topics": "test_topics"}


def dpstream(*args, input=None, timeout=180, key=True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    if key:
        env["DPSTREAM_SECRET_KEY"] = KEY
    return subprocess.run([DPSTREAM, *args], input=input, capture_output=True, text=True, env=env,
                          timeout=timeout)


def ok(done, *needles: str, out: str = "stdout") -> str:
    """The named stream of a command that exited 0 and said each needle there."""
    text = getattr(done, out)
    assert done.returncode == 0, done.stderr[-3000:]
    for needle in needles:
        assert needle in text, text[-3000:]
    return text


def one_line(done, code: int) -> str:
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == code and len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    return err[0]


def listed_commands() -> list[str]:
    text = ok(dpstream("--help"))
    section = text[text.index("positional arguments:"):text.index("options:")]
    return re.findall(r"^    (\S+)", section, re.M)


def test_every_listed_command_has_a_contract_case():
    listed = listed_commands()
    assert set(listed) == set(CASES), f"commands without a contract case: {set(listed) - set(CASES)}"
    assert all(CASES[c] in globals() for c in CASES)
    for command in listed:
        ok(dpstream(command, "--help"), "usage: dpstream " + command)


# ---------------------------------------------------------------- without a broker
def test_demo():
    out = ok(dpstream("demo", "--fraud-events", "300", "--queries", "50", "--quiet"))
    assert all(m in out for m in ("card-fraud", "credit-risk", "risk-score", "rejected inputs: 0"))


def test_run_replay_and_audit_report(tmp_path):
    examples = "\n".join((EX / "card-fraud.examples.jsonl").read_text().splitlines()[:1000]) + "\n"
    (tmp_path / "e.jsonl").write_text(examples)
    out = tmp_path / "out"
    ok(dpstream("run", "--models", str(EX / "card-fraud.model.json"), "--examples", str(tmp_path / "e.jsonl"),
                "--queries", str(EX / "card-fraud.queries.jsonl"), "--out", str(out)),
       "3,001 inputs -> 3,000 predictions, 2,000 answers, 1 ledger, 0 releases, 0 rejected")
    ok(dpstream("replay", "--dir", str(out)), "OK: every release reproduced")
    ok(dpstream("replay", "--dir", str(out), "--no-key", key=False), "OK: ")
    ok(dpstream("audit-report", "--dir", str(out), "--out", str(tmp_path / "report")),
       "report.html (public)")
    assert (tmp_path / "report" / "report.html").exists()


def test_acls():
    lines = ok(dpstream("acls", "--prefix", "team-")).splitlines()
    assert lines and all(line.startswith("ALLOW User:") for line in lines)


def test_features():
    out = ok(dpstream("features", "--sample", str(EX / "card-fraud.examples.jsonl")))
    assert {f["name"] for f in json.loads(out)} == {"merchant", "country", "channel", "hour", "amount",
                                                     "flag_0", "flag_1", "flag_2", "flag_3", "flag_4"}


def test_schemas(tmp_path):
    ok(dpstream("schemas", "--out", str(tmp_path)), "7 JSON Schemas")
    assert len(json.loads((tmp_path / "ModelConfig.json").read_text())["properties"]["params"]["oneOf"]) >= 5


# ---------------------------------------------------------------- with a broker
class Deployment:
    """One worker (started through the entry point) on a fresh topic prefix."""

    def __init__(self, bootstrap: str, tmp: Path):
        self.bootstrap, self.tmp = bootstrap, tmp
        self.prefix = f"c{uuid.uuid4().hex[:8]}-"
        self.worker = Worker(bootstrap, self.prefix, tmp, command=(DPSTREAM,), env={"DPSTREAM_SECRET_KEY": KEY})

    def cli(self, *args, **kw) -> subprocess.CompletedProcess:
        return dpstream(*args, "--bootstrap-server", self.bootstrap, "--prefix", self.prefix, **kw)

    def topics(self) -> set[str]:
        from dpstream.streams.worker.kafka import Kafka, running

        async def listed():
            async with running(Kafka(self.bootstrap).admin()) as admin:
                return set(await admin.list_topics())
        return asyncio.run(listed())


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap, tmp_path_factory):
    d = Deployment(kafka_bootstrap, tmp_path_factory.mktemp("contract"))
    d.worker.start()
    yield d
    d.worker.stop()


def test_worker_models_and_produce(deployment):
    """Register, list and show (before: ``models list`` printed nothing after a
    registration the worker accepted), a conflicting registration refused before sending
    (before: "sent", exit 0), records for an unknown model refused (before: sent and all
    dead-lettered), 0/1 labels read as -1/+1, and a CSV file of queries."""
    d = deployment
    assert "dpstream worker ready" in d.worker.log.read_text()
    model = str(EX / "card-fraud.model.json")
    ok(d.cli("models", "register", model), "registration of card-fraud (continual_winnow) sent")
    ok(d.cli("models", "register", model), "card-fraud is already registered with this config; nothing sent")
    other = json.loads((EX / "card-fraud.model.json").read_text())
    other["budget"]["epsilon"] = 5.0
    (d.tmp / "other.json").write_text(json.dumps(other))
    assert "model card-fraud is already registered with another config (budget.epsilon: 2.0 in force, " \
           "5.0 here)" in one_line(d.cli("models", "register", str(d.tmp / "other.json")), 1)
    listed = ok(d.cli("models", "list"))
    assert re.search(r"^card-fraud\s+continual_winnow\s+d=138\b", listed, re.M), listed
    shown = ok(d.cli("models", "show", "card-fraud"))
    assert shown.split("\n")[1] == "privacy unit: one example: the guarantee covers the contents " \
        "(features and label) of any one example"
    assert json.loads(shown[shown.index("\n{") + 1:])["model_id"] == "card-fraud"
    assert "no registration of 'nope' in force" in one_line(d.cli("models", "show", "nope"), 1)

    records = [json.loads(line) for line in (EX / "card-fraud.examples.jsonl").read_text().splitlines()[:N_EXAMPLES]]
    (d.tmp / "e01.jsonl").write_text("".join(json.dumps({**r, "y": (r["y"] + 1) // 2}) + "\n" for r in records))
    err = ok(d.cli("produce", "--topic", "examples", "--file", str(d.tmp / "e01.jsonl")), out="stderr")
    assert "labels 0/1 read as -1/+1 (0 -> -1)" in err and f"{N_EXAMPLES:,} records -> {d.prefix}examples, " \
        "acknowledged" in err and f"every declared field had a value of its type in all {N_EXAMPLES:,}" in err
    queries = [json.loads(line) for line in (EX / "card-fraud.queries.jsonl").read_text().splitlines()[:N_QUERIES]]
    with open(d.tmp / "q.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query_id", *queries[0]["features"]])
        w.writerows([q["query_id"], *q["features"].values()] for q in queries)
    ok(d.cli("produce", "--topic", "queries", "--file", str(d.tmp / "q.csv"), "--model-id", "card-fraud"),
       f"{N_QUERIES} records -> {d.prefix}queries", out="stderr")
    (d.tmp / "nope.jsonl").write_text(json.dumps({**records[0], "model_id": "nope"}) + "\n")
    assert "no registration in force for model id 'nope' (1 records) (registered: card-fraud); nothing " \
           "sent" in one_line(d.cli("produce", "--topic", "examples", "--file", str(d.tmp / "nope.jsonl")), 1)


def test_consume(deployment):
    """``--from-beginning`` reads what is there; without it, as Kafka's console consumer,
    only what arrives from now on (before: always from the start, and no way to follow);
    a misspelt topic is refused and not created (before: created)."""
    d = deployment
    lines = ok(d.cli("consume", "--topic", "predictions", "--from-beginning", "--max-messages",
                     str(N_EXAMPLES + N_QUERIES), "--timeout", "120", timeout=300)).splitlines()
    assert len(lines) == N_EXAMPLES + N_QUERIES and {json.loads(x)["model_id"] for x in lines} == {"card-fraud"}
    follow = subprocess.Popen([DPSTREAM, "consume", "--topic", "predictions", "--max-messages", "1",
                               "--timeout", "60", "--bootstrap-server", d.bootstrap, "--prefix", d.prefix],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    query = json.loads((EX / "card-fraud.queries.jsonl").read_text().splitlines()[0])
    for k in range(30):                   # until the follower, positioned at the end, sees one
        (d.tmp / "new.jsonl").write_text(json.dumps({**query, "query_id": f"new-{k}"}) + "\n")
        ok(d.cli("produce", "--topic", "queries", "--file", str(d.tmp / "new.jsonl")))
        try:
            out, err = follow.communicate(timeout=2)
            break
        except subprocess.TimeoutExpired:
            continue
    else:
        follow.kill()
        pytest.fail("a following consume printed nothing new")
    assert follow.returncode == 0, err
    assert json.loads(out)["query_id"].startswith("new-"), out
    line = one_line(d.cli("consume", "--topic", "exampels", "--timeout", "1"), 2)
    assert f"did you mean {d.prefix}examples?" in line and "no topic created" in line
    assert d.prefix + "exampels" not in d.topics()
    # Kafka's console consumer's --timeout-ms (before: an unknown flag, refused with the
    # top-level usage): from the end, nothing new within 500 ms, so it ends with nothing
    assert ok(d.cli("consume", "--topic", "predictions", "--timeout-ms", "500")) == ""


def test_export_and_replay_of_the_topics(deployment):
    d = deployment
    ok(d.cli("export", "--out", str(d.tmp / "audit")), "model events")
    ok(dpstream("replay", "--dir", str(d.tmp / "audit")), "OK: every release reproduced")


def test_topics(deployment):
    """The worker made its topics as planned: ``plan`` lists them, ``check`` finds no difference."""
    out = ok(deployment.cli("topics", "plan", "--app-id", f"{deployment.prefix}app"))
    assert f"{deployment.prefix}ledger " in out and "kafka-topics.sh --bootstrap-server" in out
    ok(deployment.cli("topics", "check", "--app-id", f"{deployment.prefix}app"), "as planned", out="stderr")


def test_an_interrupted_produce_says_how_to_resume_and_the_resumed_one_sends_each_record_once(kafka_bootstrap, tmp_path):
    """Before: Ctrl-C exited 130 with no count, so a re-run sent again what had been sent.
    No worker runs on this prefix, so the topic holds exactly what produce sent. The
    interrupt comes once the terminal's progress bar shows records acknowledged (produce
    runs on a pseudo-terminal, as a user's would): an event, not a guess at timing."""
    import pty
    import select

    from dpstream.streams.worker.kafka import Kafka
    from dpstream.streams.tools.topicread import read_to_end
    n = 60_000
    path = tmp_path / "e.jsonl"
    path.write_text("".join(json.dumps({"model_id": "m", "features": {"n": i}, "y": i % 2}) + "\n"
                            for i in range(n)))
    prefix = f"r{uuid.uuid4().hex[:8]}-"
    args = [DPSTREAM, "produce", "--topic", "examples", "--file", str(path), "--no-check",
            "--bootstrap-server", kafka_bootstrap, "--prefix", prefix]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stderr=follower, stdout=subprocess.DEVNULL)
    os.close(follower)
    seen, interrupted, deadline = "", False, time.time() + 180
    while time.time() < deadline:
        if not select.select([leader], [], [], 1.0)[0]:
            continue
        try:
            chunk = os.read(leader, 65536)
        except OSError:                     # the command exited: the terminal closed
            break
        if not chunk:
            break
        seen += re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", chunk.decode(errors="replace"))   # no colours
        if not interrupted and any(int(k) > 0 for k in re.findall(r"sending\D*?(\d+)/60000", seen)):
            proc.send_signal(signal.SIGINT)
            interrupted = True
    proc.wait(120)
    os.close(leader)
    assert interrupted, seen[-2000:]
    m = re.search(r"interrupted: ([\d,]+) of 60,000 records sent and acknowledged; resume with the "
                  r"same command and --skip (\d+)", seen)
    assert proc.returncode == 130 and m, seen[-2000:]
    acked = int(m.group(2))
    assert int(m.group(1).replace(",", "")) == acked and 0 < acked < n
    done = subprocess.run(args + ["--skip", str(acked)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"{n - acked:,} records -> {prefix}examples (the first {acked:,} of " \
        f"60,000 skipped)" in done.stderr, done.stderr
    records = asyncio.run(read_to_end(Kafka(kafka_bootstrap), prefix + "examples", timeout=10))
    sent = sorted(json.loads(r.value)["features"]["n"] for r in records)
    assert sent == list(range(n))
