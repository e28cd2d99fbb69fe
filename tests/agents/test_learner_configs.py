"""Issue 45's registration options for dp_ftrl and predictor: validated at the schema
with messages that name the parameter and its value, and reachable end to end."""
import asyncio

import pytest
from pydantic import ValidationError

from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"learner-config-tests-key-0000000")
FTRL = {"model_id": "ftrl", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
        "params": {"kind": "dp_ftrl", "horizon": 100}}


def validate(cfg: dict, **params) -> ModelConfig:
    return ModelConfig.model_validate({"type": "model", **cfg, "params": {**cfg["params"], **params}})


@pytest.mark.parametrize("params, needle", [
    ({"prior": 1.5}, "prior"), ({"prior": 0}, "prior"), ({"prior_weight": -0.1}, "prior_weight"),
    ({"prior": 0.1, "prior_weight": 0.2}, "prior_weight=0.2"),
])
def test_dp_ftrl_prior_options_are_refused_naming_the_parameter_and_value(params, needle):
    with pytest.raises(ValidationError) as err:
        validate(FTRL, **params)
    text = str(err.value)
    assert needle in text and str(list(params.values())[-1]) in text


def run(items):
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(items))
    return rt


def test_a_dp_ftrl_query_before_the_first_release_gets_no_label_and_a_declared_prior_answers():
    """Before: a query before the first release was answered +1 (sgn 0)."""
    query = ("queries", {"model_id": "ftrl", "x": [0.2, -0.3], "query_id": "q"})
    rt = run([("models", FTRL), query])
    (p,) = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert p["label"] is None and p["status"] == "learning"
    declared = {**FTRL, "params": {**FTRL["params"], "prior": 0.1}}
    rt = run([("models", declared), query])
    (p,) = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert p["label"] == -1 and p["status"] == "answered"


FIELDS = [{"type": "numeric", "name": "a", "lower": -1, "upper": 1, "bins": 4},
          {"type": "categorical", "name": "c", "vocabulary": ["u", "v"]}]


def test_dp_ftrl_rows_and_decision_are_registration_options_reaching_the_worker():
    """rows="both" puts the numeric field's one-hot bins after the values (the dimension
    follows from the declaration: 4 real entries and 8 slots), a raw record is featurised so in
    the worker, and the balanced decision abstains until the first release (every x is
    then exactly at the declared prior, a tie) and answers after it; rows other than
    "values" need declared features, and bad values are refused naming the parameter.
    class_weight="balanced" (issue 45, third round) reaches the learner the worker builds."""
    from dpstream.agents.kinds.dp_ftrl import DPFTRLKind
    from dpstream.learners.dp_ftrl import featurised_row
    from dpstream.learners.features import Featuriser
    cfg = {"model_id": "rows", "budget": {"epsilon": 4.0, "delta": 1e-6}, "features": FIELDS,
           "params": {"kind": "dp_ftrl", "horizon": 100, "rows": "both", "decision": "balanced",
                      "prior": 0.3, "class_weight": "balanced"}}
    config = ModelConfig.model_validate({"type": "model", **cfg})
    assert DPFTRLKind.parameters(config).class_weight == "balanced"
    assert config.dimension == 4 + 8 and DPFTRLKind.config_problem(config) is None
    record = {"a": 0.6, "c": "v"}
    assert DPFTRLKind.featurise(config, record) == {
        "x": featurised_row(Featuriser(config.features), record, "both")}
    query = ("queries", {"model_id": "rows", "features": record, "query_id": "q"})
    examples = [("examples", {"model_id": "rows", "features": {"a": a / 10, "c": "u"}, "y": 1 if a > 3 else -1})
                for a in range(-5, 5)]                          # one block: the first release
    rt = run([("models", cfg), query] + examples + [query])
    before, after = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert before["label"] is None and before["status"] == "learning"   # w = 0: a tie, no answer
    assert after["label"] in (-1, 1) and after["status"] == "answered"
    raw = validate(FTRL, rows="bins")
    assert "declare the features" in DPFTRLKind.config_problem(raw)
    for params, needle in (({"rows": "onehot"}, "rows"), ({"decision": "recall"}, "decision"),
                           ({"class_weight": "auto"}, "class_weight")):
        with pytest.raises(ValidationError) as err:
            validate(FTRL, **params)
        assert needle in str(err.value) and list(params.values())[0] in str(err.value)


