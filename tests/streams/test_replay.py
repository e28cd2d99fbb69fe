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
