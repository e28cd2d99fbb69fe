"""The CLI's embedded commands, as a user runs them."""
import json
from pathlib import Path

import pytest

from dpstream.streams.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_run_over_the_shipped_example_files_writes_every_output_topic(tmp_path, monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    ex = ROOT / "examples"
    assert main(["run", "--models", str(ex / "card-fraud.model.json"),
                 "--examples", str(ex / "card-fraud.examples.jsonl"),
                 "--queries", str(ex / "card-fraud.queries.jsonl"), "--out", str(tmp_path)]) == 0
    preds = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(preds) == 20_000 + 2_000
    assert (tmp_path / "ledger.jsonl").read_text() and not (tmp_path / "rejected.jsonl").read_text()
    queries = [p for p in preds if p["kind"] == "query"]
    assert sum(p["label"] is not None for p in queries) == 2_000


def test_run_without_a_key_fails_clearly(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DPSTREAM_SECRET_KEY", raising=False)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    assert main(["run", "--models", str(ROOT / "examples/card-fraud.model.json"),
                 "--out", str(tmp_path)]) == 2
    assert "no secret key" in capsys.readouterr().err


def test_schemas_command_writes_valid_json_schemas(tmp_path):
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    names = {p.stem for p in tmp_path.glob("*.json")}
    assert {"ModelConfig", "LabeledExample", "Query", "Prediction", "Rejected"} <= names
    schema = json.loads((tmp_path / "Prediction.json").read_text())
    assert "x" not in schema["properties"] and "active" not in schema["properties"]


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_small_stream(capsys):
    assert main(["demo", "--fraud-events", "2000", "--queries", "300", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "card-fraud" in out and "credit-risk" in out and "risk-score" in out and "eps charged" in out
    assert "non-private" in out and "majority" in out and "per example" in out
    assert "rejected inputs: 0" in out


def test_run_then_replay_verifies_and_a_tampered_export_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    ex = ROOT / "examples"
    main(["run", "--models", str(ex / "card-fraud.model.json"),
          "--examples", str(ex / "card-fraud.examples.jsonl"), "--out", str(tmp_path)])
    assert main(["replay", "--dir", str(tmp_path)]) == 0
    assert "OK: every release reproduced" in capsys.readouterr().out
    path = tmp_path / "predictions.jsonl"
    lines = path.read_text().splitlines()
    i = 10
    row = json.loads(lines[i])
    row["version"] += 1
    lines[i] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    assert main(["replay", "--dir", str(tmp_path)]) == 1
    assert f"seq {row['seq']}" in capsys.readouterr().out
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "ffeeddccbbaa99887766554433221100" * 2)
    assert main(["replay", "--dir", str(tmp_path)]) == 2


@pytest.mark.parametrize("make", ["missing", "empty", "no-log"])
@pytest.mark.parametrize("no_key", [False, True])
def test_replay_and_report_of_nothing_fail_instead_of_saying_ok(tmp_path, monkeypatch, capsys, make, no_key):
    """Issue 10: an audit of a missing or empty export must not print OK."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    target = tmp_path / "export"
    if make != "missing":
        target.mkdir()
    if make == "empty":
        (target / "model-events.jsonl").write_text("")
    args = ["replay", "--dir", str(target)] + (["--no-key"] if no_key else [])
    assert main(args) == 2
    assert main(["audit-report", "--dir", str(target), "--out", str(tmp_path / "r")]
                + (["--no-key"] if no_key else [])) == 2
    out = capsys.readouterr()
    assert "OK" not in out.out and not (tmp_path / "r" / "report.html").exists()


def test_keyless_replay_catches_a_ledger_cut_short(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    ex = ROOT / "examples"
    main(["run", "--models", str(ex / "card-fraud.model.json"),
          "--examples", str(ex / "card-fraud.examples.jsonl"), "--out", str(tmp_path)])
    assert main(["replay", "--dir", str(tmp_path), "--no-key"]) == 0
    path = tmp_path / "ledger.jsonl"
    path.write_text("")                       # the one epoch charge cut away
    assert main(["replay", "--dir", str(tmp_path), "--no-key"]) == 1
    assert "no ledger entry" in capsys.readouterr().out


@pytest.mark.parametrize("config, exit_code, needle", [
    ({"model_id": "m", "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_active": 3}}, 1,
     "registration: give the dimension, or declare features"),
    ({"model_id": "m", "dimension": 10, "budget": {"epsilon": -1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_active": 3}}, 1,
     "budget.epsilon: Input should be greater than 0 (got -1.0)"),
    ({"model_id": "m", "dimension": 10, "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_activ": 3}}, 1,
     "params: unknown field 'max_activ' (did you mean 'max_active'?"),
    ({"model_id": "m", "dimension": 10, "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "dp_winnow"}}, 1,
     "unknown kind 'dp_winnow': the kinds are continual_winnow, decision_list, dp_ftrl, predictor, winnow"),
    ({"model_id": "m", "dimension": 200_000, "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "winnow", "eps_hat": 1, "eta": 0.1, "m": 10, "K": 2, "L": 2}}, 1, "record limit"),
])
def test_register_validates_locally_and_sends_nothing_invalid(tmp_path, capsys, config, exit_code, needle):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(config))
    assert main(["models", "register", str(path), "--broker", "127.0.0.1:1"]) == exit_code
    assert needle in capsys.readouterr().err


def test_produce_refuses_a_topic_that_is_not_an_input(capsys):
    assert main(["produce", "--topic", "exampels", "--file", "x.jsonl", "--broker", "127.0.0.1:1"]) == 2
    assert "must be one of" in capsys.readouterr().err


def test_repeated_log_lines_are_held_back_and_counted():
    import logging

    from dpstream.streams.observe import RepeatFilter
    f = RepeatFilter(window=60)
    records = [logging.LogRecord("aiokafka", logging.ERROR, "x", 1, "Unable to connect", None, None)
               for _ in range(1000)]
    assert sum(f.filter(r) for r in records) == 1
    other = logging.LogRecord("aiokafka", logging.ERROR, "x", 1, "another line", None, None)
    assert f.filter(other)


def test_status_lists_only_the_models_this_worker_owns():
    from dpstream.streams.observe import collect_status, model_partition
    cfg = {"model_id": "m", "params": {"kind": "continual_winnow", "max_active": 2},
           "budget": {"epsilon": 1.0, "delta": 1e-6}, "dimension": 4}
    head = {"n": 3, "learner": {"epoch": 0, "b": 1, "ledger": {"budget_epsilon": 1.0, "budget_delta": 1e-6}}}
    state = {f"model/{m}/{k}": v for m in ("a", "b") for k, v in (("config", cfg), ("head", head))}
    mine = model_partition("a", 4)
    shown = collect_status(state, lambda m: model_partition(m, 4) == mine)
    assert "a" in shown and all(model_partition(m, 4) == mine for m in shown)


def test_acls_print_the_plan_for_a_prefix_with_named_users(capsys):
    assert main(["acls", "--prefix", "team-", "--user", "producer=ingest"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("ALLOW User:") for line in lines)
    assert any("User:ingest" in line and "Write" in line and "topic team-examples" in line for line in lines)
    assert not any("User:producer " in line for line in lines)
    assert any("User:team-worker" in line and "group team-dpstream" in line for line in lines)   # its own users
    assert not any("(prefix)" in line for line in lines)                                         # literal names only
    assert main(["acls", "--prefix", "team-", "--role", "consumer"]) == 0
    consumer = capsys.readouterr().out.splitlines()
    assert {line.split()[2] for line in consumer} == {"Read", "Describe"}
    assert all("team-predictions" in line for line in consumer)


@pytest.mark.parametrize("args,needle", [
    (["--user", "producer"], "expected ROLE=NAME"),
    (["--user", "admin=root"], "expected ROLE=NAME"),
    (["--prefix", "team-", "--app-id", "other"], "must start with the topic prefix"),
])
def test_acls_refuse_what_cannot_be_applied_in_one_line(capsys, args, needle):
    assert main(["acls", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]