# ---------------------------------------------------------------- the predictor
PRED = {"model_id": "pred", "dimension": 3, "budget": {"epsilon": 4.0, "delta": 1e-6},
        "params": {"kind": "predictor", "generator": "logistic", "examples": 1200}}


@pytest.mark.parametrize("params, needle", [
    ({"generator": "thresholds", "balanced": True}, "balanced=True"),
    ({"generator": "thresholds", "student": True}, "student=True"),
    ({"generator": "conjunctions", "hard_query_weight": 5.0}, "hard_query_weight=5.0"),
    ({"v_max": 0}, "v_max"),
])
def test_predictor_options_are_refused_naming_the_parameter_and_value(params, needle):
    with pytest.raises(ValidationError) as err:
        validate(PRED, **params)
    assert needle in str(err.value)


def test_a_logistic_predictor_of_1200_examples_is_sized_not_refused():
    """Before: v_max 64 by default, so 1,200 examples at eps 4 were refused."""
    from dpstream.agents.kinds.predictor import PredictorKind, shape
    cfg = validate(PRED, student=True)
    assert PredictorKind.config_problem(cfg) is None
    k, m, v_max = shape(cfg)
    assert k * m <= 1200 and m >= 10 and 1 <= v_max < 64
    rows = dict((r[0], r[1]) for r in PredictorKind.parameter_rows(cfg))
    assert rows["v_max hard queries per epoch"] == str(v_max)
    assert cfg.params.model_copy(update={"v_max": None}).v_max is None


def test_a_logistic_or_student_model_too_wide_to_fit_in_bounded_time_is_refused():
    from dpstream.agents.kinds.predictor import NEWTON_MAX_DIMENSION, PredictorKind
    wide = {**PRED, "dimension": NEWTON_MAX_DIMENSION + 1}
    for params in ({}, {"generator": "halfspace", "student": True}):
        problem = PredictorKind.config_problem(validate(wide, **params))
        assert f"dimension {NEWTON_MAX_DIMENSION + 1} is above" in problem
    assert PredictorKind.config_problem(validate(wide, generator="halfspace")) is None


def student_events(n_examples=1200, n_queries=1500, generator="logistic"):
    s = RNG.stream("learner-config-tests", "pred", 0)
    X = s.uniform(3 * n_examples).reshape(-1, 3) * 2 - 1
    Q = s.uniform(3 * n_queries).reshape(-1, 3) * 2 - 1
    label = lambda r: 1 if r[0] > 0.4 else -1            # noqa: E731 - 30% positives
    cfg = {**PRED, "params": {**PRED["params"], "student": True, "generator": generator}}
    return ([("models", cfg)]
            + [("examples", {"model_id": "pred", "x": r.tolist(), "y": label(r)}) for r in X]
            + [("queries", {"model_id": "pred", "x": r.tolist(), "query_id": f"q{i}"})
               for i, r in enumerate(Q)]), [label(r) for r in Q]


def assert_a_restart_changes_nothing(evs, cut, state, whole) -> None:
    """Feed ``evs`` to ``cut``, then the rest to a new runtime on the same ``state`` (a
    restarted worker): the predictions are the uninterrupted run's (``whole``)."""
    first = EmbeddedRuntime(RNG, state)
    asyncio.run(first.feed_all(evs[:cut]))
    second = EmbeddedRuntime(RNG, state)
    second.offsets.update(first.offsets)
    second.log_offset = first.log_offset
    asyncio.run(second.feed_all(evs[cut:]))
    assert first.outputs["predictions"] + second.outputs["predictions"] == whole.outputs["predictions"]


