"""A person's ID never leaves the worker: ``dpstream run`` (CSV and JSONL) and the Python
path with distinctive IDs, every output file, the terminal, the log output, the dead
letters, replay's and the audit report's output searched for them, and for their
pseudonyms wherever outputs go (the private log and state may hold a pseudonym, never
an ID)."""
import asyncio
import json
import logging

import pytest

from dpstream.agents.units import Pseudonyms
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.cli.commands import main
from dpstream.streams.tools.embedded import EmbeddedRuntime

HEX_KEY = "00112233445566778899aabbccddeeff" * 2
RNG = KeyedRandomness(bytes.fromhex(HEX_KEY))
CSV_IDS = [f"QZX-customer-{i:03d}" for i in range(7)]
JSONL_IDS = [f"VWK-person-{i:03d}" for i in range(7)] + [987654321987]

CSV_MODEL = {"model_id": "spend", "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "dp_ftrl", "horizon": 200, "block": 2},
             "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
                          {"type": "categorical", "name": "shop", "vocabulary": ["a", "b"]}],
             "privacy_unit": {"id_field": "customer_id", "max_contributions": 2}}
JSONL_MODEL = {"model_id": "clicks", "dimension": 12, "budget": {"epsilon": 1e5, "delta": 1e-6},
               "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 50, "K": 20, "L": 2.0},
               "privacy_unit": {"max_contributions": 3}}


def _searched(texts: dict[str, str], ids, pseudonyms=()) -> None:
    for where, text in texts.items():
        for value in ids:
            assert str(value) not in text, (where, value)
        for unit in pseudonyms:
            assert unit not in text, (where, unit)


def _units(model_id, ids):
    return [Pseudonyms(RNG).of(model_id, i) for i in ids]


def _files(out) -> dict[str, str]:
    return {p.name: p.read_bytes().decode("utf-8", "replace") for p in out.iterdir() if p.is_file()}


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", HEX_KEY)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)


def test_run_over_a_csv_with_an_id_column_keeps_the_ids_in(tmp_path, key, capsys, caplog):
    """The CSV's ``customer_id`` column is the registration's id_field: sent as the ID, not
    featurised, not listed as a column left out, and nowhere in what the run writes."""
    caplog.set_level(logging.DEBUG)
    (tmp_path / "m.json").write_text(json.dumps(CSV_MODEL))
    lines = ["customer_id,amount,shop,y"] + [f"{CSV_IDS[i % 7]},{i % 100},{'ab'[i % 2]},{1 if i % 3 else 0}"
                                             for i in range(120)]
    (tmp_path / "e.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "q.csv").write_text("customer_id,amount,shop\n" + "".join(
        f"{CSV_IDS[i % 7]},{i},a\n" for i in range(10)))
    out, state = tmp_path / "out", tmp_path / "private" / "s.db"
    state.parent.mkdir(mode=0o700)
    code = main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.csv"),
                 "--queries", str(tmp_path / "q.csv"), "--out", str(out), "--state", str(state)])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "customer_id" not in said.err                  # not a column left out, not undeclared
    files = _files(out)
    log = [json.loads(line) for line in files["model-events.jsonl"].splitlines()]
    examples = [r["value"]["event"] for r in log if r["value"]["event"]["type"] == "example"]
    assert len(examples) == 120 and all(len(e["unit"]) == 32 for e in examples)
    assert "features" not in json.dumps(examples)           # featurised; the ID field is not in a row
    outputs = {k: v for k, v in files.items() if k != "model-events.jsonl"}
    _searched({**files, "stdout": said.out, "stderr": said.err, "log": caplog.text,
               "state": state.read_bytes().decode("utf-8", "replace")}, CSV_IDS)
    _searched(outputs, [], _units("spend", CSV_IDS))
    assert json.loads(files["ledger.jsonl"].splitlines()[0])["unit"] == "person<=2/epoch,<=1 epochs"
    # replay and the audit report on the export say nothing of anyone either
    assert main(["replay", "--dir", str(out)]) == 0
    assert main(["audit-report", "--dir", str(out), "--out", str(tmp_path / "report")]) == 0
    said = capsys.readouterr()
    assert "bounded per person: every person within the bound" in said.out
    report = (tmp_path / "report" / "report.html").read_text()
    assert "data-privacy-unit='person&lt;=2/epoch,&lt;=1 epochs'" in report or "data-privacy-unit='person<=2/epoch,<=1 epochs'" in report
    _searched({"replay": said.out + said.err, "report": report}, CSV_IDS, _units("spend", CSV_IDS))


