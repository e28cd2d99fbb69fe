"""The privacy unit on the agents (both runtimes share them): a person's ID becomes a keyed
pseudonym before the log, at most k of a person's examples per epoch reach the learner (one
per block for the block kinds), and the decisions are the same one at a time, in batches,
and re-applied after a crash."""
import copy
import json

import pytest

from dpstream.agents.kinds.base import Handler
from dpstream.agents.units import decide, unit_key

from .persons import RNG, apply, example, ftrl, run, stream, unit_of, winnow


def _learner(rt, model_id):
    """The model's learner state as its head holds it, without the event counters."""
    head = rt.state[f"model/{model_id}/head"]
    return head["learner"]


def _records(rt, kind="predictions"):
    """The records of a topic without what depends on the position in the stream."""
    return [{k: v for k, v in p.items() if k not in ("seq", "source")} for p in rt.outputs[kind]]


def _persons(n_people: int, n: int, offset: int = 0) -> list[str]:
    """n examples' IDs cycling over n_people persons."""
    return [f"person-{(i + offset) % n_people}" for i in range(n)]


def _schedule(rt, config) -> dict:
    """What a refusal must not move: the learner's count of examples (rounds; and for a
    block kind its blocks and epoch, every example record's version, updated flag and
    epoch, the ledger's seqs), none of it noised."""
    learner = _learner(rt, config["model_id"])
    out = {"t": learner["t"]}
    if config["params"]["kind"] == "dp_ftrl":
        out["blocks"] = (learner["epoch"], learner["b"])
        out["records"] = [(p["seq"], p["status"], p["version"], p["updated"], p["epoch"])
                          for p in rt.outputs["predictions"] if p["kind"] == "example"]
        out["ledger"] = [(e["seq"], e["epoch"]) for e in rt.outputs["ledger"]]
    return out


@pytest.mark.parametrize("config", [ftrl(), winnow()], ids=["dp_ftrl", "winnow"])
def test_an_example_past_its_persons_bound_takes_its_place_and_teaches_nothing(config):
    """Person 0's examples arrive every tenth position: after k of them (in distinct blocks)
    the next one is refused. It counts as an arriving example (its block, its round) and
    teaches the learner nothing: with other contents at its place, or an example without
    an ID there, the learner and every output are the same. An example of a new person at
    the same place, with one label or the other (one of them is a mistake), does change
    the learner (the comparison has power), and moves none of the noise-free schedule
    (docs/privacy.md, "The privacy unit")."""
    k, model = config["privacy_unit"]["max_contributions"], config["model_id"]
    persons = [f"person-0" if i % 10 == 0 else f"person-{1 + i}" for i in range(200)]
    base = stream(config, persons, queries_every=7)
    at = next(i for i, (t, _) in enumerate(base) if t == "examples" and i > 10 * (k + 1) + 5)

    def with_one_more(person, i, seed, **label):
        one = {**example(config, i, person, seed=seed), **label}
        return run(config, base[:at] + [("examples", one)] + base[at:])
    past, past_other = with_one_more("person-0", 999, 5), with_one_more("person-0", 998, 6)
    no_id = with_one_more(None, 997, 7)
    fresh = [with_one_more("somebody-new", 999, 5, y=y) for y in (1, -1)]
    assert _learner(past, model) == _learner(past_other, model) == _learner(no_id, model)
    assert dict(past.outputs) == dict(past_other.outputs) == dict(no_id.outputs)
    assert any(_learner(rt, model) != _learner(past, model) for rt in fresh)
    assert all(_schedule(rt, config) == _schedule(past, config) for rt in fresh)
    assert past.outputs["predictions"][at]["kind"] == "example"


@pytest.mark.parametrize("epochs", [1, 3])
def test_a_person_reaches_the_learner_in_at_most_max_epochs_epochs(epochs):
    """Epochs are disjoint in examples, not in people: a person who sends every other
    example has k admitted in each of their first ``max_epochs`` epochs and none after, so
    their guarantee over the model's life composes over at most that many epochs."""
    config = ftrl(k=2, block=2, horizon=8, epochs=epochs)
    persons = ["alice" if i % 2 == 0 else f"p{i}" for i in range(120)]
    rt = run(config, stream(config, persons), trace=True)
    alice = unit_of("p", "alice")
    admitted, refused = {}, set()
    for d in rt.processor.unit_trace.values():
        if d.unit == alice:
            if d.admitted:
                admitted.setdefault(d.epoch, []).append(d.block)
            else:
                refused.add(d.epoch)
    assert sorted(admitted) == list(range(epochs))
    assert all(len(blocks) == 2 for blocks in admitted.values())
    assert max(refused) >= epochs + 2                      # later epochs went by without her