@pytest.mark.parametrize("generator", ["logistic", "nearest"])
@pytest.mark.parametrize("cut_query", [25, 700])
def test_the_student_answers_after_exhaustion_end_to_end_and_the_same_after_a_restart(cut_query, generator):
    """The worker's records: released answers, then (after the v_max-th hard query) the
    student's answers with status ``frozen`` and no ledger entry; a restart before
    exhaustion reloads the kept answers (and, for nearest-neighbour blocks, rebinds the
    blocks and hard queries the hypotheses refer to), one after it the fitted student,
    and either gives the same records."""
    evs, truth = student_events(generator=generator)
    whole = run(evs)
    answers = [p for p in whole.outputs["predictions"] if p["kind"] == "query"]
    statuses = [p["status"] for p in answers]
    assert "frozen" in statuses and "budget_exhausted" not in statuses
    frozen = [p["label"] == t for p, t in zip(answers, truth) if p["status"] == "frozen"]
    assert sum(frozen) / len(frozen) > 0.85
    assert len(whole.outputs["ledger"]) == 1                       # the epoch's one charge
    state = {}
    assert_a_restart_changes_nothing(evs, 1 + 1200 + cut_query, state, whole)


@pytest.mark.parametrize("generator", ["halfspace", "logistic", "nearest"])
def test_raw_rows_of_1e300_are_clamped_not_dead_lettered(generator):
    """Before: one example of 1e300 among 1,200 made the halfspace LP fail as the epoch
    started, so the example completing the sample was dead-lettered and the model never
    left ``learning`` (the logistic fit warned and the student's distances overflowed).
    Raw rows of the real-feature generators are now clamped to [-10^6, 10^6]: every
    record is answered, the epoch starts, and the rows the student keeps are bounded."""
    s = RNG.stream("learner-config-tests", "far", 0)
    X = s.uniform(3 * 1200).reshape(-1, 3) * 2 - 1
    Q = s.uniform(3 * 600).reshape(-1, 3) * 2 - 1
    X[7::100], Q[3::50] = [1e300, -1e300, 5.0], [-1e300, 1e300, 1e-300]
    label = lambda r: 1 if r[0] > 0.3 else -1            # noqa: E731
    cfg = {**PRED, "params": {**PRED["params"], "student": True, "generator": generator}}
    rt = run([("models", cfg)]
             + [("examples", {"model_id": "pred", "x": r.tolist(), "y": label(r)}) for r in X]
             + [("queries", {"model_id": "pred", "x": r.tolist(), "query_id": f"q{i}"})
                for i, r in enumerate(Q)])
    assert rt.outputs["rejected"] == []
    answers = [p for p in rt.outputs["predictions"] if p["kind"] == "query"]
    assert len(answers) == 600 and all(p["label"] in (-1, 1) for p in answers)
    assert {p["status"] for p in answers} >= {"answered", "frozen"}
    rows = [r for key, v in rt.state.items() if "/seen/" in key or "/kept/" in key for r in v]
    assert len(rows) > 600 and all(-1e6 <= v <= 1e6 for r in rows for v in r[:3])
    assert any(abs(v) == 1e6 for r in rows for v in r[:3])