def test_run_over_jsonl_with_ids_and_dead_letters_keeps_the_ids_in(tmp_path, key, capsys, caplog):
    """Top-level IDs, an example that is a dead letter for its features, one whose ID is of
    the wrong type, one without an ID: the rejected topic, the terminal and every file say
    nothing of any ID."""
    caplog.set_level(logging.DEBUG)
    (tmp_path / "m.json").write_text(json.dumps(JSONL_MODEL))
    rows = []
    for i in range(150):
        rows.append({"model_id": "clicks", "active": [i % 12, (i * 5) % 12], "y": 1 if i % 12 < 3 else -1,
                     "privacy_id": JSONL_IDS[i % len(JSONL_IDS)]})
    rows.append({"model_id": "clicks", "active": [99], "y": 1, "privacy_id": JSONL_IDS[0]})  # out of range
    rows.append({"model_id": "clicks", "active": [1], "y": 1, "privacy_id": [JSONL_IDS[1]]})  # wrong type
    rows.append({"model_id": "clicks", "active": [1], "y": 1})                                # no ID
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    code = main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--out", str(out)])
    said = capsys.readouterr()
    assert code == 1                                     # two dead letters: said, exit 1
    files = _files(out)
    assert len(files["rejected.jsonl"].splitlines()) == 2
    logged = [json.loads(line)["value"]["event"] for line in files["model-events.jsonl"].splitlines()]
    assert sum("unit" in e for e in logged) == 150        # each example with an ID, as its pseudonym
    assert "have no usable ID" in said.err               # the data owner's count, no ID in it
    _searched({**files, "stdout": said.out, "stderr": said.err, "log": caplog.text}, JSONL_IDS)
    _searched({k: v for k, v in files.items() if k != "model-events.jsonl"}, [],
              _units("clicks", JSONL_IDS))


def test_the_python_path_keeps_the_ids_in_its_outputs_and_logs(caplog):
    caplog.set_level(logging.DEBUG)
    rt = EmbeddedRuntime(RNG)
    items = [("models", JSONL_MODEL)] + [
        ("examples", {"model_id": "clicks", "active": [i % 12], "y": 1 if i % 12 < 3 else -1,
                      "privacy_id": JSONL_IDS[i % len(JSONL_IDS)]}) for i in range(100)]
    items.append(("examples", {"model_id": "clicks", "active": "nope", "y": 1, "privacy_id": JSONL_IDS[2]}))
    asyncio.run(rt.feed_all(items))
    assert len(rt.outputs["rejected"]) == 1
    _searched({"outputs": json.dumps(dict(rt.outputs)), "log": json.dumps(rt.log), "logging": caplog.text,
               "state": json.dumps(dict(rt.state))}, JSONL_IDS)
    _searched({"outputs": json.dumps(dict(rt.outputs)), "logging": caplog.text}, [],
              _units("clicks", JSONL_IDS))


def test_an_examples_file_without_the_id_column_is_refused_before_running(tmp_path, key, capsys):
    (tmp_path / "m.json").write_text(json.dumps(CSV_MODEL))
    (tmp_path / "e.csv").write_text("amount,shop,y\n1,a,1\n")
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.csv"),
                 "--out", str(tmp_path / "out")]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert "no column 'customer_id'" in last and "--privacy-id-column" in last and "nothing run" in last


def test_a_differently_named_id_column_is_named_with_privacy_id_column(tmp_path, key, capsys):
    (tmp_path / "m.json").write_text(json.dumps(CSV_MODEL))
    (tmp_path / "e.csv").write_text("client,amount,shop,y\n" + "".join(
        f"{CSV_IDS[i % 3]},{i},a,1\n" for i in range(20)))
    assert main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.csv"),
                 "--privacy-id-column", "client", "--out", str(tmp_path / "out")]) == 0
    log = [json.loads(line) for line in (tmp_path / "out" / "model-events.jsonl").read_text().splitlines()]
    units = [r["value"]["event"].get("unit") for r in log[1:]]
    assert units == [Pseudonyms(RNG).of("spend", CSV_IDS[i % 3]) for i in range(20)]
    assert "client" not in capsys.readouterr().err
