"""Attacks on the audit report (issue 61, item 1): a forged export must not be published as
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