def test_the_workers_student_spreads_over_the_queries_it_keeps_and_a_restart_keeps_them():
    """Two moons (no halfspace fits, 12 answers span them): after exhaustion the student
    spreads labels over the queries seen, which the worker keeps in ``seen`` records,
    at most SEEN_MAX rows however many queries come; a restart after exhaustion reloads
    them and gives the same records as the run that never stopped."""
    from dpstream.learners.student import SEEN_MAX

    from ..learners.test_predictor import moons
    X, y = moons("worker-moons", 0, 1500)
    Q, truth = moons("worker-moons-q", 0, SEEN_MAX + 452)
    cfg = {"model_id": "moons", "dimension": 2, "budget": {"epsilon": 4.0, "delta": 1e-6},
           "params": {"kind": "predictor", "generator": "nearest", "examples": 1500, "v_max": 4,
                      "student": True}}
    evs = ([("models", cfg)]
           + [("examples", {"model_id": "moons", "x": r.tolist(), "y": int(t)}) for r, t in zip(X, y)]
           + [("queries", {"model_id": "moons", "x": r.tolist(), "query_id": f"q{i}"})
              for i, r in enumerate(Q)])
    whole = run(evs)
    answers = [p for p in whole.outputs["predictions"] if p["kind"] == "query"]
    frozen = [p["label"] == t for p, t in zip(answers, truth) if p["status"] == "frozen"]
    assert len(frozen) > 2000 and sum(frozen) / len(frozen) > 0.97
    state = {}
    assert_a_restart_changes_nothing(evs, 1 + 1500 + 1200, state, whole)
    assert state["model/moons/head"]["predictor"]["student"]["model"] == "spread"
    seen = [rows for key, rows in state.items() if "/seen/" in key]
    assert sum(len(rows) for rows in seen) == SEEN_MAX
    assert all(len(row) == 2 for rows in seen for row in rows)


def test_a_wide_predictors_hard_queries_keep_every_record_within_its_budget_and_restart():
    """An attacker's pass: the hard queries (v_max rows of d values) sat in the model's head
    record, so a predictor of 1,000 dimensions at v_max 64 wrote a 1.3 MB head: over
    Kafka's 1 MiB, the changelog write failed, and after a restart the model could not
    load and dead-lettered every query. They are chunked records now; every record stays
    within RECORD_BYTES, and a restart between hard queries changes nothing."""
    import json

    from dpstream.agents.kinds.storage import RECORD_BYTES
    d = 1000
    s = RNG.stream("learner-config-tests", "wide", 0)
    X = s.uniform(d * 2000).reshape(-1, d) * 2 - 1
    y = s.bits(2000) * 2 - 1                                  # coin labels: the votes split
    Q = s.uniform(d * 150).reshape(-1, d) * 2 - 1
    cfg = {"model_id": "wide", "dimension": d, "budget": {"epsilon": 50.0, "delta": 1e-6},
           "params": {"kind": "predictor", "generator": "nearest", "examples": 2000}}
    evs = ([("models", cfg)]
           + [("examples", {"model_id": "wide", "x": r.tolist(), "y": int(t)}) for r, t in zip(X, y)]
           + [("queries", {"model_id": "wide", "x": r.tolist(), "query_id": f"q{i}"})
              for i, r in enumerate(Q)])
    whole = run(evs)
    assert whole.outputs["rejected"] == []
    statuses = [p["status"] for p in whole.outputs["predictions"] if p["kind"] == "query"]
    assert statuses.count("hard_query") == 64 and statuses[-1] == "budget_exhausted"
    sizes = {key: len(json.dumps(v)) for key, v in whole.state.items()}
    assert max(sizes.values()) <= RECORD_BYTES, max(sizes.items(), key=lambda kv: kv[1])
    hard = [p["seq"] for p in whole.outputs["predictions"] if p["status"] == "hard_query"]
    cut = next(i for i, (topic, e) in enumerate(evs) if topic == "queries" and e["query_id"] == "q0") \
        + hard[31] - hard[0] + 1
    assert_a_restart_changes_nothing(evs, cut, {}, whole)
    # a head written before the change (hard queries inline, no hard records) still loads
    state = {}
    first = EmbeddedRuntime(RNG, state)
    asyncio.run(first.feed_all(evs[:cut]))
    head = state["model/wide/head"]
    rows = [r for key in sorted(k for k in state if k.startswith("model/wide/hard/")) for r in state.pop(key)]
    head["predictor"]["hard_x"], head["predictor"]["hard_y"] = [r[0] for r in rows], [r[1] for r in rows]
    del head["hard_in_chunks"]
    assert len(rows) == 32 and len(json.dumps(head)) > RECORD_BYTES // 2
    second = EmbeddedRuntime(RNG, state)
    second.offsets.update(first.offsets)
    second.log_offset = first.log_offset
    asyncio.run(second.feed_all(evs[cut:cut + 40]))
    # and its hard queries reach their chunks at the first save, so a second restart (which
    # reads them there: the head no longer holds them) changes nothing either; before, they
    # were lost, and the reload failed with a KeyError (a reviewer's pass)
    assert not state["model/wide/head"]["predictor"]["hard_x"] and state["model/wide/head"]["hard_in_chunks"]
    third = EmbeddedRuntime(RNG, state)
    third.offsets.update(second.offsets)
    third.log_offset = second.log_offset
    asyncio.run(third.feed_all(evs[cut + 40:]))
    assert first.outputs["predictions"] + second.outputs["predictions"] + third.outputs["predictions"] \
        == whole.outputs["predictions"]


