"""Attacks on the privacy unit (a person: ``privacy_unit`` {max_contributions k, max_epochs
E, id_field}; docs/privacy.md, "The privacy unit"), each pinned by a test that fails on
the code as it is. Product code is not changed here.

1. An ID-equality oracle: whether an example is admitted depends on whether its ID equals
   an earlier example's, and a refusal moves the noise-free schedule of the public outputs
   (when a block releases, when a window trains, when an epoch starts). Anyone who may
   write one example learns, without any noise, whether a chosen ID sent an example
   earlier in the block or epoch.
2. An intervals predictor's exact fit is O(points^3) and its registration is refused
   above INTERVAL_POINTS points a block; with a person as the unit one person's k rows
   all go to one block, so a block can hold up to k (1,000) points.
3. One ID that dpstream's own CSV and JSONL paths turn into two units (CSV cells are
   stripped and stay text, JSON whole doubles become integers, JSON text is not stripped),
   so one person can contribute 2k per epoch.
4. ``dpstream run`` over a JSONL file stops with a traceback at an example whose
   ``model_id`` is not text (the privacy-unit count of the owner report hashes it).
"""
import asyncio
import json

import pytest

from dpstream.agents.kinds.predictor import INTERVAL_POINTS
from dpstream.schemas import ModelConfig
from dpstream.streams.cli.commands import main
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.tools.userfiles import TableSpec, read_jsonl, read_rows

from .persons import RNG, run

HEX_KEY = "00112233445566778899aabbccddeeff" * 2

# --------------------------------------------------------------------------- 1. the oracle
ORACLE_CONFIGS = {
    "dp_ftrl": ({"dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
                 "params": {"kind": "dp_ftrl", "horizon": 40, "block": 4}}, 60),
    "continual_winnow": ({"dimension": 8, "budget": {"epsilon": 4.0, "delta": 1e-6},
                          "params": {"kind": "continual_winnow", "max_active": 4, "block": 4,
                                     "horizon": 40}}, 60),
    "decision_list": ({"dimension": 4, "budget": {"epsilon": 4.0, "delta": 1e-6},
                       "params": {"kind": "decision_list", "window": 8}}, 40),
    "predictor": ({"dimension": 1, "budget": {"epsilon": 10.0, "delta": 1e-6},
                   "params": {"kind": "predictor", "generator": "thresholds", "examples": 1000,
                              "v_max": 8}}, 1100),
}


def _row(name: str, i: int) -> dict:
    s = RNG.stream("privacy-unit-attacks", name, i)
    if name == "continual_winnow":
        return {"active": sorted(set(s.below(8, size=3).tolist()))}
    if name == "decision_list":
        return {"x": [1.0 if b else -1.0 for b in s.bits(4).tolist()]}
    if name == "predictor":
        return {"x": [float(s.uniform(1)[0])]}
    return {"x": [float(v) * 2 - 1 for v in s.uniform(2)]}


def _schedule(name: str, guess: str) -> dict:
    """The public outputs' noise-free schedule of a stream whose first example is the
    victim's and whose second is the attacker's, with privacy ID ``guess``; every other
    example has an ID of its own. (Which example releases, trains, starts an epoch, and
    every example record's status, version, updated flag and epoch: none of it carries a
    noisy value.)"""
    base, n = ORACLE_CONFIGS[name]
    config = {"model_id": "m", **base, "privacy_unit": {"max_contributions": 1}}
    ids = ["alice@example.com", guess] + [f"filler-{i}" for i in range(2, n)]
    items = [("examples", {"model_id": "m", **_row(name, i), "y": 1 if i % 3 else -1, "privacy_id": pid})
             for i, pid in enumerate(ids)]
    rt = run(config, items)
    assert "rejected" not in rt.outputs
    return {"ledger": [(e["seq"], e["epoch"]) for e in rt.outputs.get("ledger", [])],
            "releases": [(r["seq"], r["version"]) for r in rt.outputs.get("releases", [])],
            "records": [(p["seq"], p["status"], p["version"], p["updated"], p["epoch"])
                        for p in rt.outputs["predictions"]]}