def test_a_persons_bound_starts_again_each_epoch():
    """DP-FTRL with epochs of 8 arriving examples in blocks of 2: a person who sends every
    other example has exactly k = 2 admitted in each epoch, in distinct blocks."""
    config = ftrl(k=2, block=2, horizon=8, epochs=1000)
    persons = ["alice" if i % 2 == 0 else f"p{i}" for i in range(120)]
    rt = run(config, stream(config, persons), trace=True)
    alice = unit_of("p", "alice")
    admitted = {}
    for d in rt.processor.unit_trace.values():
        if d.unit == alice and d.admitted:
            admitted.setdefault(d.epoch, []).append(d.block)
    assert len(admitted) >= 5                              # epochs went by
    assert all(len(blocks) == 2 and len(set(blocks)) == 2 for blocks in admitted.values())


def test_a_person_has_at_most_one_example_per_block():
    """A person whose examples arrive back to back, k = 3, blocks of 4 arriving examples
    (admitted or not): one of them per block is admitted, the next only once the block has
    moved on; past k, none."""
    config = ftrl(k=3, block=4)
    persons = ["bob", "bob", "bob", "c1", "c2", "c3", "bob", "c4", "c5", "bob", "bob", "c6", "bob"]
    rt = run(config, stream(config, persons), trace=True)
    bob = unit_of("p", "bob")
    decided = [(d.block, d.admitted) for _, d in sorted(rt.processor.unit_trace.items()) if d.unit == bob]
    assert decided == [(0, True), (0, False), (0, False), (1, True), (2, True), (2, False), (3, False)]


def test_without_a_usable_id_an_example_does_not_reach_the_learner_and_says_nothing():
    """No ID, or an empty one: logged without a unit, not admitted, no dead letter, the
    record any example gets there; it takes its place in its block and teaches nothing, so
    the learner is as with two other examples past their bound there. An ID of another
    JSON type than text or a whole number is a schema error: a dead letter that names the
    field, never the value."""
    config = ftrl()
    base = stream(config, _persons(40, 120))
    odd = [("examples", {**example(config, 900 + i, None, 3), **extra})
           for i, extra in enumerate([{}, {"privacy_id": ""}])]
    wrong = ("examples", {**example(config, 950, None, 3), "privacy_id": [4417]})
    rt = run(config, base[:50] + odd + [wrong] + base[50:])
    past = [("examples", example(config, 910 + i, "person-0", 4)) for i in range(2)]  # k = 2 before
    plain = run(config, base[:50] + past + base[50:])
    assert _learner(rt, "p") == _learner(plain, "p")
    assert _records(rt) == _records(plain)
    logged = [r["value"]["event"] for r in rt.log[51:53]]
    assert all("unit" not in e and "privacy_id" not in e for e in logged)
    assert [p["status"] for p in rt.outputs["predictions"][50:52]] == ["learning"] * 2
    [dead] = rt.outputs["rejected"]
    assert dead["reason"].startswith("invalid: privacy_id") and "4417" not in dead["reason"]


def test_the_log_holds_a_keyed_pseudonym_never_the_id():
    """The raw ID is never logged: the unit is an HMAC under the key, 32 hex digits, the same
    for 123 and "123", another under another key or for another model; a model without a
    privacy unit logs neither."""
    config = ftrl()
    plain = {**ftrl("q"), "privacy_unit": None}
    del plain["privacy_unit"]
    items = [("models", plain), ("examples", example(plain, 0, "carol")),
             ("examples", example(config, 1, 123)), ("examples", example(config, 2, "123")),
             ("examples", example(config, 3, "carol"))]
    rt = run(config, items)
    events = [r["value"]["event"] for r in rt.log if r["value"]["event"]["type"] == "example"]
    assert "privacy_id" not in json.dumps(events) and "carol" not in json.dumps(rt.log)
    assert "unit" not in events[0]
    assert events[1]["unit"] == events[2]["unit"] == unit_of("p", "123")
    assert events[3]["unit"] == unit_of("p", "carol") != unit_of("q", "carol")
    from dpstream.agents.units import Pseudonyms
    from dpstream.mechanisms.randomness import KeyedRandomness
    assert Pseudonyms(KeyedRandomness(b"another-key-" + b"0" * 30)).of("p", "carol") != events[3]["unit"]
    assert len(events[3]["unit"]) == 32 and int(events[3]["unit"], 16) >= 0


