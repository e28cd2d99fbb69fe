"""Replay checks the privacy unit's bound from the log: an honest run passes; a run whose
admissions were tampered with (the processor's decisions, the trace, the bound in a copied
config) fails, named by model and epoch, never by a person."""
import asyncio
import copy
import dataclasses
import re

from dpstream.agents.kinds.base import Handler
from dpstream.streams.tools.replay import public_verdict, replay
from dpstream.streams.tools.unitcheck import check_units
from tests.agents.persons import RNG, apply, ftrl, run, stream, unit_of

PEOPLE = [f"user-{i % 13}@example.org" for i in range(260)]


def _honest(config=None):
    config = config or ftrl(k=2, block=3, horizon=60)
    return config, run(config, stream(config, PEOPLE, queries_every=9))


def _no_unit_named(text: str, config) -> None:
    """Nothing of a person in ``text``: no ID, no pseudonym."""
    for person in set(PEOPLE):
        assert person not in text and unit_of(config["model_id"], person) not in text
    assert not re.search(r"[0-9a-f]{32}", text)


def test_an_honest_run_replays_with_every_person_within_the_bound():
    config, rt = _honest()
    report = asyncio.run(replay(RNG, rt.log, dict(rt.outputs)))
    assert report.ok, report.summary()
    assert report.units.models == 1 and report.units.examples == len(PEOPLE)
    assert "every person within the bound" in report.summary()
    _no_unit_named(report.summary(), config)


def test_an_admission_that_ignores_the_bound_fails_the_replay_naming_model_and_epoch(monkeypatch):
    """The processor replay runs admits everything (as a broken admission would): the
    recomputed outputs differ, and the unit check says which model and epoch broke the
    bound, without naming anyone."""
    config, rt = _honest()
    decide = Handler.admit

    def admit_all(self, event, seq=None, slot=None):
        decide(self, event, seq, slot)
        key = (self.model_id, self.events if seq is None else seq)
        if self.unit_trace is not None and key in self.unit_trace:
            self.unit_trace[key] = dataclasses.replace(self.unit_trace[key], admitted=True)
        return True
    monkeypatch.setattr(Handler, "admit", admit_all)
    report = asyncio.run(replay(RNG, rt.log, dict(rt.outputs)))
    assert not report.ok and not report.units.ok
    text = report.summary()
    assert "BOUND NOT KEPT" in text and "model p epoch 0: an example was admitted beyond its person's bound of k=2" in text
    _no_unit_named(text, config)


def _trace(config, rt):
    """The processor's trace and recomputed predictions of an honest run."""
    out, _, proc = apply(rt.log, [500], trace=True)
    return proc.unit_trace, [v for t, v in out if t == "predictions"]


def test_a_trace_with_a_person_admitted_k_plus_one_times_is_flagged():
    config, rt = _honest()
    trace, predictions = _trace(config, rt)
    assert check_units(rt.log, trace, predictions).ok
    refused = next(d for d in trace.values() if not d.admitted and d.unit is not None)
    tampered = {**trace, (refused.model_id, refused.seq): dataclasses.replace(refused, admitted=True)}
    check = check_units(rt.log, tampered, predictions)
    assert not check.ok and len(check.problems) == 1
    assert check.problems[0].startswith(f"model p epoch {refused.epoch}: ")
    _no_unit_named(" ".join(check.problems), config)


def test_a_refusal_that_was_not_due_is_flagged():
    config, rt = _honest()
    trace, predictions = _trace(config, rt)
    first = min((d for d in trace.values() if d.admitted), key=lambda d: d.seq)
    tampered = {**trace, (first.model_id, first.seq): dataclasses.replace(first, admitted=False)}
    problems = check_units(rt.log, tampered, predictions).problems
    assert any("refused though its person had fewer than k=2" in p for p in problems)


def test_a_decision_for_another_person_than_the_log_says_is_flagged():
    config, rt = _honest()
    trace, predictions = _trace(config, rt)
    d = next(d for d in trace.values() if d.admitted)
    other = next(e.unit for e in trace.values() if e.unit not in (None, d.unit))
    tampered = {**trace, (d.model_id, d.seq): dataclasses.replace(d, unit=other)}
    problems = check_units(rt.log, tampered, predictions).problems
    assert any("another unit than its example's log event carries" in p for p in problems)


def test_two_examples_of_a_person_in_one_block_are_flagged():
    config = ftrl(k=3, block=50, horizon=500)
    rt = run(config, stream(config, PEOPLE[:100]))
    trace, predictions = _trace(config, rt)
    assert check_units(rt.log, trace, predictions).ok
    refused = next(d for d in trace.values() if not d.admitted and d.unit is not None)
    tampered = {**trace, (refused.model_id, refused.seq): dataclasses.replace(refused, admitted=True)}
    problems = check_units(rt.log, tampered, predictions).problems
    assert any("second example in one block was admitted" in p for p in problems)


def test_a_copied_config_with_another_bound_does_not_replay():
    """The log's registration says k = 1 where the run had k = 2: the recomputed decisions,
    and so the releases, differ from what was published."""
    config, rt = _honest()
    log = copy.deepcopy(rt.log)
    log[0]["value"]["event"]["privacy_unit"]["max_contributions"] = 1
    report = asyncio.run(replay(RNG, log, dict(rt.outputs)))
    assert not report.ok and report.topics["predictions"].mismatches


def test_without_the_key_every_ledger_entry_must_carry_the_registrations_unit():
    config, rt = _honest(ftrl(k=2, block=3, horizon=12, epochs=1000))
    assert public_verdict(dict(rt.outputs), rt.log).ok and len(rt.outputs["ledger"]) > 2
    forged = copy.deepcopy(dict(rt.outputs))
    forged["ledger"][1]["unit"] = "example"
    verdict = public_verdict(forged, rt.log)
    assert not verdict.ok and "unit 'example' is not the registration's ('person<=2/epoch,<=1000 epochs'" in verdict.text
    assert not public_verdict(forged).ok          # no log: one unit per model still


def test_a_person_admitted_in_more_epochs_than_max_epochs_is_flagged():
    """Epochs of 12 examples, people cycling: with max_epochs 1 a person's examples of a
    later epoch are refused; a trace that admits one of them is flagged as over the epoch
    cap, and a trace that refuses one in the person's only epoch as not due."""
    config = ftrl(k=2, block=3, horizon=12, epochs=1)
    rt = run(config, stream(config, PEOPLE))
    trace, predictions = _trace(config, rt)
    assert check_units(rt.log, trace, predictions).ok
    first_epoch = {}
    for d in sorted(trace.values(), key=lambda d: d.seq):
        if d.admitted:
            first_epoch.setdefault(d.unit, d.epoch)
    late = next(d for d in trace.values() if not d.admitted and d.unit in first_epoch
                and d.epoch > first_epoch[d.unit])
    tampered = {**trace, (late.model_id, late.seq): dataclasses.replace(late, admitted=True)}
    problems = check_units(rt.log, tampered, predictions).problems
    assert any("admitted in more than max_epochs=1 epochs" in p for p in problems), problems
    _no_unit_named(" ".join(problems), config)
