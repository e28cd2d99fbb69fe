"""The CLI's embedded commands, as a user runs them."""
import json
from pathlib import Path

import pytest

from dpstream.streams.cli.commands import main

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
def test_the_demos_private_predictor_answers_every_query_well_with_the_public_key(tmp_path, monkeypatch):
    """Before: the demo's risk-score model (halfspace blocks, the seed's enforced hard
    queries, no student) answered its 5,000 queries 73% right with the public demo key
    (majority 58%): a coin-labelled hard query turned the blocks. With a hard query
    weighing one example and the student it answers all of them, 98% right."""
    monkeypatch.delenv("DPSTREAM_SECRET_KEY", raising=False)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    assert main(["demo", "--fraud-events", "50", "--queries", "5000", "--quiet",
                 "--json", str(tmp_path / "d.json")]) == 0
    risk = next(r for r in json.loads((tmp_path / "d.json").read_text()) if r["model"] == "risk-score")
    assert risk["queries answered"] == "5000/5000" and risk["queries refused (budget exhausted)"] == 0
    assert risk["query accuracy"] > 0.95 > risk["majority: query accuracy"] + 0.3
    # beside it, what a user would pick instead (its row was "-" before): logistic regression
    # trained once on the same examples, without privacy
    assert risk["query accuracy"] <= risk["non-private LR: query accuracy"] <= 1.0


@pytest.mark.slow
def test_demo_runs_end_to_end_on_a_small_stream(capsys):
    assert main(["demo", "--fraud-events", "2000", "--queries", "300", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "card-fraud" in out and "credit-risk" in out and "risk-score" in out and "eps charged" in out
    assert "non-private" in out and "majority" in out and "per example" in out
    assert "rejected inputs: 0" in out
    # the model's state from its queries: an example's "learning" was shown as card-fraud's status
    assert "last query's status" in out and "learning" not in out and "queries refused" in out


def test_the_demo_summary_is_private_and_its_inputs_are_checked_before_the_run(tmp_path, monkeypatch, capsys):
    """``demo --json`` wrote online mistakes (private statistics) 0644 through any link, after
    the whole run; a configured but unusable key fell back to the public demo key without a
    word; ``--fraud-events 0`` ended in an IndexError."""
    import os
    import stat
    monkeypatch.delenv("DPSTREAM_SECRET_KEY", raising=False)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "link.json").symlink_to(victim)
    for args, says in ((["--json", str(tmp_path / "link.json")], "is a symbolic link: nothing written"),
                       (["--json", str(tmp_path)], "nothing written; choose another file"),
                       (["--fraud-events", "0"], "--fraud-events 0: a whole number from 1 to 10,000,000"),
                       (["--queries", "-1"], "--queries -1: a whole number from 1")):
        assert main(["demo", "--quiet", *args]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], (args, lines)
    assert victim.read_text() == "keep"
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "hunter2")
    assert main(["demo", "--quiet"]) == 2
    assert "passphrases are refused" in capsys.readouterr().err
    monkeypatch.delenv("DPSTREAM_SECRET_KEY")
    old = os.umask(0o022)
    try:
        assert main(["demo", "--quiet", "--fraud-events", "200", "--queries", "20",
                     "--json", str(tmp_path / "s.json")]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "s.json").stat().st_mode) == 0o600
    assert "public demo key (not private)" in capsys.readouterr().out
    assert {r["model"] for r in json.loads((tmp_path / "s.json").read_text())} >= {"card-fraud"}


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
    # the audit report is written (it shows the failure) and its exit code says so: before,
    # exit 0 and "(public)", the failure only inside the HTML
    assert main(["audit-report", "--dir", str(tmp_path), "--out", str(tmp_path / "r")]) == 1
    captured = capsys.readouterr()
    assert "the export did not verify" in captured.err and f"seq {row['seq']}" in captured.err
    assert (tmp_path / "r" / "report.html").exists()
    ledger = tmp_path / "ledger.jsonl"
    entries = ledger.read_text().splitlines()
    ledger.write_text("\n".join(entries[:-1]) + "\n")        # the keyless report runs the public checks too
    assert main(["audit-report", "--no-key", "--dir", str(tmp_path), "--out", str(tmp_path / "r1")]) == 1
    assert "fails the checks that need no key" in capsys.readouterr().err
    ledger.write_text("\n".join(entries) + "\n")
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "ffeeddccbbaa99887766554433221100" * 2)
    assert main(["replay", "--dir", str(tmp_path)]) == 2
    # another key: one line (a WrongKeyError traceback before), no report
    assert main(["audit-report", "--dir", str(tmp_path), "--out", str(tmp_path / "r2")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "wrong key, nothing compared; no report written" in lines[-1] and not (tmp_path / "r2").exists()
    # a configured key that cannot be used is refused, not replaced by a keyless report
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "hunter2")
    assert main(["audit-report", "--dir", str(tmp_path), "--out", str(tmp_path / "r3")]) == 2
    assert "passphrases are refused" in capsys.readouterr().err and not (tmp_path / "r3").exists()


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
    # before: valid, but over the worker's 512 KiB record limit once sent (dead-lettered)
    ({"model_id": "m", "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_active": 3},
      "features": [{"name": f"f{i}", "type": "categorical",
                    "vocabulary": [f"{i}-{j}-" + "v" * 40 for j in range(100)]} for i in range(120)]},
     1, "would be dead-lettered: oversized payload"),
    # before: all 4,001 digits of the horizon were echoed
    ({"model_id": "m", "dimension": 10, "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_active": 3, "horizon": 10 ** 4000}}, 1,
     "params.horizon: Input should be less than or equal to 1000000000 (got an integer of about 4,001 digits)"),
    ({"model_id": "m", "dimension": 10, "budget": {"epsilon": 1.0, "delta": 1e-6},
      "params": {"kind": "continual_winnow", "max_active": 3, "horizon": 10 ** 45}}, 1,
     "(got 1000000000000000000000000000000000000000...)"),
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

    from dpstream.streams.worker.observe import RepeatFilter
    f = RepeatFilter(window=60)
    records = [logging.LogRecord("aiokafka", logging.ERROR, "x", 1, "Unable to connect", None, None)
               for _ in range(1000)]
    assert sum(f.filter(r) for r in records) == 1
    other = logging.LogRecord("aiokafka", logging.ERROR, "x", 1, "another line", None, None)
    assert f.filter(other)


