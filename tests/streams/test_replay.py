"""Replay recomputes every release from the log and locates tampering."""
import asyncio
import copy

import pytest

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.tools.replay import WrongKeyError, replay

KEY = b"replay-tests-key-0000000000000000"


def run_models():
    rt = EmbeddedRuntime(KeyedRandomness(KEY))
    cfg = {"model_id": "w", "dimension": 20, "budget": {"epsilon": 1e5, "delta": 1e-6},
           "params": {"kind": "winnow", "eps_hat": 1.0, "eta": 0.1, "m": 100, "K": 30, "L": 2.0}}
    s = KeyedRandomness(b"replay-test-data-000000000000000").stream("d", "x", 0)

    async def go():
        await rt.feed("models", cfg)
        for _ in range(400):
            act = sorted(set(s.below(20, size=3).tolist()))
            await rt.feed("examples", {"model_id": "w", "active": act, "y": 1 if min(act) < 2 else -1})
            await rt.feed("queries", {"model_id": "w", "active": act})
    asyncio.run(go())
    return rt


def test_replay_with_the_key_reproduces_everything():
    rt = run_models()
    report = asyncio.run(replay(KeyedRandomness(KEY), rt.log, rt.outputs))
    assert report.ok and report.topics["predictions"].matched == 800
    assert report.topics["ledger"].matched == len(rt.outputs["ledger"]) > 1


def test_a_flipped_prediction_a_dropped_one_and_a_wrong_ledger_total_are_located():
    rt = run_models()
    published = copy.deepcopy(dict(rt.outputs))
    published["predictions"][100]["version"] += 1
    dropped = published["predictions"].pop(200)
    published["ledger"][1]["spent_epsilon"] += 0.5
    report = asyncio.run(replay(KeyedRandomness(KEY), rt.log, published))
    p = report.topics["predictions"]
    assert [m[1] for m in p.mismatches] == [rt.outputs["predictions"][100]["seq"]]
    assert p.missing == [("w", dropped["seq"], 0)]
    assert [m[1] for m in report.topics["ledger"].mismatches] == [rt.outputs["ledger"][1]["seq"]]
    assert not report.ok and "first mismatch" in report.summary()


def test_wrong_key_fails_before_comparing():
    rt = run_models()
    with pytest.raises(WrongKeyError, match="wrong key"):
        asyncio.run(replay(KeyedRandomness(b"another-key-00000000000000000000"), rt.log, rt.outputs))


def test_no_key_checks_pass_on_honest_output_and_catch_a_wrong_running_total():
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    assert verify_public(rt.outputs) == []
    published = copy.deepcopy(dict(rt.outputs))
    published["ledger"][2]["spent_epsilon"] *= 0.5          # under-reported spending
    problems = verify_public(published)
    assert "charge 3" in problems[0]              # the ledger's own arithmetic
    assert problems[1:] == [p for p in problems if "no ledger entry" in p]   # and the cross-check


def test_no_key_checks_catch_a_forged_version_and_answers_after_exhaustion():
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    published = copy.deepcopy(dict(rt.outputs))
    quiet = next(i for i, p in enumerate(published["predictions"][50:], 50)
                 if p["kind"] == "example" and not p["updated"])
    for p in published["predictions"][quiet:]:
        p["version"] += 1                        # a version bump no update explains
    assert any("without an update" in msg for msg in verify_public(published))

    exhausted = copy.deepcopy(dict(rt.outputs))
    exhausted["predictions"][5]["status"] = "budget_exhausted"    # claimed exhausted early...
    later = [e for e in exhausted["ledger"] if e["seq"] > exhausted["predictions"][5]["seq"]]
    assert later and any("after exhaustion" in msg for msg in verify_public(exhausted))


def test_replay_of_one_model_checks_only_that_models_key():
    rt = run_models()
    cfg = {"model_id": "w2", "dimension": 20, "budget": {"epsilon": 2.0, "delta": 1e-6},
           "params": {"kind": "continual_winnow", "max_active": 4, "block": 5, "horizon": 50}}
    asyncio.run(rt.feed_all([("models", cfg)] + [("examples", {"model_id": "w2", "active": [i % 20], "y": 1})
                                                 for i in range(20)]))
    published = copy.deepcopy(dict(rt.outputs))
    other = [e for e in published["ledger"] if e["model_id"] != "w"]
    assert other
    for e in other:
        e["key_fingerprint"] = "0" * 16                  # another model ran under another key
    with pytest.raises(WrongKeyError):
        asyncio.run(replay(KeyedRandomness(KEY), rt.log, published))
    report = asyncio.run(replay(KeyedRandomness(KEY), rt.log, published, models={"w"}))
    assert report.ok