@pytest.mark.parametrize("name", sorted(ORACLE_CONFIGS))
def test_whether_an_id_was_seen_before_does_not_move_the_public_release_schedule(name):
    """The attack: an attacker who may write to ``examples`` (the producer role) sends one
    example with a guessed ID, say a victim's e-mail address, right after the victim's
    example may have arrived. With k = 1 a right guess is refused (the victim already has
    an example in this block or epoch) and a wrong one is admitted. A refused example does
    not count towards the block (dp_ftrl, continual_winnow), the window (decision_list) or
    the sample (predictor), so the next release, training or epoch start comes one example
    later: the predictions' ``updated``/``version``, the ledger's and the releases' seq
    (and /status' ``buffered_examples``) tell a right guess from a wrong one, exactly, with
    no noise to hide it. So the ID's value reaches the outputs (membership of a chosen
    person in the block or epoch), though docs/privacy.md says the IDs are private inputs
    like features and a refused record says "never anything about the ID". (The relation
    of docs/privacy.md declares "which records share an ID" public; this test shows what
    that gives away. Counting blocks, windows and samples by arriving examples, a refused
    one occupying its place without reaching the learner, would close the channel.)"""
    right, wrong = _schedule(name, "alice@example.com"), _schedule(name, "bob@example.com")
    assert right == wrong


# --------------------------------------------------------------------------- 2. intervals
def test_one_persons_rows_do_not_push_an_intervals_block_past_its_point_bound():
    """The attack: an intervals predictor (exact fit over every pair of a block's points,
    O(points^3) time and memory) is refused at registration when a block of m examples
    plus v_max hard queries would exceed INTERVAL_POINTS (256), a bound added after an
    attacker's pass. With a person as the unit every row of a person goes to one block
    (learners/predictor.py ``partition_units``), so one client sending k = 1,000 examples
    under one ID makes a block of ~1,000 points: measured, 600 points take 3.6 s and 1 GB
    for one fit, 1,000 points ~20 s and ~4.5 GB, at the epoch start and at every hard
    query that refits the block; a worker out of memory dead-letters the example that
    completes the sample, and every later one (the model never leaves ``learning``).
    The registration is accepted (only a note warns that one person can make a block)."""
    config = {"model_id": "iv", "dimension": 1, "budget": {"epsilon": 20.0, "delta": 1e-6},
              "params": {"kind": "predictor", "generator": "intervals", "k": 100, "m": 10, "v_max": 4},
              "privacy_unit": {"max_contributions": 1000}}
    items = []
    for i in range(1000):
        x = (i * 0.6180339887) % 1.0
        items.append(("examples", {"model_id": "iv", "x": [x], "y": 1 if 0.3 < x < 0.7 else -1,
                                   "privacy_id": "whale" if i < 400 else f"p{i}"}))
    rt = run(config, items)
    dead = rt.outputs.get("rejected", [])
    if dead and dead[0]["source"] == "models:0:0":
        return                          # the registration refused: no such block can be made
    assert not dead
    handler = rt.processor._handlers["iv"]
    largest = max(len(y) for _, y in handler.model.blocks)
    assert largest + 4 <= INTERVAL_POINTS, f"a block of {largest} rows (+ v_max 4 hard queries)"


# --------------------------------------------------------------------------- 3. two units
CANON_MODEL = {"model_id": "clicks", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
               "params": {"kind": "dp_ftrl", "horizon": 200, "block": 2},
               "privacy_unit": {"max_contributions": 2}}


def _logged_unit(payload: bytes) -> str | None:
    """The unit the sequencer logs for one example record (the worker's path)."""
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all([("models", CANON_MODEL), ("examples", payload)]))
    assert "rejected" not in rt.outputs
    return rt.log[-1]["value"]["event"].get("unit")