def test_a_changelog_missing_from_metadata_at_start_is_info_and_an_input_topic_stays_an_error():
    """CI (a loaded machine): aiokafka's metadata fetch raced the worker's creation of its
    own table changelog and logged "Topic dpstream-model-state-changelog not found in
    cluster metadata" at ERROR, at start. Within the start-up window that line is INFO for
    a changelog topic; for any other topic, and after the window, it stays an ERROR."""
    import logging

    from dpstream.streams.worker.observe import StartupNoise

    def record(topic):
        return logging.LogRecord("aiokafka.cluster", logging.ERROR, "x", 1,
                                 "Topic %s not found in cluster metadata", (topic,), None)
    at_start, later = StartupNoise(window=60), StartupNoise(window=0)
    own, theirs, old = record("dpstream-model-state-changelog"), record("dpstream-examples"), \
        record("dpstream-model-state-changelog")
    assert at_start.filter(own) and own.levelno == logging.INFO
    assert at_start.filter(theirs) and theirs.levelno == logging.ERROR
    assert later.filter(old) and old.levelno == logging.ERROR


def test_a_connection_the_broker_closed_for_a_new_login_is_info_and_other_failures_stay_errors():
    """A secured broker closes every SASL session after connections.max.reauth.ms (60 s:
    a revoked password's sessions end) and aiokafka reconnects: before, a healthy worker
    logged two ERROR lines a minute for it (seen with the window at 10 s). Now INFO;
    a connection that cannot be made again stays an ERROR."""
    import logging

    from aiokafka.errors import KafkaConnectionError

    from dpstream.streams.worker.observe import ReloginNoise

    def record(name, msg, *args):
        return logging.LogRecord(name, logging.ERROR, "x", 1, msg, args, None)
    closed = KafkaConnectionError("Connection at 127.0.0.1:29094 closed")
    fetch = record("aiokafka.consumer.fetcher", "Failed fetch messages from %s: %s", 1, closed)
    beat = record("aiokafka.consumer.group_coordinator", "Heartbeat send request failed: %s. Will retry.", closed)
    away = record("aiokafka.conn", "Unable connect to %r: %s", "127.0.0.1:29094", OSError(111, "refused"))
    other = record("aiokafka.consumer.fetcher", "Failed fetch messages from %s: %s", 1,
                   KafkaConnectionError("Unable to connect"))
    for r in (fetch, beat, away, other):
        assert ReloginNoise().filter(r)
    assert fetch.levelno == beat.levelno == logging.INFO
    assert away.levelno == other.levelno == logging.ERROR


def test_status_lists_only_the_models_this_worker_owns():
    from dpstream.streams.worker.observe import collect_status, model_partition
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


# ---------------------------------------------------------------- issue 43: files at the edge
KEY = "00112233445566778899aabbccddeeff" * 2
FRAUD = ROOT / "examples"


def fraud_lines(n: int, name: str = "card-fraud.examples.jsonl") -> list[dict]:
    return [json.loads(line) for line in (FRAUD / name).read_text().splitlines()[:n]]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def outputs(out: Path) -> dict:
    return {t: (out / f"{t}.jsonl").read_text() for t in ("predictions", "ledger", "rejected")}


@pytest.mark.parametrize("label_of", [
    pytest.param(lambda y: (y + 1) // 2, id="0/1"),
    pytest.param(lambda y: y == 1, id="true/false"),
])
def test_run_reads_0_1_and_true_false_labels_as_the_same_run_over_plus_minus_1(tmp_path, monkeypatch, capsys, label_of):
    """Before: 0/1 labels gave "2259 rejected" with exit 0 (the model learnt from the
    positives only), and true/false "invalid: y: int_type" for every example."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    examples = fraud_lines(3000)
    plain = write_jsonl(tmp_path / "pm1.jsonl", examples)
    other = write_jsonl(tmp_path / "other.jsonl", [{**e, "y": label_of(e["y"])} for e in examples])
    model = str(FRAUD / "card-fraud.model.json")
    assert main(["run", "--models", model, "--examples", str(plain), "--out", str(tmp_path / "a")]) == 0
    assert main(["run", "--models", model, "--examples", str(other), "--out", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert "labels 0/1 read as -1/+1 (0 -> -1)" in err or "labels true/false read as +1/-1" in err
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")
    assert not outputs(tmp_path / "b")["rejected"]


@pytest.mark.parametrize("labels, needle", [
    ([1, -1, 2], "line 3: the label is another number, not one of -1/+1, 0/1 or true/false"),
    ([1, 0, -1], "mixes labels 0 and -1: is 0 the negative class"),   # no line: both would be negatives
    ([True, 0], "mixes true/false labels (line 1) with numbers (line 2): use one convention"),
    (["HIV positive", "HIV negative"], "line 1: the label is a string, not one of"),
    ([None, 1], "line 1: the label is null, not one of"),
])
def test_labels_that_follow_no_convention_are_refused_before_anything_runs(tmp_path, monkeypatch, capsys,
                                                                           labels, needle):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    records = [{**e, "y": y} for e, y in zip(fraud_lines(len(labels)), labels)]
    path = write_jsonl(tmp_path / "e.jsonl", records)
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples", str(path),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and "nothing run" in err[0], err
    assert not (tmp_path / "out").exists()
    # a label is a private value: no message quotes one (it said y="HIV positive"), nor ties
    # a line to a class ("mixes labels 0 (line 2) and -1 (line 3)" said both were negatives)
    assert "HIV" not in err[0], err
    assert "mixes labels 0" not in needle or "line" not in err[0], err


def test_run_fails_and_says_why_when_examples_are_dead_lettered(tmp_path, monkeypatch, capsys):
    """Before: "... 3 rejected" on stdout and exit 0."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = {"model_id": "m", "dimension": 4, "budget": {"epsilon": 1.0, "delta": 1e-6},
             "params": {"kind": "continual_winnow", "max_active": 2}}
    (tmp_path / "m.json").write_text(json.dumps(model))
    path = write_jsonl(tmp_path / "e.jsonl", [{"model_id": "m", "x": [1, -1, 1], "y": 1}] * 3
                       + [{"model_id": "m", "active": [1], "y": 1}])
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(path),
                 "--out", str(tmp_path / "out")]) == 1
    assert "3 of 4 examples and queries rejected" in capsys.readouterr().err


