"""A new user's mistakes, through the installed ``dpstream`` command: each fails with one
line on stderr that says what to fix, a non-zero exit, and no traceback (issue: the first
hour, second pass)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DPSTREAM = str(Path(sys.executable).parent / "dpstream")
KEY = "00112233445566778899aabbccddeeff" * 2
NO_BROKER = "127.0.0.1:1"


def dpstream(*args, key: bool = True, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    if key:
        env["DPSTREAM_SECRET_KEY"] = KEY
    return subprocess.run([DPSTREAM, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def one_line(done) -> str:
    """The single stderr line of a failed command (asserting there is one, no traceback)."""
    err = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(err) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Unclosed" not in done.stderr
    return err[0]


def config(**params) -> dict:
    return {"model_id": "m", "dimension": 10, "budget": {"epsilon": 1.0, "delta": 1e-6},
            "params": {"kind": "continual_winnow", "max_active": 3, **params}}


@pytest.mark.parametrize("text, needle", [
    (json.dumps({**config(), "params": {"kind": "continual_winnow", "max_activ": 3}}),
     "unknown field 'max_activ' (did you mean 'max_active'?"),
    (json.dumps({**config(), "budget": {"epsilon": -1, "delta": 1e-6}}),
     "budget.epsilon: Input should be greater than 0 (got -1)"),
    ('{"model_id": "m", "dimension": 10,\n "budget": {"epsilon": 1, "delta": 1e-6},\n'
     ' "params": {"kind": "winnow",}}', "not JSON at line 3, column"),
    (json.dumps({**config(), "params": {"kind": "dp_winnow"}}),
     "unknown kind 'dp_winnow': the kinds are continual_winnow, decision_list, dp_ftrl, predictor, winnow"),
    (json.dumps({**config(), "params": {"kind": "winnow", "eps_hat": 0.5, "eta": 0.01, "m": 100,
                                        "K": 3, "L": 3.0}, "budget": {"epsilon": 0.6, "delta": 1e-6}}),
     "cannot pay for one update"),
    (json.dumps({**config(), "dimension": 10_000_000}), "dimension 10,000,000 is above"),
    (json.dumps({**config(), "dimension": 1, "params": {"kind": "predictor", "generator": "thresholds",
                                                         "k": 1000, "m": 2, "v_max": 4}}),
     "m=2 examples per block is below the 10"),
])
def test_a_registration_error_says_what_to_fix(tmp_path, text, needle):
    path = tmp_path / "model.json"
    path.write_text(text)
    assert needle in one_line(dpstream("models", "register", str(path), "--broker", NO_BROKER))


def test_register_takes_a_jsonl_file_of_several_models(tmp_path):
    path = tmp_path / "models.jsonl"
    path.write_text("\n".join(json.dumps({**config(), "model_id": f"m{i}"}) for i in range(3)))
    line = one_line(dpstream("models", "register", str(path), "--broker", NO_BROKER))
    assert "cannot reach the Kafka broker" in line          # all three validated, then sending failed


@pytest.mark.parametrize("args", [("consume", "--topic", "predictions", "--timeout", "1"),
                                  ("models", "list"), ("export", "--out", "x")])
def test_without_a_broker_a_command_says_so_in_one_line(args, tmp_path):
    line = one_line(dpstream(*args, "--broker", NO_BROKER, cwd=tmp_path))
    assert "cannot reach the Kafka broker at 127.0.0.1:1" in line


def test_run_with_a_missing_file_says_which(tmp_path):
    assert "cannot read missing.jsonl" in one_line(dpstream("run", "--examples", "missing.jsonl",
                                                            "--out", str(tmp_path / "o"), cwd=tmp_path))


def test_produce_checks_records_locally_and_sends_nothing_wrong(tmp_path):
    line = one_line(dpstream("produce", "--topic", "examples", "--file",
                             str(ROOT / "examples/card-fraud.queries.jsonl"), "--broker", NO_BROKER))
    assert "line 1 would be dead-lettered on examples" in line and "y: missing" in line


def test_a_refused_registration_fails_the_run_and_its_events_point_at_it(tmp_path):
    bad = {**config(), "budget": {"epsilon": 1e-9, "delta": 1e-6}}
    (tmp_path / "m.json").write_text(json.dumps(bad))
    (tmp_path / "e.jsonl").write_text(json.dumps({"model_id": "m", "active": [1], "y": 1}) + "\n")
    done = dpstream("run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                    "--out", str(tmp_path / "o"))
    assert done.returncode == 1 and "registration at models:0:0 refused" in done.stderr
    rejected = [json.loads(line) for line in (tmp_path / "o/rejected.jsonl").read_text().splitlines()]
    assert "refused registration has its own dead letter" in rejected[-1]["reason"]


def test_a_record_keyed_with_another_models_id_is_refused():
    import asyncio

    from dpstream.agents.records import RawRecord
    from dpstream.agents.sequencer import sequence_batch
    out = []

    async def emit(topic, key, value):
        out.append((topic, value))

    state = {"config/a": {"type": "model", "model_id": "a", "dimension": 4,
                          "budget": {"epsilon": 1.0, "delta": 1e-6},
                          "params": {"kind": "continual_winnow", "max_active": 2}}}
    record = RawRecord("examples", 0, 0, b"b", json.dumps({"model_id": "a", "active": [1], "y": 1}).encode())
    asyncio.run(sequence_batch([record], state, emit))
    assert out[0][0] == "rejected" and "key is not its model_id" in out[0][1]["reason"]


def test_audit_reports_keyless_and_internal_are_written_as_they_should_be(tmp_path):
    ex = ROOT / "examples"
    assert dpstream("run", "--models", str(ex / "card-fraud.model.json"), "--examples",
                    str(ex / "card-fraud.examples.jsonl"), "--out", str(tmp_path / "run")).returncode == 0
    keyless = dpstream("audit-report", "--dir", str(tmp_path / "run"), "--out", str(tmp_path / "pub"), key=False)
    assert keyless.returncode == 0 and "keyless report" in keyless.stderr
    assert "data-verified='no'" in (tmp_path / "pub/report.html").read_text()
    internal = dpstream("audit-report", "--dir", str(tmp_path / "run"), "--out", str(tmp_path / "int"),
                        "--internal")
    assert internal.returncode == 0, internal.stderr
    assert stat.S_IMODE((tmp_path / "int").stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "int").iterdir()} == {0o600}


def test_progress_goes_to_a_pipe_as_lines_every_few_seconds(capsys):
    from dpstream.streams.cli.progress import Progress
    p = Progress("run", 10_000)
    p.EVERY = 0.0
    p.advance(500)
    p.advance(500)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [l for l in lines if l.startswith("run: ")] and len(lines) == 2 and "1,000/10,000" in lines[1]


def test_schemas_needs_a_directory():
    assert "--out" in dpstream("schemas").stderr


# ---------------------------------------------------------------- issue 43, without a broker
def test_version_prints_the_installed_version():
    from importlib.metadata import version
    done = dpstream("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"dpstream {version('dpstream')}"


def test_features_piped_into_head_stops_quietly(tmp_path):
    """Before: a BrokenPipeError traceback when the reader left."""
    sample = tmp_path / "s.jsonl"
    # a declaration far beyond a pipe's buffer (64 KiB), from 400 fields (a model declares
    # at most 500, schemas/features.py), each a category with ten values of 40 characters
    sample.write_text("".join(json.dumps({f"f{j}": f"{(i * j) % 10:040d}" for j in range(1, 401)}) + "\n"
                              for i in range(50)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    proc = subprocess.Popen([DPSTREAM, "features", "--sample", str(sample)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline().strip() == b"["
    proc.stdout.close()                    # as `| head -n 1` does
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141 and "Traceback" not in err and "Error" not in err, err


def test_produce_maps_0_1_labels_and_refuses_what_no_convention_covers(tmp_path):
    lines = (ROOT / "examples/card-fraud.examples.jsonl").read_text().splitlines()[:3]
    records = [json.loads(line) for line in lines]
    zero_one = tmp_path / "01.jsonl"
    zero_one.write_text("".join(json.dumps({**r, "y": (r["y"] + 1) // 2}) + "\n" for r in records))
    line = one_line(dpstream("produce", "--topic", "examples", "--file", str(zero_one), "--broker", NO_BROKER))
    assert "cannot reach the Kafka broker" in line            # checked locally, then sending failed
    two = tmp_path / "2.jsonl"
    two.write_text("".join(json.dumps({**r, "y": 2}) + "\n" for r in records))
    done = dpstream("produce", "--topic", "examples", "--file", str(two), "--broker", NO_BROKER)
    assert done.returncode == 2 and "line 1: the label is another number, not one of -1/+1, 0/1 or true/false" \
        in one_line(done) and "nothing sent" in one_line(done)


def test_a_dash_reads_standard_input(tmp_path):
    """``-`` for stdin (Kafka's and Unix tools' convention): run's examples, a registration."""
    ex = ROOT / "examples"
    lines = (ex / "card-fraud.examples.jsonl").read_text().splitlines()[:500]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    done = subprocess.run([DPSTREAM, "run", "--models", str(ex / "card-fraud.model.json"), "--examples", "-",
                           "--out", str(tmp_path / "o")], input="\n".join(lines) + "\n", text=True,
                          capture_output=True, env={**env, "DPSTREAM_SECRET_KEY": KEY}, timeout=120)
    assert done.returncode == 0 and "501 inputs -> 500 predictions" in done.stdout, done.stderr
    done = subprocess.run([DPSTREAM, "models", "register", "-", "--broker", NO_BROKER], text=True,
                          input=json.dumps({**config(), "params": {"kind": "continual_winnow", "max_activ": 3}}),
                          capture_output=True, env=env, timeout=120)
    assert "standard input: params: unknown field 'max_activ'" in one_line(done)


def test_produce_shows_progress_on_a_terminal(tmp_path):
    """Before: nothing on a terminal for seconds while produce read and checked its file."""
    import pty
    lines = (ROOT / "examples/card-fraud.examples.jsonl").read_text().splitlines()
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(lines * 3) + "\n")
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSTREAM_")}
    proc = subprocess.Popen([DPSTREAM, "produce", "--topic", "examples", "--file", str(path),
                             "--broker", NO_BROKER], stderr=follower, stdout=subprocess.DEVNULL, env=env)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:                     # the command exited: the terminal closed
            break
        if not chunk:
            break
        seen += chunk
    proc.wait(120)
    os.close(leader)
    text = seen.decode(errors="replace")
    assert "dpstream produce: checking" in text and "/60000" in text, text[-2000:]
    assert "cannot reach the Kafka broker" in text