def test_a_long_or_huge_id_is_bounded_not_refused():
    config = ftrl()
    items = [("examples", example(config, 0, "x" * 100_000)), ("examples", example(config, 1, 10 ** 4000)),
             ("examples", example(config, 2, -(10 ** 300)))]
    rt = run(config, items)
    assert "rejected" not in rt.outputs
    assert all(len(r["value"]["event"]["unit"]) == 32 for r in rt.log[1:])


def test_an_id_in_the_raw_features_is_read_there_and_never_featurised():
    """``id_field`` names a raw feature: the record's value there is the ID, and the row the
    learner gets is the row of the record without it."""
    config = {"model_id": "f", "budget": {"epsilon": 8.0, "delta": 1e-6},
              "params": {"kind": "dp_ftrl", "horizon": 400, "block": 4},
              "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
                           {"type": "categorical", "name": "shop", "vocabulary": ["a", "b"]}],
              "privacy_unit": {"id_field": "customer_id", "max_contributions": 1}}
    rows = [{"amount": 10.0 * i, "shop": "ab"[i % 2]} for i in range(6)]
    with_id = [("examples", {"model_id": "f", "features": {**r, "customer_id": f"c{i % 2}"}, "y": 1})
               for i, r in enumerate(rows)]
    without = [("examples", {"model_id": "f", "features": r, "y": 1}) for r in rows]
    a, b = run(config, with_id), run(config, without)
    ea = [r["value"]["event"] for r in a.log[1:]]
    eb = [r["value"]["event"] for r in b.log[1:]]
    assert [{k: v for k, v in e.items() if k != "unit"} for e in ea] == eb
    assert [e["unit"] for e in ea] == [unit_of("f", f"c{i % 2}") for i in range(6)]
    assert "customer_id" not in json.dumps(ea) and '"c0"' not in json.dumps(a.log)


@pytest.mark.parametrize("config", [ftrl(block=3, horizon=30), winnow(k=2)], ids=["dp_ftrl", "winnow"])
def test_batches_decide_and_answer_as_one_example_at_a_time(config):
    """The batch path (a run cut into admitted and refused stretches) gives the outputs and
    state of one event at a time, for every batch size."""
    persons = [f"p{(i * 7) % 23}" if i % 9 else None for i in range(400)]
    rt = run(config, stream(config, persons, queries_every=11))
    one, state_one, _ = apply(rt.log, [1])
    for sizes in ([7], [64], [500], [3, 41, 17, 200]):
        many, state_many, _ = apply(rt.log, sizes)
        by = lambda out: {t: [v for u, v in out if u == t] for t in ("ledger", "predictions")}  # noqa: E731
        assert by(many) == by(one), sizes
        assert _decided(state_many) == _decided(state_one), sizes
    assert any(k.startswith(f"model/{config['model_id']}/unit/") for k in state_one)


def _decided(state: dict) -> dict:
    """A state with each unit record as decisions read it: its newest epoch's entries (the
    older epochs a record keeps, for re-applying a batch after a crash, depend on where
    batches ended; agents/units.py)."""
    return {k: ({f: v[f] for f in ("e", "s", "b")} if "/unit/" in k else v) for k, v in state.items()}


def _crash_and_reapply(config, persons, cut):
    """Apply the log of ``persons`` up to ``cut``, then the rest as one batch; then, from the
    state before that batch with every record the batch wrote but its head (a crash after
    its records reached the changelog, before its head), apply the batch again. Returns
    (outputs of the batch, of its re-application, unit records after each)."""
    rt = run(config, stream(config, persons))
    log = rt.log
    _, before, _ = apply(log[:cut], [cut])
    first, after, _ = apply(log[cut:], [len(log) - cut], state=copy.deepcopy(before))
    # what reached the changelog before the crash: the batch's cold and unit records, not
    # its head, nor the deletions that only follow a head
    head = f"model/{config['model_id']}/head"
    crashed = copy.deepcopy(before)
    crashed.update(copy.deepcopy({k: v for k, v in after.items() if k != head}))
    again, after_again, _ = apply(log[cut:], [len(log) - cut], state=crashed)
    units = lambda s: {k: v for k, v in s.items() if "/unit/" in k}  # noqa: E731
    return first, again, units(after), units(after_again), after, after_again