MESSY = [{"model_id": "card-fraud", "features": {"amout": 12.5, "channel": "web", "flag_0": 1}, "y": 1},
         {"model_id": "card-fraud", "features": {"amount": "12.5", "channel": "fax", "flag_0": 0}, "y": -1},
         {"model_id": "card-fraud", "features": {"amount": 5000, "channel": ["web"], "hour": 3}, "y": 1}]


def test_run_tells_the_data_owner_what_the_model_makes_of_each_field(tmp_path, monkeypatch, capsys):
    """Before: a misspelt name, a number sent as a string or 0/1 for a boolean went to the
    missing slot with "0 rejected" and no word."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    path = write_jsonl(tmp_path / "e.jsonl", MESSY)
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples", str(path),
                 "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "what model card-fraud makes of these 3 records" in err
    assert "  amount: 1 numbers sent as strings (missing slot: send JSON numbers), 1 missing, 1 clamped to [0, 2000]" in err
    assert "  channel: 1 of the wrong type (missing slot), 1 not in the vocabulary (other slot)" in err
    assert "  flag_0: 2 0/1 integers (missing slot: send true/false" in err
    assert "  hour: 2 missing" in err
    assert "fields the model does not declare (ignored): 'amout' (1)" in err
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples", str(path),
                 "--out", str(tmp_path / "strict"), "--strict"]) == 1
    assert "--strict: values of the wrong type or undeclared fields (above); nothing run" in capsys.readouterr().err
    assert not (tmp_path / "strict").exists()
    # a NaN or infinite cell was "numbers sent as strings (send JSON numbers)", which a CSV
    # cannot do (JSON has no NaN either): it is said as what it is, and not a --strict mistake
    table = tmp_path / "t.csv"
    table.write_text("merchant,amount,y\nm01,NaN,1\nm02,-inf,-1\nm03,12,1\n")
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples", str(table),
                 "--model-id", "card-fraud", "--out", str(tmp_path / "nan"), "--strict"]) == 0
    assert "  amount: 2 NaN or infinite (missing slot)\n" in capsys.readouterr().err
    # a column no model declares is not sent, so --strict lists it and runs: before, the
    # constant columns `features` leaves out made `run --strict` refuse the same CSV
    table.write_text("merchant,amount,px0,y\nm01,3,0,1\nm02,4,0,-1\n")
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples", str(table),
                 "--model-id", "card-fraud", "--out", str(tmp_path / "extra"), "--strict"]) == 0
    assert "columns not sent (no model declares them): 'px0'" in capsys.readouterr().err


def test_the_owner_report_counts_exactly_what_the_featuriser_does():
    """The report asks the worker's featuriser (learners/features.py), so a value it
    counts as missing, wrong or unseen is one whose slot is the missing or other slot,
    and a clamped one lies outside the bounds: over arbitrary JSON values."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from dpstream.learners.features import Featuriser
    from dpstream.schemas import ModelConfig
    from dpstream.streams.tools.owner_report import CLAMPED, OwnerReport
    config = ModelConfig.model_validate(json.loads((FRAUD / "card-fraud.model.json").read_text()))
    f = Featuriser(config.features)
    values = st.none() | st.booleans() | st.integers(-10, 3000) | st.floats(allow_nan=True) \
        | st.sampled_from(["m01", "web", "12", "x", "1e3", "NaN", "-inf"]) | st.lists(st.integers(), max_size=2)
    names = st.sampled_from([fd.name for fd in config.features] + ["amout", "other"])

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.dictionaries(names, values, max_size=6), min_size=1, max_size=20))
    def check(batch):
        report = OwnerReport({"card-fraud": config})
        for features in batch:
            report.add({"model_id": "card-fraud", "features": features, "y": 1})
        for field in f.fields:
            counts = report.counts.get("card-fraud", {}).get(field.name, {})
            off = sum(n for k, n in counts.items() if k != CLAMPED)
            edge = field.binary_size - 1               # the missing / other slot
            assert off == sum(field.slot(r.get(field.name)) == edge for r in batch)
            if hasattr(field.spec, "lower"):
                outside = sum(field.slot(v := r.get(field.name)) != edge and not
                              field.spec.lower <= float(v) <= field.spec.upper for r in batch)
                assert counts.get(CLAMPED, 0) == outside
    check()


def test_features_sample_says_which_fields_it_leaves_out_and_why(tmp_path, capsys):
    """Before: a traceback on a name with a space (now a name like pandas' "mean radius"
    is declared as it is; a name with a line break is left out, with why); mixed and
    constant fields dropped with only a count; 0/1 integers taken for a field that a
    boolean declaration would send to its missing slot."""
    from dpstream.learners.features import Featuriser
    from dpstream.schemas.features import NumericField
    rows = [{"mean radius": 10.0 + i, "two\nlines": float(i), "flag": i % 2, "constant": 3,
             "mixed": i if i % 2 else "a", "ok": float(i)} for i in range(40)]
    path = write_jsonl(tmp_path / "s.jsonl", rows)
    assert main(["features", "--sample", str(path)]) == 0
    out, err = capsys.readouterr()
    fields = {f["name"]: f for f in json.loads(out)}
    assert set(fields) == {"mean radius", "flag", "ok"}
    assert "'two\\nlines': left out: a field name holds printable characters, with spaces only " \
           "inside it: character 4 of 9 is U+000A (category Cc) (rename it in the data, e.g. " \
           "'two_lines')" in err
    assert "'constant': left out: constant (every value is '3')" in err
    assert "'mixed': left out: mixed types (20 int, 20 str)" in err
    flag = NumericField(**fields["flag"])
    assert (flag.lower, flag.upper, flag.bins) == (0, 1, 2)
    slot = Featuriser([flag]).fields[0].slot
    assert [slot(0), slot(1)] == [0, 1]                       # not the missing slot (2)