@pytest.mark.parametrize("csv_cell, json_value", [("42.0", "42.0"), (" 42", '" 42"')],
                         ids=["whole-double", "leading-space"])
def test_one_id_sent_through_csv_and_jsonl_is_one_person(tmp_path, csv_cell, json_value):
    """The attack (a careless client, or a person whose records come from two exports of
    one table): pandas writes an ID column that has a missing value as floats, ``42.0``
    in a CSV and ``42.0`` in JSON Lines; and a padded ID (`` 42``) is written as it is in
    both. dpstream reads a JSON whole double as the integer (``42``), a CSV cell as its
    text (``"42.0"``); it strips a CSV cell (``"42"``) but not a JSON string
    (``" 42"``). Each time the same ID becomes two units, so the person may have 2k
    examples per epoch reach the learner, and their guarantee is group privacy over two
    units (about twice the epsilon the ledger states). agents/units.py makes ``123`` and
    ``"123"`` one person for exactly this reason ("a CSV column is text where a JSONL file
    may hold numbers: two units for one person would let them contribute 2k")."""
    config = ModelConfig.model_validate(CANON_MODEL)
    (tmp_path / "e.csv").write_text(f"privacy_id,a,b,y\n{csv_cell},0.5,0.5,1\n")
    [csv_row], _ = read_rows(str(tmp_path / "e.csv"), "csv", TableSpec("examples", "clicks"),
                             {"clicks": config})
    (tmp_path / "e.jsonl").write_text('{"model_id": "clicks", "x": [0.5, 0.5], "y": 1, '
                                      f'"privacy_id": {json_value}}}\n')
    [jsonl_row] = read_jsonl(str(tmp_path / "e.jsonl"))
    from_csv, from_jsonl = _logged_unit(csv_row.raw), _logged_unit(jsonl_row.raw)
    assert from_csv is not None and from_jsonl is not None
    assert from_csv == from_jsonl, (csv_row.value["privacy_id"], jsonl_row.value["privacy_id"])


# --------------------------------------------------------------------------- 4. a traceback
@pytest.mark.parametrize("model_id", [["clicks"], {"id": "clicks"}], ids=["list", "object"])
def test_run_over_jsonl_with_a_non_text_model_id_dead_letters_it_instead_of_a_traceback(
        tmp_path, monkeypatch, capsys, model_id):
    """The attack (a careless client): one JSONL example whose ``model_id`` is a list or an
    object, among good ones, for a model whose unit is a person. The worker's schema
    dead-letters it ("invalid: model_id: string_type"), as ``run`` does for any other bad
    record. But ``dpstream run`` never gets that far: the owner report's new count of
    examples without a usable ID tests ``record.get("model_id") in self.units`` before
    checking that the model id is text (streams/tools/owner_report.py ``add``), so the run
    ends in a TypeError traceback (unhashable type) with nothing run. ``produce
    --no-check`` takes the same path."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", HEX_KEY)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    (tmp_path / "m.json").write_text(json.dumps(CANON_MODEL))
    rows = [{"model_id": "clicks", "x": [0.1 * i, 0.5], "y": 1, "privacy_id": f"SECRET-{i}"} for i in range(6)]
    rows.insert(3, {"model_id": model_id, "x": [0.5, 0.5], "y": 1, "privacy_id": "SECRET-X"})
    (tmp_path / "e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["run", "--models", str(tmp_path / "m.json"), "--examples", str(tmp_path / "e.jsonl"),
                 "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    assert code == 1, said.err                     # one dead letter, said, exit 1
    dead = [json.loads(line) for line in (tmp_path / "out" / "rejected.jsonl").read_text().splitlines()]
    assert [d["reason"].split(":")[1].strip() for d in dead] == ["model_id"]
    assert "SECRET" not in said.err + said.out