def test_reapplying_a_batch_after_a_crash_gives_the_same_outputs_and_unit_records():
    config = ftrl(k=2, block=3)
    persons = [f"p{(i * 5) % 17}" for i in range(300)]
    first, again, units, units_again, after, after_again = _crash_and_reapply(config, persons, 151)
    assert again == first and units_again == units and after_again == after


def test_reapplying_a_batch_that_crossed_an_epoch_keeps_the_older_epochs_decisions():
    """Dora is admitted in epoch 1 before the batch (k = 1); in the batch her next example,
    still in epoch 1, is refused, and one in epoch 2 is admitted, so her record is rewritten
    for epoch 2; the batch crashes before its head. Re-applied from the older head, her
    epoch-1 example is refused again: the record kept epoch 1's entries (units.py, "p").
    A record of epoch 2 alone would have admitted it (k + 1 in epoch 1)."""
    config = ftrl(k=1, block=2, horizon=8, epochs=1000)
    persons = ["dora" if i in (8, 12, 20) else f"x{i}" for i in range(30)]
    first, again, units, units_again, after, after_again = _crash_and_reapply(config, persons, 11)
    record = units[unit_key("p", unit_of("p", "dora"))]
    assert record["e"] > 0 and record["p"]
    assert again == first and units_again == units and after_again == after


def test_the_epoch_cap_reads_only_epochs_before_the_one_being_decided():
    """A record rewritten by a crashed attempt in a later epoch does not count that epoch
    against a re-decided example of an earlier one; a person's further examples of an
    epoch they already reached the learner in are not refused by the cap."""
    crashed = {"e": 2, "s": [40], "b": [0], "E": [0, 2]}
    assert decide(crashed, seq=20, epoch=1, block=0, k=2, floor=0, epochs=2)[0] is True
    assert decide(crashed, seq=20, epoch=1, block=0, k=2, floor=0, epochs=1)[0] is False
    assert decide(crashed, seq=20, epoch=1, block=0, k=2, floor=0, epochs=2)[1]["E"] == [0, 1]
    inside = {"e": 3, "s": [50], "b": [0], "E": [0, 3]}
    assert decide(inside, seq=51, epoch=3, block=1, k=2, floor=3, epochs=2)[0] is True
    assert decide(inside, seq=51, epoch=4, block=1, k=2, floor=3, epochs=2)[0] is False


def test_a_units_record_ignores_entries_at_or_after_the_seq_being_decided():
    """The decision at seq q reads the entries of its epoch before q only: one written by
    an attempt that crashed, at q or later, neither admits nor refuses anything again."""
    stale = {"e": 0, "s": [3, 8, 9], "b": [0, 2, 3]}
    assert decide(stale, seq=8, epoch=0, block=2, k=2, floor=0) == (True, {"e": 0, "s": [3, 8], "b": [0, 2], "E": [0]})
    assert decide(stale, seq=9, epoch=0, block=3, k=2, floor=0)[0] is False      # 3 and 8 before it
    assert decide(stale, seq=4, epoch=0, block=0, k=2, floor=0)[0] is False      # block 0 taken
    assert decide(stale, seq=4, epoch=1, block=0, k=2, floor=1, epochs=2) == (True, {"e": 1, "s": [4], "b": [0], "E": [1]})
    assert decide(stale, seq=12, epoch=1, block=0, k=2, floor=0, epochs=2)[1]["p"] == [[0, [3, 8, 9], [0, 2, 3]]]


def test_admission_writes_no_record_for_a_refusal_and_names_no_id_in_state():
    config = winnow(k=1)
    rt = run(config, stream(config, ["eve"] * 30))
    units = {k: v for k, v in rt.state.items() if "/unit/" in k}
    assert list(units) == [unit_key("w", unit_of("w", "eve"))]
    assert units[unit_key("w", unit_of("w", "eve"))] == {"e": 0, "s": [1], "b": [None], "E": [0]}
    assert "eve" not in json.dumps(dict(rt.state))


