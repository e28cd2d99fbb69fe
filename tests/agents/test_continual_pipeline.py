"""Continual-release Winnow as a stream model: epochs and their ledger, no label on
example records, replay bit for bit, restart from persisted state, edge validation."""
import asyncio
import json

import numpy as np

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime, SqliteState
from dpstream.streams.tools.replay import replay, verify_public

from .logs import assert_batches_apply_as_one_at_a_time

RNG = KeyedRandomness(b"continual-pipeline-tests-key-000")
CONFIG = {"model_id": "cw", "dimension": 30, "budget": {"epsilon": 2.0, "delta": 1e-6},
          "params": {"kind": "continual_winnow", "max_active": 5, "block": 20, "horizon": 400}}


def events(n=1000, seed=0):
    s = RNG.stream("continual-tests", "data", seed)
    out = [("models", CONFIG)]
    for i in range(n):
        act = sorted(set(s.below(30, size=4).tolist()))
        y = 1 if min(act) < 3 else -1
        out.append(("examples", {"model_id": "cw", "active": act, "y": y}))
        if i % 10 == 0:
            out.append(("queries", {"model_id": "cw", "active": act, "query_id": f"q{i}"}))
    return out


def run(evs, state=None):
    rt = EmbeddedRuntime(RNG, state)
    asyncio.run(rt.feed_all(evs))
    return rt


def test_each_epoch_is_charged_once_on_its_own_ledger_and_versions_move_with_releases():
    rt = run(events())
    ledger = rt.outputs["ledger"]
    assert [(e["epoch"], e["charges"]) for e in ledger] == [(0, 1), (1, 1), (2, 1)]
    assert all(e["mechanism"] == "tree_aggregation[discrete_gaussian]" for e in ledger)
    assert all(e["spent_epsilon"] <= 2.0 for e in ledger)
    preds = rt.outputs["predictions"]
    examples = [p for p in preds if p["kind"] == "example"]
    assert all(p["label"] is None and p["status"] == "learning" for p in examples)
    assert sum(p["updated"] for p in examples) == 1000 // 20        # one release per block
    assert examples[-1]["version"] == 50
    assert all(p["label"] in (-1, 1) for p in preds if p["kind"] == "query")
    assert not verify_public(rt.outputs)
    assert not rt.outputs["rejected"]


def test_an_example_contributes_to_one_epoch_only():
    """The epoch's tree holds only its own blocks: after an epoch rolls over its node sums
    start from zero, and the earlier epochs enter only through the released offset."""
    rt = run(events(n=800))
    handler = rt.processor.handler("cw")
    s = handler.model.state
    assert s.epoch == 2 and s.b == 0 and s.alpha == {}
    from dpstream.agents.kinds.storage import model_key, read_vector
    offset = read_vector(rt.state, lambda c: model_key("cw", "offset", 2, c), 31)
    assert np.array_equal(offset, s.offset)
    assert np.array_equal(handler.model.released, offset.astype(float))


def test_replay_reproduces_every_release_bit_for_bit():
    rt = run(events())
    report = asyncio.run(replay(RNG, rt.log, rt.outputs))
    assert report.ok and report.topics["predictions"].matched == len(rt.outputs["predictions"])


def test_a_restart_from_persisted_state_gives_the_uninterrupted_outputs(tmp_path):
    evs = events()
    full = run(evs).outputs
    state = SqliteState(tmp_path / "s.db")
    first = run(evs[:537], state)
    state.commit()
    state.close()                          # the first process ends (and releases the state)
    rt = EmbeddedRuntime(RNG, SqliteState(tmp_path / "s.db"))
    rt.offsets.update(first.offsets)
    asyncio.run(rt.feed_all(evs[537:]))
    for topic in ("predictions", "ledger"):
        got = first.outputs[topic] + rt.outputs[topic]
        assert [json.dumps(v, sort_keys=True) for v in got] == \
            [json.dumps(v, sort_keys=True) for v in full[topic]], topic


def test_rows_beyond_the_active_cap_are_bounded_not_dead_lettered():
    """A well-formed row with more active features than max_active (5 here) is cut to its
    lowest 5 distinct indices at the edge, and the log holds the row as the model uses it:
    no dead letter says anything about it, and its outputs are those of the cut row."""
    wide = [("examples", {"model_id": "cw", "active": [8, 0, 3, 3, 1, 7, 2, 4, 6, 5], "y": 1}),
            ("queries", {"model_id": "cw", "x": [1.0] * 30})]
    cut = [("examples", {"model_id": "cw", "active": [0, 1, 2, 3, 4], "y": 1}),
           ("queries", {"model_id": "cw", "active": [0, 1, 2, 3, 4]})]
    rt, ref = run([("models", CONFIG), *wide]), run([("models", CONFIG), *cut])
    assert not rt.outputs["rejected"] and len(rt.outputs["predictions"]) == 2
    assert [r["value"]["event"]["active"] for r in rt.log[1:]] == [[0, 1, 2, 3, 4]] * 2
    assert [{k: v for k, v in p.items() if k != "source"} for p in rt.outputs["predictions"]] == \
        [{k: v for k, v in p.items() if k != "source"} for p in ref.outputs["predictions"]]


def test_examples_applied_in_batches_give_the_outputs_and_state_of_one_at_a_time():
    """The processor learns consecutive examples of a continual model in one batch kernel
    call (Processor._apply_run): the same outputs in the same order, and the same state,
    as one event at a time, across block and epoch boundaries and around a row the model
    cannot apply (index out of range, written to the log behind the sequencer's back)."""
    rt = run(events(n=900))
    out, broken = assert_batches_apply_as_one_at_a_time(rt.log, RNG, (7, 250, len(rt.log)))
    assert [r["source"] for r in out["rejected"]] == [broken]
    assert len(out["predictions"]) == 900 + 90 - 1
