"""Attacks on the audit report: a forged export must not be published as
verified. Whoever can write an output topic (the worker's principal), or an export
directory on its way to the auditor, can add records; ``audit-report`` must render what
``dpstream replay --dir`` concludes, whatever the terminal said. Each test's docstring
says what happened before. docs/security-clients.md states the rules."""
from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dpstream.streams.cli.commands import main

from .kafka_helpers import KEY_HEX, ROOT

# a forged record's own text: it must reach neither the report nor the terminal
SECRET = "card_4111111111111111"

FORMS = {"public": [], "internal": ["--internal"], "no key": ["--no-key"]}


class Text(HTMLParser):
    """A page's text as a reader sees it (no tags, no attributes), and the rows of its
    tables of invalid records."""

    def __init__(self):
        super().__init__()
        self.parts, self.rows, self._row, self._in_invalid = [], [], None, False

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("class", "invalid") in attrs:
            self._in_invalid = True
        elif tag == "tr" and self._in_invalid:
            self._row = []

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_invalid = False
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        self.parts.append(data)
        if self._row is not None and data.strip():
            self._row.append(data.strip())

    @property
    def text(self) -> str:
        return " ".join(" ".join(self.parts).split())


def read_report(out: Path) -> Text:
    page = Text()
    page.feed((out / "report.html").read_text())
    return page


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    """An export of the shipped example (one model, 200 examples), made once."""
    where = tmp_path_factory.mktemp("honest")
    examples = where / "examples.jsonl"
    lines = (ROOT / "examples" / "card-fraud.examples.jsonl").read_text().splitlines()[:200]
    examples.write_text("\n".join(lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPSTREAM_SECRET_KEY", KEY_HEX)
        mp.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
        assert main(["run", "--models", str(ROOT / "examples" / "card-fraud.model.json"),
                     "--examples", str(examples), "--out", str(where / "export"), "--quiet"]) == 0
    return where / "export"


@pytest.fixture
def export(tmp_path, honest, key) -> Path:
    copy = tmp_path / "export"
    shutil.copytree(honest, copy)
    return copy


def audit_report(export: Path, out: Path, form: str) -> int:
    return main(["audit-report", "--dir", str(export), "--out", str(out), *FORMS[form]])


@pytest.mark.parametrize("form", list(FORMS))
def test_an_honest_export_gives_a_report_that_says_what_was_checked(tmp_path, capsys, export, form):
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 0
    page = read_report(out)
    assert "FAILED" not in page.text and not page.rows
    if form == "no key":
        assert "Releases were not verified" in page.text and "consistent" in page.text
    else:
        assert "OK: every release reproduced" in page.text


@pytest.mark.parametrize("form", list(FORMS))
def test_a_forged_record_makes_the_report_say_failed_and_list_it(tmp_path, capsys, export, form):
    """Before: ``audit-report`` screened invalid records out before its replay, so the replay
    it rendered had none: ``{}`` appended to ``ledger.jsonl`` gave exit 1 and "did not
    verify" on the terminal, but a ``report.html`` that read "OK: every release reproduced"
    (``--no-key``: "not verified", no failure) and never named the record. And the reason
    for a record with a field of its own named that field: the forger's text, printed."""
    ledger = export / "ledger.jsonl"
    honest = ledger.read_text().splitlines()
    lines = {name: len((export / f"{name}.jsonl").read_text().splitlines())
             for name in ("ledger", "predictions", "model-events")}
    forged = {**json.loads(honest[0]), SECRET: 1}        # valid but for a field of its own
    with open(ledger, "a") as fh:
        fh.write(json.dumps(forged) + "\n{}\n")
    with open(export / "predictions.jsonl", "a") as fh:
        fh.write(f'{{"model_id": "{SECRET}\n')           # cut in half: not JSON
    with open(export / "model-events.jsonl", "a") as fh:
        fh.write(json.dumps({"partition": 0, "offset": 10 ** 6, "value": {SECRET: 1}}) + "\n")
    capsys.readouterr()
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "FAILED" in page.text and "OK: every release reproduced" not in page.text
    assert "2 ledger records that are not valid" in page.text
    assert "1 predictions record that is not valid" in page.text
    assert "1 log record that is not valid" in page.text
    assert page.rows[0] == ["topic", "where", "why"]
    assert sorted(page.rows[1:]) == [
        ["ledger", f"ledger.jsonl line {lines['ledger'] + 1}", "?: a field this record's schema does not have"],
        ["ledger", f"ledger.jsonl line {lines['ledger'] + 2}", "model_id: Field required"],
        ["model-events", f"model-events.jsonl line {lines['model-events'] + 1}", "value needs a source and an event"],
        ["predictions", f"predictions.jsonl line {lines['predictions'] + 1}", "not JSON (malformed JSON)"]]
    assert SECRET not in (out / "report.html").read_text()
    err = capsys.readouterr().err                        # the terminal says the same
    assert "2 ledger records that are not valid" in err and SECRET not in err


@pytest.mark.parametrize("form", list(FORMS))
def test_a_forged_valid_ledger_entry_makes_the_report_say_failed(tmp_path, capsys, export, form):
    """A ledger entry that is a valid record but not what the worker charged (its epsilon
    halved, its running total kept): the report says FAILED, in every form. Before, the
    keyless report said only "Releases were not verified", the failure on the terminal."""
    ledger = export / "ledger.jsonl"
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    entries[0]["epsilon"] /= 2
    ledger.write_text("".join(json.dumps(e) + "\n" for e in entries))
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "FAILED" in page.text and "OK: every release reproduced" not in page.text and not page.rows
    if form == "no key":
        assert "running total" in page.text
    else:
        assert "first mismatch: model 'card-fraud' seq 0" in page.text


@pytest.mark.parametrize("form", ["public", "internal"])
def test_a_prediction_not_reproduced_makes_the_report_say_failed(tmp_path, capsys, export, form):
    """A prediction that is a valid record but not the one the worker made: FAILED, and the
    report names it, as ``replay`` does."""
    path = export / "predictions.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[10])
    row["version"] += 1
    lines[10] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "FAILED" in page.text and "OK: every release reproduced" not in page.text
    assert f"first mismatch: model 'card-fraud' seq {row['seq']}" in page.text


def _registration(export: Path) -> dict:
    return json.loads((export / "model-events.jsonl").read_text().splitlines()[0])


def _append_to_log(export: Path, event: dict) -> int:
    """``event`` appended to the log as its next record; the line it is on."""
    path = export / "model-events.jsonl"
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    record = {"partition": last["partition"], "offset": last["offset"] + 1,
              "value": {"source": "models:0:9", "event": event}}
    path.write_text("\n".join([*lines, json.dumps(record)]) + "\n")
    return len(lines) + 1


@pytest.mark.parametrize("form", list(FORMS))
def test_a_second_registration_with_another_budget_makes_the_report_say_failed(tmp_path, capsys, export, form):
    """Before: the report showed each model's last registration, the processor applies the
    first, and nothing checked for a second: a registration appended with budget 0.05 (the
    real one 2.0) gave "Verified" and exit 0, beside that budget."""
    event = {**_registration(export)["value"]["event"], "budget": {"epsilon": 0.05, "delta": 1e-9}}
    line = _append_to_log(export, event)
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "FAILED" in page.text and "Verified" not in page.text
    assert page.rows[1:] == [["model-events", f"model-events.jsonl line {line}",
                              "the model is registered again with another config (the first "
                              "registration is in force)"]]
    assert 'data-budget-epsilon="2.0"' in (out / "report.html").read_text()


def test_an_identical_second_registration_is_allowed(tmp_path, capsys, export):
    """The sequencer logs an identical re-registration (a no-op): not a discrepancy."""
    _append_to_log(export, _registration(export)["value"]["event"])
    out = tmp_path / "report"
    assert audit_report(export, out, "public") == 0
    assert "OK: every release reproduced" in read_report(out).text


def test_a_registration_whose_budget_was_edited_fails_the_keyless_report(tmp_path, capsys, export):
    """Before: with the only registration's budget edited to 0.05, the keyless report said
    "the checks that need no key pass" and showed budget 0.05 beside eps spent 1.9998."""
    path = export / "model-events.jsonl"
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    first["value"]["event"]["budget"] = {"epsilon": 0.05, "delta": 1e-9}
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    out = tmp_path / "report"
    assert audit_report(export, out, "no key") == 1
    page = read_report(out)
    assert "FAILED" in page.text and "checks that need no key pass" not in page.text
    assert "ledger card-fraud epoch 0 charge 1: budget differs from the model's registration" in page.text


@pytest.mark.parametrize("form", list(FORMS))
def test_an_invalid_second_registration_is_a_clean_failure(tmp_path, capsys, export, form):
    """Before: replay said OK and ``audit-report`` ended in a pydantic traceback that
    printed the record (input_value=...)."""
    line = _append_to_log(export, {"type": "model", "model_id": "card-fraud",
                                   "budget": {"epsilon": -1}, SECRET: 1})
    capsys.readouterr()
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "FAILED" in page.text and "Verified" not in page.text
    assert [r[:2] for r in page.rows[1:]] == [["model-events", f"model-events.jsonl line {line}"]]
    err = capsys.readouterr().err
    assert "Traceback" not in err and "input_value" not in err and SECRET not in err
    assert SECRET not in (out / "report.html").read_text()


@pytest.mark.parametrize("form", list(FORMS))
def test_a_key_fingerprint_cannot_put_markup_into_the_report(tmp_path, capsys, export, form):
    """Before: the ledger's ``key_fingerprint`` (any string) went into the keyless report's
    provenance table unescaped, in an attribute and a cell: a script ran in the auditor's
    browser."""
    ledger = export / "ledger.jsonl"
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    entries[0]["key_fingerprint"] += '"><script>alert(1)</script>'
    ledger.write_text("".join(json.dumps(e) + "\n" for e in entries))
    out = tmp_path / "report"
    assert audit_report(export, out, form) == 1
    page = read_report(out)
    assert "<script" not in (out / "report.html").read_text()
    assert page.rows[1][:2] == ["ledger", "ledger.jsonl line 1"] and "key_fingerprint" in page.rows[1][2]