KIND_CONFIGS = {
    "continual_winnow": ({"dimension": 20, "budget": {"epsilon": 4.0, "delta": 1e-6},
                          "params": {"kind": "continual_winnow", "max_active": 4, "block": 5, "horizon": 50}},
                         "active"),
    "decision_list": ({"dimension": 6, "budget": {"epsilon": 4.0, "delta": 1e-6},
                       "params": {"kind": "decision_list", "window": 40}}, "binary"),
    "predictor": ({"dimension": 1, "budget": {"epsilon": 10.0, "delta": 1e-6},
                   "params": {"kind": "predictor", "generator": "thresholds", "examples": 1000,
                              "v_max": 8}}, "line"),
}


@pytest.mark.parametrize("name", sorted(KIND_CONFIGS))
def test_every_kind_runs_a_bounded_model_within_the_bound(name):
    """Each kind admits at most k of a person's examples per epoch (the kind's own epoch:
    a window, the sample an epoch is drawn from), answers every example with one record,
    and dead-letters nothing."""
    base, form = KIND_CONFIGS[name]
    config = {"model_id": "m", **base, "privacy_unit": {"max_contributions": 2}}
    s = RNG.stream("privacy-unit-tests", name, 0)
    items = []
    for i in range(1200):
        if form == "active":
            row = {"active": sorted(set(s.below(20, size=3).tolist()))}
        elif form == "binary":
            row = {"x": [1.0 if b else -1.0 for b in s.bits(6).tolist()]}
        else:
            row = {"x": [float(s.uniform(1)[0])]}
        y = 1 if (row.get("x", [1])[0] > 0.3 if form != "active" else 0 in row["active"]) else -1
        items.append(("examples", {"model_id": "m", **row, "y": y,
                                   "privacy_id": "heavy" if i % 3 == 0 else f"p{i % 400}"}))
    rt = run(config, items, trace=True)
    assert "rejected" not in rt.outputs
    assert len(rt.outputs["predictions"]) == len(items)
    per_epoch: dict = {}
    for d in rt.processor.unit_trace.values():
        if d.admitted:
            per_epoch[(d.epoch, d.unit)] = per_epoch.get((d.epoch, d.unit), 0) + 1
    heavy = unit_of("m", "heavy")
    assert max(per_epoch.values()) == 2
    assert any(u == heavy for _, u in per_epoch)
    assert all(entry["unit"] == "person<=2/epoch,<=1 epochs" for entry in rt.outputs["ledger"])


def _public(rt) -> dict:
    """The outputs' noise-free schedule: every example record's seq, status, version,
    updated flag and epoch, the ledger's and the releases' seqs."""
    return {"records": [(p["seq"], p["status"], p["version"], p["updated"], p["epoch"])
                        for p in rt.outputs["predictions"]],
            "ledger": [(e["seq"], e["epoch"]) for e in rt.outputs.get("ledger", [])],
            "releases": [(r["seq"], r["version"]) for r in rt.outputs.get("releases", [])]}


@pytest.mark.parametrize("name", sorted(KIND_CONFIGS))
def test_a_stream_without_ids_keeps_the_schedule_of_one_whose_examples_all_reach_the_learner(name):
    """No example has an ID, so none reaches the learner: still every window trains (on no
    rows), the epoch starts on a sample no block holds a row of, every block releases, at
    the seqs, versions and epochs of the same stream with an ID of its own on every example
    (all admitted); nothing is dead-lettered."""
    base, form = KIND_CONFIGS[name]
    config = {"model_id": "m", **base, "privacy_unit": {"max_contributions": 2}}
    s = RNG.stream("privacy-unit-tests", name, 1)
    rows = []
    for i in range(1100):
        if form == "active":
            row = {"active": sorted(set(s.below(20, size=3).tolist()))}
        elif form == "binary":
            row = {"x": [1.0 if b else -1.0 for b in s.bits(6).tolist()]}
        else:
            row = {"x": [float(s.uniform(1)[0])]}
        rows.append({"model_id": "m", **row, "y": 1 if i % 3 else -1})
    none = run(config, [("examples", r) for r in rows])
    every = run(config, [("examples", {**r, "privacy_id": f"p{i}"}) for i, r in enumerate(rows)])
    assert "rejected" not in none.outputs and "rejected" not in every.outputs
    assert _public(none) == _public(every)
    assert len(none.outputs.get("ledger", [])) >= 2 or name == "predictor"
    assert none.outputs["ledger"]