def run_continual():
    """A continual-release model over four epochs: each epoch's one charge shows the same
    running total, so only a per-epoch check tells one epoch's charge from another's."""
    rt = EmbeddedRuntime(KeyedRandomness(KEY))
    cfg = {"model_id": "c", "dimension": 20, "budget": {"epsilon": 2.0, "delta": 1e-6},
           "params": {"kind": "continual_winnow", "max_active": 3, "block": 10, "horizon": 50}}
    s = KeyedRandomness(b"replay-test-data-000000000000000").stream("d", "c", 0)
    events = [("models", cfg)]
    for _ in range(200):
        act = sorted(set(s.below(20, size=3).tolist()))
        events += [("examples", {"model_id": "c", "active": act, "y": 1 if min(act) < 4 else -1}),
                   ("queries", {"model_id": "c", "active": act})]
    asyncio.run(rt.feed_all(events))
    return rt


def run_rules():
    """A decision-list model that trains (and releases) twice."""
    rt = EmbeddedRuntime(KeyedRandomness(KEY))
    cfg = {"model_id": "r", "dimension": 6, "budget": {"epsilon": 2.0, "delta": 1e-6},
           "params": {"kind": "decision_list", "window": 60}}
    s = KeyedRandomness(b"replay-test-data-000000000000000").stream("d", "r", 0)
    events = [("models", cfg)]
    for _ in range(130):
        x = [1 if b else -1 for b in s.bits(6).tolist()]
        events += [("examples", {"model_id": "r", "x": x, "y": x[0]}), ("queries", {"model_id": "r", "x": x})]
    asyncio.run(rt.feed_all(events))
    return rt


def _forged_copy(record: dict) -> dict:
    forged = copy.deepcopy(record)
    if "label" in forged:
        forged["label"] = -(forged["label"] or 1)
    else:
        forged["epsilon"] /= 2
    return forged


@pytest.mark.parametrize("topic", ["predictions", "answers", "ledger"])
@pytest.mark.parametrize("forged_first", [True, False])
def test_two_different_records_for_one_place_fail_whichever_comes_first(topic, forged_first):
    """Before (issue 41): the later of two records for one (model, seq), or one ledger
    (model, epoch, charge), replaced the earlier, so a forged record published before the
    honest one passed both replays (only forged-last was caught)."""
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    published = copy.deepcopy(dict(rt.outputs))
    honest = next(v for v in published[topic] if topic == "ledger" or v["kind"] == "query")
    forged = _forged_copy(honest)
    published[topic].insert(0, forged) if forged_first else published[topic].append(forged)
    report = asyncio.run(replay(KeyedRandomness(KEY), rt.log, published))
    assert not report.ok and len(report.topics[topic].conflicting) == 1
    assert "first conflicting duplicate: model 'w'" in report.summary()
    problems = verify_public(published)
    assert any(f"{topic} w " in p and "published twice, differently" in p for p in problems), problems


@pytest.mark.parametrize("topic", ["predictions", "answers", "ledger", "releases"])
def test_an_identical_duplicate_is_redelivery_and_passes(topic):
    from dpstream.streams.tools.replay import verify_public
    rt = run_models() if topic != "releases" else run_rules()
    published = copy.deepcopy(dict(rt.outputs))
    assert published[topic]
    published[topic] = published[topic][:3] + published[topic] + published[topic][-2:]
    assert asyncio.run(replay(KeyedRandomness(KEY), rt.log, published)).ok
    assert verify_public(published) == []


