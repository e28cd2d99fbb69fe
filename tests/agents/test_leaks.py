"""Issue 8: nothing published is a function of a labelled example except through a
ledgered mechanism. Each test here fails on the code before the fix."""
import asyncio
import hashlib
import itertools
import json
import re

import numpy as np

from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import sequence_batch
from dpstream.learners.dp_winnow import DPWinnow
from dpstream.mechanisms.audit import epsilon_lower_bound
from dpstream.mechanisms.params import dp_winnow_practical_parameters
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.streams.tools.embedded import EmbeddedRuntime
from dpstream.streams.tools.report import build_report

RNG = KeyedRandomness(b"leak-tests-key-not-secret-000000")
WINNOW = {"model_id": "w", "dimension": 8, "budget": {"epsilon": 50.0, "delta": 1e-6},
          "params": {"kind": "winnow", "mode": "practical", "eps_hat": 1.0, "eta": 0.2, "m": 50,
                     "K": 5, "L": 2.0}}
PREDICTOR = {"model_id": "p", "dimension": 1, "budget": {"epsilon": 8.0, "delta": 1e-6},
             "params": {"kind": "predictor", "generator": "thresholds", "k": 80, "m": 10, "v_max": 4}}
DLIST = {"model_id": "dl", "dimension": 4, "budget": {"epsilon": 2.0, "delta": 1e-6},
         "params": {"kind": "decision_list", "window": 50}}


def _run(items):
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(items))
    return rt


def _mixed_stream(flip: bool = False):
    s = KeyedRandomness(b"leak-tests-data-000000000000000000").stream("d", "x", 0)
    items = [("models", WINNOW), ("models", PREDICTOR), ("models", DLIST)]
    xs = np.where(s.bits(400 * 8).reshape(400, 8), 1, -1)
    for i, x in enumerate(xs):
        y = int(x[0]) * (-1 if flip else 1)
        items.append(("examples", {"model_id": "w", "x": x.tolist(), "y": y}))
        items.append(("examples", {"model_id": "dl", "x": x[:4].tolist(), "y": y}))
        if i < 380:
            items.append(("examples", {"model_id": "p", "x": [float(x[1] + x[2] * 0.5)], "y": y}))
        if i % 5 == 0:
            items.append(("queries", {"model_id": "w", "x": x.tolist()}))
            items.append(("queries", {"model_id": "dl", "x": x[:4].tolist()}))
            items.append(("queries", {"model_id": "p", "x": [float(x[1])]}))
    return items


def test_no_model_kind_publishes_a_label_for_a_labelled_example():
    rt = _run(_mixed_stream())
    examples = [p for p in rt.outputs["predictions"] if p["kind"] == "example"]
    assert {p["model_id"] for p in examples} == {"w", "p", "dl"}
    assert all(p["label"] is None for p in examples)
    assert any(p["label"] is not None for p in rt.outputs["predictions"] if p["kind"] == "query")


def test_published_outputs_do_not_change_when_only_example_labels_are_unreleased_inputs():
    """Flipping every label changes the data, so the ledgered releases may change; but an
    example record must carry nothing beyond (status, version, budget), which the audit
    below pins for the example record itself."""
    rt = _run(_mixed_stream())
    for p in rt.outputs["predictions"]:
        if p["kind"] == "example":
            assert set(k for k, v in p.items() if v is not None) <= {
                "model_id", "source", "seq", "kind", "status", "version", "epsilon_spent",
                "epsilon_left", "updated", "epoch"}


def _example_record_label(model_id: str, x: np.ndarray, new_path: bool):
    params = dp_winnow_practical_parameters(eps_hat=1.0, eta=0.2, m=50, K=5, L=2.0, delta=1e-6)
    model = DPWinnow(params=params, d=x.size, rng=RNG, model_id=model_id)
    xi = np.flatnonzero(x > 0).tolist()
    if new_path:                                   # what the handler publishes now
        model.learn_one(xi, +1)
        return 0
    return model.predict_one(xi)                   # what it published before: sgn(<w~, x_t>)


def test_statistical_audit_flags_the_old_example_prediction_and_not_the_new_record():
    """Neighbouring single-example streams: all features -1 versus all +1. The old record
    sgn(<w~, x_t>) separates them perfectly (unbounded epsilon); the new one carries no label."""
    d, runs = 8, 300
    lo, hi = -np.ones(d, dtype=int), np.ones(d, dtype=int)
    for new_path, should_flag in ((False, True), (True, False)):
        a = np.array([_example_record_label(f"a{i}", lo, new_path) for i in range(runs)])
        b = np.array([_example_record_label(f"b{i}", hi, new_path) for i in range(runs)])
        result = epsilon_lower_bound(int((a == 1).sum()), runs, int((b == 1).sum()), runs)
        lower = max(result.epsilon_lower_bound,
                    epsilon_lower_bound(int((a == -1).sum()), runs, int((b == -1).sum()), runs
                                        ).epsilon_lower_bound)
        assert (lower > 4.0) == should_flag, (new_path, lower)