def test_a_suggestion_takes_numpy_values_as_it_takes_python_ones():
    """Before: numpy scalars (pandas' ``to_dict("records")``) gave ``[]``."""
    import numpy as np

    from dpstream.learners.features import suggest_fields
    python = [{"a": float(i) / 7, "b": i % 3, "c": i % 2 == 0, "d": f"v{i % 4}"} for i in range(50)]
    numpy = [{"a": np.float64(r["a"]), "b": np.int64(r["b"]), "c": np.bool_(r["c"]), "d": np.str_(r["d"])}
             for r in python]
    assert suggest_fields(numpy) == suggest_fields(python) and len(suggest_fields(python)) == 4


def test_run_over_csv_gives_what_the_same_records_give_as_jsonl(tmp_path, monkeypatch, capsys):
    """CSV input (issue 43 item 8): columns become raw features typed by the model's
    declaration, a label column, a query id column; the outputs are the JSONL run's."""
    import csv
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    examples, queries = fraud_lines(1500), fraud_lines(150, "card-fraud.queries.jsonl")
    columns = list(examples[0]["features"])
    with open(tmp_path / "e.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*columns, "fraud"])
        w.writerows([*(e["features"][c] for c in columns), (e["y"] + 1) // 2] for e in examples)
    with open(tmp_path / "q.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["query_id", *columns])
        w.writerows([q["query_id"], *(q["features"][c] for c in columns)] for q in queries)
    model = str(FRAUD / "card-fraud.model.json")
    assert main(["run", "--models", model, "--examples", str(write_jsonl(tmp_path / "e.jsonl", examples)),
                 "--queries", str(write_jsonl(tmp_path / "q.jsonl", queries)), "--out", str(tmp_path / "a")]) == 0
    assert main(["run", "--models", model, "--examples", str(tmp_path / "e.csv"), "--label-column", "fraud",
                 "--queries", str(tmp_path / "q.csv"), "--out", str(tmp_path / "b")]) == 0
    assert "e.csv: labels 0/1 read as -1/+1" in capsys.readouterr().err
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")


def test_run_over_parquet_gives_what_the_same_records_give_as_jsonl(tmp_path, monkeypatch):
    """Parquet input (the optional ``parquet`` extra): cells keep their types, booleans
    as labels read as +1/-1."""
    pytest.importorskip("pyarrow", reason="Parquet is the optional 'parquet' extra")
    import pyarrow as pa
    import pyarrow.parquet as pq
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    examples = fraud_lines(1500)
    pq.write_table(pa.Table.from_pylist([{**e["features"], "y": e["y"] == 1} for e in examples]),
                   tmp_path / "e.parquet")
    model = str(FRAUD / "card-fraud.model.json")
    assert main(["run", "--models", model, "--examples", str(write_jsonl(tmp_path / "e.jsonl", examples)),
                 "--out", str(tmp_path / "a")]) == 0
    assert main(["run", "--models", model, "--examples", str(tmp_path / "e.parquet"),
                 "--out", str(tmp_path / "b")]) == 0
    assert outputs(tmp_path / "a") == outputs(tmp_path / "b")


def test_kafka_style_flags_parse_and_the_old_names_stay_aliases():
    """Before: --bootstrap-server, --command-config, --max-messages and --from-beginning
    were "unrecognized arguments" (exit 2)."""
    from dpstream.streams.cli.commands import build_parser
    parse = build_parser().parse_args
    new = parse(["consume", "--topic", "predictions", "--bootstrap-server", "h:1", "--command-config", "c",
                 "--max-messages", "3", "--from-beginning"])
    old = parse(["consume", "--topic", "predictions", "--broker", "h:1", "--client-config", "c", "--max", "3"])
    assert (new.broker, new.client_config, new.max_messages, new.from_beginning) == ("h:1", "c", 3, True)
    assert (old.broker, old.client_config, old.max_messages, old.from_beginning) == ("h:1", "c", 3, False)


def test_every_command_and_flag_has_help_text():
    """Before: models' action and target, --timeout, --topic, --out and others had none."""
    import argparse

    from dpstream.streams.cli.commands import build_parser
    ap = build_parser()
    commands = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    helped = {c.dest for c in commands._choices_actions if c.help}
    assert helped == set(commands.choices)
    missing = [f"{name} {a.option_strings or a.dest}" for name, p in commands.choices.items()
               for a in p._actions if not isinstance(a, argparse._HelpAction) and not a.help]
    assert missing == []


def test_a_model_id_with_a_lone_surrogate_is_keyed_not_a_traceback():
    """Before: ``produce --no-check`` keyed a record by ``model_id.encode()``, which raises
    UnicodeEncodeError on the lone surrogate a JavaScript client writes; the worker, not
    the CLI, dead-letters such a record for its model id (schemas/limits.py)."""
    from dpstream.streams.cli.commands import _key_of
    from dpstream.streams.tools.userfiles import Row
    line = b'{"model_id": "m\\ud83d", "features": {}, "y": 1}'
    assert _key_of(Row("line 1", line, json.loads(line))) == "m\ud83d".encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("no_key", [False, True])
@pytest.mark.parametrize("bad", [b"{not json", b"[1, 2]", b'{"model_id": "card-fraud", "seq": "x"}',
                                 b"\xff\xfe not utf-8", b'{"model_id": "m", "seq": NaN}'])
def test_a_malformed_line_of_an_export_is_one_line_naming_file_and_line(tmp_path, monkeypatch, capsys, bad, no_key):
    """Before (issue 41): a line of an export directory that is not JSON ended ``replay``
    (with or without the key) in a JSONDecodeError traceback."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    ex = ROOT / "examples"
    main(["run", "--models", str(ex / "card-fraud.model.json"),
          "--examples", str(ex / "card-fraud.examples.jsonl"), "--out", str(tmp_path)])
    capsys.readouterr()
    path = tmp_path / "predictions.jsonl"
    lines = path.read_bytes().splitlines()
    lines.insert(4, bad)
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", "--dir", str(tmp_path)] + (["--no-key"] if no_key else [])) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out
    line = next(x for x in out.splitlines() if "predictions.jsonl line 5" in x)
    assert "1 predictions record that is not valid" in line, out


@pytest.fixture(scope="module")
def card_fraud_export(tmp_path_factory):
    """One export of the shipped example (the key is set only while it is made)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    out = tmp_path_factory.mktemp("export") / "base"
    ex = ROOT / "examples"
    assert main(["run", "--models", str(ex / "card-fraud.model.json"),
                 "--examples", str(ex / "card-fraud.examples.jsonl"), "--out", str(out)]) == 0
    mp.undo()
    return out


def _damaged(base: Path, to: Path, damage) -> Path:
    import shutil
    shutil.copytree(base, to)
    path = to / "model-events.jsonl"
    data = path.read_bytes()
    path.write_bytes(damage(data))
    return to


@pytest.mark.parametrize("damage, line, says", [
    (lambda d: d[:len(d) // 2], 10_053, "not JSON (malformed JSON)"),
    (lambda d: d + bytes(range(256)) + b"\n", 20_002, "not JSON (malformed JSON)"),
    (lambda d: d + b"[" * 100_000 + b"]" * 100_000 + b"\n", 20_002, "not JSON (nested too deeply: arrays and objects nest at most 128"),
    (lambda d: d + b"1" * 100_000 + b"\n", 20_002, "not JSON (integer too long: a JSON integer has at most 4,300 digits"),
], ids=["cut-in-half", "random-bytes", "nested-100000", "integer-100000-digits"])
def test_a_damaged_export_line_is_named_by_file_line_and_the_decoders_reason(
        tmp_path, monkeypatch, capsys, card_fraud_export, damage, line, says):
    """Before: export lines were parsed with orjson, so a line nested 100,000 deep or an
    integer of 100,000 digits was only "not JSON", without the structural limit it broke
    (schemas/limits.py ``decode``, the worker's own decoder, now reads every line)."""
    where = _damaged(card_fraud_export, tmp_path / "x", damage)
    # the report is written and names the line; the exit code says the export did not verify
    assert main(["audit-report", "--no-key", "--dir", str(where), "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and (tmp_path / "r" / "report.html").exists()
    assert f"model-events.jsonl line {line}: {says}" in err, err


def test_a_damaged_log_fails_replay_with_the_mismatch_exit_code(tmp_path, monkeypatch, capsys, card_fraud_export):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    where = _damaged(card_fraud_export, tmp_path / "x", lambda d: d + b"[" * 100_000 + b"]" * 100_000 + b"\n")
    assert main(["replay", "--dir", str(where)]) == 1
    assert "model-events.jsonl line 20002: not JSON (nested too deeply" in capsys.readouterr().out


@pytest.mark.parametrize("cmd", [["replay", "--no-key"], ["replay"], ["audit-report", "--no-key"]])
def test_a_symbolic_link_in_an_export_is_refused_not_followed(tmp_path, monkeypatch, capsys, card_fraud_export, cmd):
    """Before: ``ledger.jsonl`` as a symbolic link to a file outside the export was followed
    and audited (exit 1, "1 ledger record that is not valid"); now the export is
    unreadable (exit 2) and the line names the link."""
    import shutil
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", "00112233445566778899aabbccddeeff" * 2)
    where = tmp_path / "x"
    shutil.copytree(card_fraud_export, where)
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes((card_fraud_export / "ledger.jsonl").read_bytes())   # even a valid ledger
    (where / "ledger.jsonl").unlink()
    (where / "ledger.jsonl").symlink_to(outside)
    out = tmp_path / "r"
    assert main(cmd + ["--dir", str(where)] + (["--out", str(out)] if cmd[0] == "audit-report" else [])) == 2
    err = capsys.readouterr().err
    assert f"{where / 'ledger.jsonl'} is a symbolic link" in err and len(err.splitlines()) == 1
    assert not (out / "report.html").exists()


def test_a_state_file_is_private_and_a_rerun_says_what_it_skips(tmp_path, monkeypatch, capsys):
    """``run --state``: the file holds exact private state (true counts, online mistakes);
    it was created 0644 under a usual umask. A second run with another file on the same
    state read nothing and said "0 rejected"; two runs at once on one state wrote an empty
    export; a directory, /dev/null or a text file as the state ended in a sqlite3
    traceback, another program's database was written into."""
    import os
    import stat
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = str(FRAUD / "card-fraud.model.json")
    first = write_jsonl(tmp_path / "first.jsonl", fraud_lines(300))
    other = write_jsonl(tmp_path / "other.jsonl", fraud_lines(400)[300:])
    db = tmp_path / "s.db"
    old = os.umask(0o022)
    try:
        assert main(["run", "--models", model, "--examples", str(first), "--out", str(tmp_path / "a"),
                     "--state", str(db), "--quiet"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    import hashlib
    import sqlite3
    with sqlite3.connect(db) as conn:                 # what was read is kept as a keyed MAC, not a plain hash
        kept = json.loads(conn.execute("SELECT v FROM state WHERE k = 'embedded/read/examples'").fetchone()[0])
    plain = hashlib.sha256()
    for line in first.read_bytes().splitlines():
        plain.update(len(line).to_bytes(8, "big") + line)
    assert set(kept) == {"n", "mac"} and kept["n"] == 300 and kept["mac"] != plain.hexdigest()
    capsys.readouterr()
    # another file, or an edited model file, is not what the state read: refused (it was
    # skipped by position, "0 predictions", exit 0, and a changed budget ignored)
    changed = tmp_path / "changed.json"
    changed.write_text((FRAUD / "card-fraud.model.json").read_text().replace('"epsilon": 2.0', '"epsilon": 1.5'))
    for models, examples, says in (
            (model, other, "this run gives 100 examples, an earlier run with this state read 300"),
            (model, write_jsonl(tmp_path / "same-size.jsonl", fraud_lines(600)[300:]),
             "these examples are not the ones an earlier run with this state read (its first 300), or the "
             "secret key is not the one it ran with"),
            (str(changed), first, "these models are not the ones an earlier run with this state read")):
        assert main(["run", "--models", models, "--examples", str(examples), "--out", str(tmp_path / "x"),
                     "--state", str(db), "--quiet"]) == 2
        assert f"--state: {says}" in capsys.readouterr().err
    grown = write_jsonl(tmp_path / "grown.jsonl", fraud_lines(300) + fraud_lines(500)[400:])
    assert main(["run", "--models", model, "--examples", str(grown), "--out", str(tmp_path / "g"),
                 "--state", str(db), "--quiet"]) == 0          # appended records are read
    said = capsys.readouterr()
    assert "the first 300 of 400 examples were read" in said.err
    assert said.out.startswith("dpstream run: 100 inputs -> 100 predictions") and "earlier runs" in said.out
    # the rerun's export is the whole stream's (it held only the 100 it added and did not
    # replay on its own): the same files as one run over the grown file, and it verifies
    assert main(["run", "--models", model, "--examples", str(grown), "--out", str(tmp_path / "once"),
                 "--quiet"]) == 0
    for name in ("model-events", "predictions", "answers", "ledger", "releases", "rejected"):
        assert (tmp_path / "g" / f"{name}.jsonl").read_text() == (tmp_path / "once" / f"{name}.jsonl").read_text()
    assert len((tmp_path / "g" / "predictions.jsonl").read_text().splitlines()) == 400
    capsys.readouterr()
    assert main(["replay", "--dir", str(tmp_path / "g")]) == 0
    assert "OK" in capsys.readouterr().out
    # one run at a time; another program's database is not written into
    from dpstream.streams.tools.embedded import SqliteState
    held = SqliteState(db)
    assert main(["run", "--models", model, "--examples", str(grown), "--out", str(tmp_path / "h"),
                 "--state", str(db), "--quiet"]) == 2
    assert "is in use by another run" in capsys.readouterr().err
    held.close()
    import sqlite3
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as other:
        other.execute("CREATE TABLE t (a)")
    foreign.chmod(0o600)
    assert main(["run", "--models", model, "--examples", str(first), "--out", str(tmp_path / "f"),
                 "--state", str(foreign), "--quiet"]) == 2
    assert "is not a dpstream state file (it holds other tables)" in capsys.readouterr().err
    (tmp_path / "dir").mkdir()
    text = write_jsonl(tmp_path / "text.jsonl", fraud_lines(2))
    text.chmod(0o600)
    open_db = tmp_path / "open.db"
    open_db.touch(mode=0o644)
    open_db.chmod(0o644)
    for path, says in ((tmp_path / "dir", "is a directory"), ("/dev/null", "is not a regular file"),
                       (tmp_path / "no" / "s.db", "does not exist (make it first"),
                       (text, "is not a dpstream state file"), (open_db, "may be read by others (mode 644)")):
        assert main(["run", "--models", model, "--examples", str(first), "--out", str(tmp_path / "c"),
                     "--state", str(path), "--quiet"]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], (path, lines)
        assert not (tmp_path / "c").exists()


def test_a_state_file_is_refused_where_its_journal_could_be_read_or_its_records_do_not_match(
        tmp_path, monkeypatch, capsys):
    """An attacker's pass: in a 1777 directory another user could make ``s.db-journal`` first
    and read the state's pages from it while a run wrote; a second hard link, or ``--state ""``
    (which ran with no state), were accepted; a state without its kept records (made before
    they were kept, or edited) gave exit 0 and an export that failed replay; a damaged
    record ended in a traceback."""
    import os
    import sqlite3
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = str(FRAUD / "card-fraud.model.json")
    examples = write_jsonl(tmp_path / "e.jsonl", fraud_lines(50))

    def run(state, out) -> str:
        code = main(["run", "--models", model, "--examples", str(examples), "--out", str(tmp_path / out),
                     "--state", str(state), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        return f"{code} {err[-1] if err else ''}"

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    assert "is writable by other users (mode 1777), who could make its side file s.db-journal" in run(
        shared / "s.db", "a")
    assert not list(shared.iterdir()) and not (tmp_path / "a").exists()
    assert run("", "b").startswith("2 dpstream run: --state an empty path")
    good = tmp_path / "good.db"
    assert run(good, "c").startswith("0")
    os.link(good, tmp_path / "other-name.db")
    assert "has 2 hard links" in run(good, "d")
    os.unlink(tmp_path / "other-name.db")
    for damage, says in (("DELETE FROM outputs", "it keeps 0 model events, its state says 51"),
                         ("DROP TABLE outputs", "it keeps 0 model events, its state says 51"),
                         ("UPDATE outputs SET v = '{not json'", "a record that is not JSON"),
                         ("UPDATE state SET v = '\"abc\"' WHERE k = 'embedded/log_offset'", "its state says ?"),
                         ("UPDATE state SET v = '{\"n\": \"x\"}' WHERE k = 'embedded/read/examples'",
                          "what earlier runs read is not recorded")):
        state = tmp_path / f"s{abs(hash(damage))}.db"
        assert run(state, "e" + state.stem).startswith("0")
        with sqlite3.connect(state) as conn:
            conn.execute(damage)
        line = run(state, "f" + state.stem)
        assert line.startswith("2 ") and "is damaged or was made by an older dpstream" in line and says in line, line


def test_a_state_that_cannot_be_written_or_is_held_by_another_program_is_one_line(
        tmp_path, monkeypatch, capsys):
    """A second attacker's pass: a state in a directory the caller cannot write, or one
    another SQLite client holds, ended in a sqlite3 traceback; ``--state :memory:`` kept
    nothing (SQLite's in-memory name) and left an empty file."""
    import os
    import sqlite3
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = str(FRAUD / "card-fraud.model.json")
    examples = write_jsonl(tmp_path / "e.jsonl", fraud_lines(20))

    def run(state, out) -> tuple[int, list[str]]:
        code = main(["run", "--models", model, "--examples", str(examples), "--out", str(tmp_path / out),
                     "--state", str(state), "--quiet"])
        return code, capsys.readouterr().err.strip().splitlines()

    monkeypatch.chdir(tmp_path)
    assert run(":memory:", "m")[0] == 0 and (tmp_path / ":memory:").stat().st_size > 0   # a file, kept
    code, err = run(":memory:", "m2")
    assert code == 0 and any("were read by an earlier run" in line for line in err)
    held = tmp_path / "held.db"
    assert run(held, "a")[0] == 0
    other = sqlite3.connect(held, timeout=0)
    other.execute("BEGIN IMMEDIATE")                      # another program's write transaction
    try:
        code, err = run(held, "b")
    finally:
        other.rollback()
        other.close()
    assert code == 2 and "database is locked; nothing of this run kept" in err[-1], err
    assert not any("Traceback" in line for line in err)
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o500)
    if os.geteuid() == 0:                                  # root may write anywhere: as if it could not
        from dpstream.streams.tools import outdir
        monkeypatch.setattr(outdir.os, "access", lambda p, mode: False)
    code, err = run(locked / "s.db", "c")
    assert code == 2 and len(err) == 1 and f"its directory {locked} is not writable by you" in err[0], err


def test_replay_of_one_model_checks_that_model_and_a_model_with_no_record_is_nothing_verified(
        tmp_path, monkeypatch, capsys):
    """``replay --model nosuch`` replayed nothing and printed "OK: every release
    reproduced" (exit 0); with ``--no-key`` the filter was ignored (every model's records
    were counted and checked)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = json.loads((FRAUD / "card-fraud.model.json").read_text())
    models = tmp_path / "two.jsonl"
    models.write_text(json.dumps(model) + "\n" + json.dumps({**model, "model_id": "second"}) + "\n")
    examples = write_jsonl(tmp_path / "e.jsonl", [{**e, "model_id": "second" if i % 3 == 0 else "card-fraud"}
                                                  for i, e in enumerate(fraud_lines(300))])
    out = tmp_path / "out"
    assert main(["run", "--models", str(models), "--examples", str(examples), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    for extra in ([], ["--no-key"]):
        assert main(["replay", "--dir", str(out), "--model", "nosuch", *extra]) == 2
        err = capsys.readouterr().err
        assert "no record of model 'nosuch' (models with records: card-fraud, second): nothing verified" in err
    assert main(["replay", "--dir", str(out), "--model", "second", "--no-key"]) == 0
    assert "OK: 1 ledger entries and 100 predictions are consistent" in capsys.readouterr().out
    assert main(["replay", "--dir", str(out), "--model", "second"]) == 0
    assert "predictions  matched 100, mismatched 0, missing 0, extra 0" in capsys.readouterr().out


def test_schemas_writes_by_the_out_rules_and_an_empty_out_is_refused(tmp_path, monkeypatch, capsys):
    """``schemas --out`` wrote through a planted symbolic link (overwriting the file it
    pointed at), into a world-writable directory, and ended in a traceback on a file or
    an uncreatable path; ``--out ""`` (``run`` as well) wrote into the current directory."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    (planted / "ModelConfig.json").symlink_to(victim)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    (tmp_path / "afile").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    for argv, says in ((["schemas", "--out", str(planted)], "is a symbolic link"),
                       (["schemas", "--out", str(shared)], "is writable by other users"),
                       (["schemas", "--out", str(tmp_path / "afile")], "exists and is not a directory"),
                       (["schemas", "--out", ""], "--out an empty path"),
                       (["run", "--models", str(FRAUD / "card-fraud.model.json"), "--out", ""], "--out an empty path")):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], (argv, lines)
    assert victim.read_text() == "keep" and not list(shared.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "planted", "shared", "victim"]


def test_inputs_that_ended_in_a_traceback_are_one_line(tmp_path, monkeypatch, capsys):
    """Each of these ended in a traceback (a newcomer's pass, 2026-12-03): ``--bins 0``
    (pydantic), a model file nested 100,000 deep (RecursionError in ``run`` and ``models
    register``), an export whose ``releases.jsonl`` is a directory (IsADirectoryError),
    /dev/zero as a sample (MemoryError, after taking the machine's memory)."""
    from dpstream.streams.tools import userfiles
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    export = tmp_path / "export"
    assert main(["run", "--models", str(FRAUD / "card-fraud.model.json"), "--examples",
                 str(write_jsonl(tmp_path / "e.jsonl", fraud_lines(20))), "--out", str(export), "--quiet"]) == 0
    (export / "releases.jsonl").unlink()
    (export / "releases.jsonl").mkdir()
    capsys.readouterr()
    for argv, says in (
            (["features", "--sample", str(FRAUD / "credit.sample.csv"), "--bins", "0"],
             "argument --bins: '0': a whole number from 2 to 256"),
            (["run", "--models", str(deep), "--out", str(tmp_path / "o")], "deep.json: nested too deeply"),
            (["models", "register", str(deep), "--bootstrap-server", "127.0.0.1:1"], "deep.json: nested too deeply"),
            (["replay", "--dir", str(export)], "releases.jsonl is not a regular file: nothing verified"),
            (["replay", "--dir", str(export), "--no-key"], "releases.jsonl is not a regular file"),
            (["features", "--sample", "/dev/zero"], "/dev/zero holds more than 10,000 bytes: split it")):
        if argv[-1] == "/dev/zero":
            monkeypatch.setattr(userfiles, "MAX_FILE_BYTES", 10_000)     # the same check, sooner
        try:
            code = main(argv)
        except SystemExit as exit:                 # argparse's usage error
            code = exit.code
        assert code == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert says in err[-1] and "Traceback" not in "".join(err), (argv, err)


def test_a_query_id_column_is_checked_before_its_values_are_published(tmp_path, monkeypatch, capsys):
    """``--id-column age`` published every query's age as its query_id (and counted age
    as missing), ``--id-column nope`` sent null ids, and ``--model-id`` silently won over
    a model_id column that named another model."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = tmp_path / "credit.json"
    model.write_text(json.dumps({
        "model_id": "credit", "budget": {"epsilon": 4.0, "delta": 1e-6},
        "params": {"kind": "dp_ftrl", "horizon": 5000},
        "features": [{"type": "numeric", "name": n, "lower": -3, "upper": 3} for n in ("s1", "s2")]
        + [{"type": "numeric", "name": "age", "lower": 18, "upper": 90}]}))
    queries = str(FRAUD / "credit.queries.csv")
    other = tmp_path / "other.csv"
    other.write_text("model_id,s1,s2,age\ncredit,0.1,0.2,30\nsomeone-else,0.1,0.2,30\n")
    for extra, says in ((["--queries", queries, "--id-column", "age"], "--id-column 'age' is a feature model credit declares"),
                        (["--queries", queries, "--id-column", "nope"], "has no id column 'nope'"),
                        (["--queries", str(other)], "row 3: its model_id column names another model than 'credit' (--model-id)")):
        assert main(["run", "--models", str(model), "--model-id", "credit", *extra, "--out", str(tmp_path / "o")]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and "nothing run" in lines[0], lines
        assert not (tmp_path / "o").exists()
    assert main(["run", "--models", str(model), "--model-id", "credit", "--queries", queries,
                 "--out", str(tmp_path / "o"), "--quiet"]) == 0
    answers = [json.loads(line) for line in (tmp_path / "o" / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 500 and answers[0]["query_id"] == "c0"


def test_a_sample_in_another_encoding_is_read_or_refused_never_mangled(tmp_path, capsys):
    """A Latin-1 CSV was read with U+FFFD for every accent, without a word (its categories
    then matched no vocabulary entry); a UTF-16 CSV was refused for its cell counts, a
    UTF-16 JSONL read as "malformed JSON"; an unterminated quote swallowed the rest of the
    file into one cell; UTF-16 or UTF-32 without a byte-order mark was refused for its cell
    counts ("line 3 has 1 cells and the header 3")."""
    text = "name,v\ncafé,1\nthé,2\n"
    (tmp_path / "utf16.csv").write_bytes(text.encode("utf-16"))
    (tmp_path / "utf16.jsonl").write_bytes('{"name": "café", "v": 1}\n{"name": "thé", "v": 2}\n'.encode("utf-16"))
    for name in ("utf16.csv", "utf16.jsonl"):
        assert main(["features", "--sample", str(tmp_path / name)]) == 0
        fields = json.loads(capsys.readouterr().out)
        assert fields[0]["name"] == "name" and sorted(fields[0]["vocabulary"]) == ["café", "thé"], name
    (tmp_path / "latin1.csv").write_bytes(text.encode("latin-1"))
    (tmp_path / "quote.csv").write_text('name,v\n"café,1\nthé,2\n')
    (tmp_path / "utf16le.csv").write_bytes(text.encode("utf-16-le"))      # no byte-order mark
    (tmp_path / "utf32.csv").write_bytes(text.encode("utf-32-le"))
    for name, says in (("latin1.csv", "latin1.csv line 2: not UTF-8 (Latin-1 or Windows-1252, perhaps): "
                                      "save the file as UTF-8"),
                       ("utf16le.csv", "utf16le.csv line 1: holds NUL bytes, so it is not UTF-8 text "
                                       "(UTF-16 or UTF-32 without a byte-order mark, perhaps)"),
                       ("utf32.csv", "utf32.csv line 1: holds NUL bytes"),
                       ("quote.csv", "quote.csv line 2: not CSV (unexpected end of data)")):
        assert main(["features", "--sample", str(tmp_path / name)]) == 2
        captured = capsys.readouterr()
        assert not captured.out and says in captured.err.strip(), captured.err


def test_features_never_suggests_a_declaration_a_registration_refuses(tmp_path, capsys):
    """A 600-column sample gave "600 fields", exit 0: a declaration that registration then
    refuses (``declare between 1 and 500 features``)."""
    from dpstream.schemas.features import MAX_FIELDS
    columns = [f"c{i}" for i in range(MAX_FIELDS + 100)]
    rows = [",".join(columns)] + [",".join(str((r * 7 + i) % 11) for i in range(len(columns))) for r in range(20)]
    (tmp_path / "wide.csv").write_text("\n".join(rows) + "\n")
    assert main(["features", "--sample", str(tmp_path / "wide.csv")]) == 1
    captured = capsys.readouterr()
    assert not captured.out
    assert f"{len(columns)} fields could be declared, and a model declares at most {MAX_FIELDS}" in captured.err


def test_a_model_file_that_names_a_field_twice_is_refused(tmp_path, monkeypatch, capsys):
    """``"model_id": "card-fraud", ..., "model_id": "other"`` registered "other" without a
    word (Python's json keeps the last of two equal names)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    text = (FRAUD / "card-fraud.model.json").read_text()
    twice = text.replace('"model_id": "card-fraud"', '"model_id": "card-fraud", "model_id": "other"', 1)
    assert twice != text
    (tmp_path / "m.json").write_text(twice)
    (tmp_path / "m.jsonl").write_text(json.dumps(json.loads(text)) + "\n" + " ".join(twice.split()) + "\n")
    for argv in (["run", "--models", str(tmp_path / "m.json"), "--out", str(tmp_path / "o")],
                 ["run", "--models", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "o")],
                 ["models", "register", str(tmp_path / "m.json"), "--bootstrap-server", "127.0.0.1:1"]):
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "'model_id' is given twice in one object: keep one" in lines[0], lines
    assert not (tmp_path / "o").exists()


def test_run_reads_standard_input_for_one_input_only_and_says_when_there_are_none(tmp_path, monkeypatch, capsys):
    """``--examples - --queries -`` was accepted (the second read nothing); a run without
    examples or queries printed "0 inputs" with no word."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY)
    model = str(FRAUD / "card-fraud.model.json")
    assert main(["run", "--models", model, "--examples", "-", "--queries", "-", "--out", str(tmp_path / "a")]) == 2
    assert "standard input (-) can be one of --models, --examples, --queries, not two" in capsys.readouterr().err
    assert main(["run", "--models", model, "--out", str(tmp_path / "b")]) == 0
    assert "no --examples or --queries: only the registrations were run" in capsys.readouterr().err


@pytest.mark.parametrize("text, value", [("true", True), ("T", True), ("Yes", True), ("false", False),
                                         ("f", False), ("NO", False), ("1", 1), ("0", 0), ("-1", -1),
                                         ("maybe", "maybe"), ("", None), ("+1", 1), ("1.0", 1),
                                         ("-1.00", -1), (" 0 ", 0)])
def test_a_csv_label_cell_reads_the_words_the_docs_list(text, value):
    """streams/tools/userfiles.py's docstring and the README list t/f and yes/no for a CSV
    label cell; anything else stays text, which ``map_labels`` refuses naming its line."""
    from dpstream.streams.tools.userfiles import label_cell
    got = label_cell(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["1e-400", "1e0", "0e0", "01", "00", "-0", "1.0000000000000001", "2", "0.5"])
def test_a_label_cell_that_only_rounds_to_a_label_is_another_number(text):
    """An attacker's pass: ``1e-400`` was read as 0 (the negative class), ``01`` and ``1e0``
    as 1; a label is refused unless it is written as one."""
    import math
    from dpstream.streams.tools.userfiles import _label_kind, label_cell
    got = label_cell(text)
    assert isinstance(got, float) and math.isnan(got) and _label_kind(got) is None