def test_no_key_checks_each_predictions_spend_against_its_own_epochs_charge():
    """Before (issue 41): a prediction only had to show a running total that some ledger
    entry of its model showed, in any epoch. With an epoch's charge cut from the ledger,
    the predictions of that epoch still matched the equal total of another epoch: OK."""
    from dpstream.streams.tools.replay import verify_public
    rt = run_continual()
    assert verify_public(rt.outputs) == []
    epochs = sorted({e["epoch"] for e in rt.outputs["ledger"]})
    assert len(epochs) >= 3
    cut = copy.deepcopy(dict(rt.outputs))
    cut["ledger"] = [e for e in cut["ledger"] if e["epoch"] != epochs[1]]
    problems = verify_public(cut)
    assert any(f"in epoch {epochs[1]}, which no ledger entry shows there" in p for p in problems), problems

    moved = copy.deepcopy(dict(rt.outputs))
    p = next(p for p in moved["predictions"] if p["epoch"] == epochs[1] and p["kind"] == "example")
    p["epoch"] = epochs[-1] + 1                   # a spend claimed for an epoch never charged
    assert any("which no ledger entry shows there" in line for line in verify_public(moved))


def test_no_key_checks_that_a_release_has_its_charge():
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    published = copy.deepcopy(dict(rt.outputs))
    updated = next(p for p in published["predictions"] if p["updated"])
    for p in published["predictions"]:            # spend hidden, and the charges cut
        p["epsilon_spent"], p["epsilon_left"] = 0.0, 1e5
    published["answers"] = [p for p in published["predictions"] if p["kind"] == "query"]
    published["ledger"] = []
    problems = verify_public(published)
    assert any(f"seq {updated['seq']}: version" in p and "without any ledger charge" in p for p in problems)


@pytest.mark.parametrize("change, needle", [
    (lambda ps: ps[7].__setitem__("source", ps[3]["source"]), "is also the source of"),
    (lambda ps: ps[7].__setitem__("source", "queries:0:7") if ps[7]["kind"] == "example"
     else ps[7].__setitem__("source", "examples:0:7"), "is not a position on"),
    (lambda ps: (ps[5].__setitem__("source", ps[9]["source"]), ps[9].__setitem__("source", "examples:0:999999")),
     "is before the source of"),
])
def test_a_forged_source_is_a_discrepancy(change, needle):
    """Before (issue 41): replay ignored ``source`` (with or without the key), so a
    prediction could claim any input position."""
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    published = copy.deepcopy(dict(rt.outputs))
    preds = [p for p in published["predictions"] if p["kind"] == "example"]
    change(preds)
    problems = verify_public(published)
    assert any(needle in p for p in problems), problems
    assert not asyncio.run(replay(KeyedRandomness(KEY), rt.log, published)).ok


def test_no_key_checks_survive_hostile_values_and_name_them():
    """Fields no worker writes (a unicode digit in a source, a ledger rule or count no
    ledger takes, an epoch that jumps) are each a discrepancy line, never an exception."""
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    for topic, i, change, needle in [
            ("predictions", 5, {"source": "queries:\u00b2:1"}, "is not a position on queries"),
            ("predictions", 5, {"epoch": 10 ** 30}, "that is not valid"),       # beyond int64
            ("predictions", 5, {"epoch": 2 ** 62}, "epoch went back"),
            ("ledger", 1, {"rule": "bogus"}, "differs from the model's first entry"),
            ("ledger", 0, {"rule": "bogus"}, "budget or rule not valid"),
            ("ledger", 1, {"count": -3}, "not a valid charge")]:
        published = copy.deepcopy(dict(rt.outputs))
        published[topic][i].update(change)
        assert any(needle in p for p in verify_public(published)), (change, verify_public(published))


def test_no_key_checks_survive_every_field_removed_or_retyped():
    """An attacker's fuzzing: a prediction without ``epoch`` (a defaulted field) ended
    ``replay --no-key`` and a keyless audit report in a KeyError. Every field of a record of
    each output topic, removed or replaced by a value of another type, gives problem lines
    or none, never an exception."""
    from dpstream.streams.tools.replay import verify_public
    rt = run_models()
    outputs = {t: v for t, v in rt.outputs.items() if v}
    tried = 0
    for topic, values in outputs.items():
        for i in (0, len(values) // 2, len(values) - 1):
            for field in list(values[i]):
                for change in ("drop", True, None, "x", -1, 1e308, [], {}):
                    published = copy.deepcopy(outputs)
                    record = published[topic][i]
                    if change == "drop":
                        del record[field]
                    else:
                        record[field] = change
                    problems = verify_public(published)
                    assert isinstance(problems, list)
                    tried += 1
    assert tried > 300