def test_dead_letters_of_a_tiny_input_space_cannot_be_matched_by_hashing_candidates():
    """All 256 examples of an 8-feature model with an invalid label, rejected at the same
    position, give one identical dead letter, and no field holds a hash of any payload."""
    state = {"config/w": {"type": "model", **WINNOW,
                          "params": {**WINNOW["params"], "mode": "practical", "rho": 0.1,
                                     "T": 1_000_000, "beta": 0.01, "c": 0.25, "signed": False}}}
    letters, digests = set(), set()
    for bits in itertools.product((-1, 1), repeat=8):
        payload = json.dumps({"model_id": "w", "x": list(bits), "y": 0}).encode()
        digests.add(hashlib.sha256(payload).hexdigest())
        out = []

        async def emit(topic, key, value):
            out.append((topic, value))
        asyncio.run(sequence_batch([RawRecord("examples", 0, 7, None, payload)], dict(state), emit))
        (topic, value), = out
        assert topic == "rejected"
        letters.add(json.dumps(value, sort_keys=True))
    assert len(letters) == 1
    (letter,) = letters
    assert not any(dig in letter for dig in digests)
    assert set(json.loads(letter)) == {"source", "reason"}


def test_rejection_reasons_carry_no_input_values():
    cases = [{"model_id": "secret-model-name", "x": [0.5] * 8, "y": 1},       # unknown model
             {"model_id": "w", "x": [1] * 8, "y": 1, "mystery_field_xyz": 3},  # extra field
             {"model_id": "w", "x": [1] * 8, "y": 12345},                       # bad label
             {"type": [1], "model_id": "w"},                                    # unhashable type
             {"model_id": "w", "x": [1] * 13, "y": 1}]                          # 13 entries
    state = {"config/w": {"type": "model", **WINNOW, "params": {**WINNOW["params"], "rho": 0.1,
             "T": 1_000_000, "beta": 0.01, "c": 0.25, "signed": False}}}
    for case in cases:
        out = []

        async def emit(topic, key, value):
            out.append(value)
        asyncio.run(sequence_batch([RawRecord("examples", 0, 0, None, json.dumps(case).encode())],
                                   dict(state), emit))
        reason = out[0]["reason"]
        for needle in ("secret-model-name", "mystery_field_xyz", "12345", "13"):
            assert needle not in reason, (case, reason)


def test_public_report_is_identical_when_every_example_label_is_flipped(tmp_path):
    """The public report reads no label: flip every y in the log (keeping the outputs)
    and the report does not change. The old report counted mistakes against labels."""
    rt = _run(_mixed_stream())
    flipped = json.loads(json.dumps(rt.log))
    for rec in flipped:
        ev = rec["value"]["event"]
        if ev["type"] == "example":
            ev["y"] = -ev["y"]
    a = build_report(rt.log, rt.outputs, tmp_path / "a").read_text()
    b = build_report(flipped, rt.outputs, tmp_path / "b").read_text()
    stamp = re.compile(r"<tr><th>generated \(UTC\)</th><td>[^<]*</td></tr>")
    a, b = stamp.sub("", a), stamp.sub("", b)
    assert a == b and "data-form='public'" in a and "mistakes" not in a


def test_internal_report_says_so_first_and_shows_exact_mistakes(tmp_path):
    from dpstream.streams.tools.replay import replay
    rt = _run(_mixed_stream())
    mistakes = {}
    verdict = asyncio.run(replay(RNG, rt.log, rt.outputs, mistakes=mistakes)).verdict()
    page = build_report(rt.log, rt.outputs, tmp_path, verdict, mistakes).read_text()
    body = page[page.index("<body>") + len("<body>"):]
    assert body.startswith("<p id='form' data-form='internal'><strong>INTERNAL")
    handler = rt.processor.handler("w")
    assert mistakes["w"][-1][1] == handler.internal_mistakes()
    assert f'data-internal-mistakes="{handler.internal_mistakes()}"' in page


def test_exported_files_are_readable_by_their_owner_only(tmp_path):
    from dpstream.streams.cli.commands import write_export
    rt = _run(_mixed_stream()[:50])
    write_export(tmp_path / "out", rt.log, rt.outputs)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o700
    for f in (tmp_path / "out").iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f


def test_the_report_names_its_provenance_and_what_each_budget_means(tmp_path):
    rt = _run(_mixed_stream() + [("examples", b"{broken")])
    page = build_report(rt.log, rt.outputs, tmp_path).read_text()
    assert f'data-fingerprints="{RNG.fingerprint()}"' in page
    assert 'data-rejected="1"' in page and "data-version=" in page
    assert page.count("class='meaning'") == 3 and "Releases were not verified" in page