@pytest.mark.parametrize("params,says", [
    ({"eps_hat": 1, "eta": 1e300}, "make one update's privacy charge infinite: lower eta and eps_hat"),
    ({"eps_hat": 0.5, "eta": 1e-3, "delta": 1e-308}, "delta=1e-308) make one update's privacy charge "
                                                     "infinite: lower eta and eps_hat, or raise delta"),
    ({"eps_hat": 1e308, "eta": 1e308}, "certify no finite privacy loss: lower eta, eps_hat, m or K"),
    ({"eps_hat": 1, "eta": 1e-3, "m": 10, "K": 10**400}, "certify no finite privacy loss")])
def test_a_winnow_registration_with_an_infinite_charge_says_which_settings(params, says):
    """Before: eta = 1e300 was refused as "malformed event" (a ParameterError for rho = inf
    escaped the budget check), and eps_hat = eta = 1e308 as "epsilon=inf", a parameter the
    registration never gave."""
    from dpstream.agents.kinds import kind
    from dpstream.schemas import ModelConfig
    config = ModelConfig.model_validate(
        {"model_id": "w", "dimension": 20, "budget": {"epsilon": 1e6, "delta": params.get("delta", 0.5)},
         "params": {"kind": "winnow", "signed": True, "m": 10, "K": 100, "L": 1,
                    **{k: v for k, v in params.items() if k != "delta"}}})
    assert says in kind("winnow").config_problem(config)


def test_nearest_blocks_are_refused_where_a_query_would_read_more_than_the_cap():
    """A query of nearest-neighbour blocks reads every example of the epoch (k m d
    numbers, and a temporary as large): 10^8 examples in 100 dimensions would ask ~50 s
    and 80 GB per query. Past NEAREST_WORK the registration is refused, naming the
    numbers and the way out; within it, accepted."""
    from dpstream.agents.kinds import kind
    from dpstream.agents.kinds.predictor import NEAREST_WORK
    from dpstream.schemas import ModelConfig

    def problem(examples, d=100):
        return kind("predictor").config_problem(ModelConfig.model_validate(
            {"model_id": "n", "dimension": d, "budget": {"epsilon": 4.0, "delta": 1e-6},
             "params": {"kind": "predictor", "generator": "nearest", "examples": examples}}))
    assert problem(100_000) is None                                 # 10^7 numbers a query
    said = problem(100_000_000)
    assert said.startswith("nearest-neighbour blocks compare each query with every example")
    assert f"above the {NEAREST_WORK:,} a worker reads per query" in said and '"logistic"' in said
    assert problem(100_000_000, d=1) is not None and problem(10_000_000, d=1) is None
