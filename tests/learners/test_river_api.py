"""The River-compatible classifiers (learners/online.py, learners/labels.py) follow River's
conventions (issue 43, item 3): the user's labels in and out whatever they are and
whatever comes first, ``repr`` and ``clone``, a real ``predict_proba_one`` where the
model has a score, River's own estimator checks, and ``progressive_val_score`` reporting
the model's true accuracy.

Before: the label set came from the first label, so a -1/+1 stream starting with +1 was
answered 1/0 (never -1: ~50% accuracy in ``progressive_val_score``) and both string
classes mapped to +1 (answers ``True``: 0%); ``True`` was answered before any label;
``repr(model)`` and ``model.clone()`` raised AttributeError; ``predict_proba_one`` was a
hard 1/0; every model with the same key shared one noise stream."""
import copy
import importlib.util
import math
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from dpstream.learners import online
from dpstream.learners.online import PHISHING_FIELDS, ContinualWinnowClassifier, DPFTRLClassifier
from dpstream.mechanisms.errors import ParameterError

KEY = b"river-api-tests-key-000000000000"
FIELDS = [{"type": "numeric", "name": "a", "lower": -1, "upper": 1},
          {"type": "numeric", "name": "b", "lower": -1, "upper": 1}]
CLASSIFIERS = {      # one noise stream each (model_id), so that every run is the same
    "dp_ftrl": lambda **kw: DPFTRLClassifier(FIELDS, epsilon=4.0, horizon=2000, key=KEY,
                                             **{"model_id": "test", **kw}),
    "continual_winnow": lambda **kw: ContinualWinnowClassifier(FIELDS, epsilon=4.0, horizon=2000, key=KEY,
                                                               **{"model_id": "test", "block": 20, **kw}),
}
ENCODINGS = [(False, True), (0, 1), (-1, 1), ("legit", "phish"), ("no", "yes")]


def learnable(n=1000, seed=1):
    """A linearly separable stream of records: positive iff a + b / 2 > 0 (the data's
    randomness, not privacy noise)."""
    X = np.random.default_rng(seed).uniform(-1, 1, (n, 2))
    return [{"a": float(a), "b": float(b)} for a, b in X], X[:, 0] + 0.5 * X[:, 1] > 0


def starting_with(records, positive, first_positive: bool):
    """The stream from its first example of the wanted class on."""
    start = int(np.argmax(positive == first_positive))
    return records[start:], positive[start:]


def prequential(model, records, labels):
    """(answers, accuracy over the answered examples): predict, then learn, as
    ``progressive_val_score`` does."""
    answers = []
    for x, y in zip(records, labels):
        answers.append(model.predict_one(x))
        model.learn_one(x, y)
    answered = [(a, y) for a, y in zip(answers, labels) if a is not None]
    return answers, sum(a == y for a, y in answered) / len(answered)


@pytest.mark.parametrize("kind", CLASSIFIERS)
@pytest.mark.parametrize("encoding", ENCODINGS, ids=str)
@pytest.mark.parametrize("first_positive", [True, False], ids=["first+", "first-"])
def test_answers_are_the_users_labels_and_right_whatever_the_first_label(kind, encoding, first_positive):
    """Every answer is one of the user's two labels, both are answered, and the model is
    right on a learnable stream (Winnow ~80%, DP-FTRL ~92% here), for bools, 0/1, -1/+1
    and named classes, whichever class comes first (before: +1 first gave 1/0 answers,
    strings gave True)."""
    records, positive = starting_with(*learnable(), first_positive)
    labels = [encoding[int(p)] for p in positive]
    answers, accuracy = prequential(CLASSIFIERS[kind](), records, labels)
    given = [a for a in answers if a is not None]
    assert set(given) == set(encoding) and all(type(a) is type(encoding[int(a == encoding[1])])
                                              for a in given)
    assert accuracy > 0.75 and answers.count(None) < len(answers) / 50


def test_first_label_plus_one_then_minus_one_is_answered_minus_one():
    """The issue's case: -1/+1 labels, +1 first; the model answers -1 where it learned -1
    (before: labels (1, 0) were fixed by the first label and -1 never came back)."""
    records, positive = starting_with(*learnable(), True)
    model = CLASSIFIERS["dp_ftrl"]()
    for x, p in zip(records, positive):
        model.learn_one(x, 1 if p else -1)
    assert model.predict_one({"a": -0.9, "b": -0.9}) == -1
    assert model.predict_one({"a": 0.9, "b": 0.9}) == 1


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_before_any_label_nothing_is_answered_rather_than_a_class_never_given(kind):
    """No label yet: predict_one None and predict_proba_one {} (River's ``evaluate`` skips
    both), not ``True`` from nowhere."""
    model = CLASSIFIERS[kind]()
    assert model.predict_one({"a": 0.5}) is None and model.predict_proba_one({"a": 0.5}) == {}


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_until_the_second_class_is_seen_nothing_is_answered(kind):
    """One named class seen: the model cannot name its other answer, so it answers
    nothing, rather than counting every abstention as the one class it knows."""
    model = CLASSIFIERS[kind]()
    for _ in range(30):
        model.learn_one({"a": 0.9, "b": 0.1}, "phish")
    assert model.predict_one({"a": 0.9}) is None and model.predict_proba_one({"a": 0.9}) == {}
    model.learn_one({"a": -0.9, "b": 0.1}, "legit")
    assert model.predict_one({"a": 0.9}) in ("phish", "legit")
    assert set(model.predict_proba_one({"a": 0.9})) == {"phish", "legit"}


@pytest.mark.parametrize("kind", CLASSIFIERS)
@pytest.mark.parametrize("first", [True, np.bool_(False)], ids=["bool", "numpy-bool"])
def test_a_bool_label_names_both_classes_as_rivers_binary_classifiers_do(kind, first):
    model = CLASSIFIERS[kind]()
    model.learn_one({"a": 0.1, "b": 0.2}, first)
    proba = model.predict_proba_one({"a": 0.1})
    assert set(proba) == {False, True} and all(type(k) is bool for k in proba)
    assert model.predict_one({"a": 0.1}) in (False, True, None)     # None: the learner abstains


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_declared_classes_are_answered_from_the_first_call(kind):
    model = CLASSIFIERS[kind](classes=("legit", "phish"))
    assert set(model.predict_proba_one({"a": 0.3})) == {"legit", "phish"}
    assert math.isclose(sum(model.predict_proba_one({"a": 0.3}).values()), 1.0)
    with pytest.raises(ParameterError, match="third class"):
        model.learn_one({"a": 0.3}, "spam")


@pytest.mark.parametrize("label", [None, float("nan"), ["a"]], ids=["None", "NaN", "list"])
def test_an_unusable_label_is_refused_by_name_without_its_value(label):
    """Before: None and NaN were learned as the negative class."""
    model = CLASSIFIERS["dp_ftrl"]()
    with pytest.raises(ParameterError) as err:
        model.learn_one({"a": 0.3}, label)
    assert err.value.name == "y" and model.learner.state.t == 0


@pytest.mark.parametrize("classes", [("yes",), ("a", "a"), "ab", (None, 1)], ids=str)
def test_declared_classes_must_be_two_distinct_labels(classes):
    with pytest.raises(ParameterError) as err:
        CLASSIFIERS["dp_ftrl"](classes=classes)
    assert err.value.name == "classes"


def test_a_third_class_is_refused_and_nothing_is_learned():
    model = CLASSIFIERS["continual_winnow"]()
    model.learn_one({"a": 0.3}, "yes")
    model.learn_one({"a": -0.3}, "no")
    with pytest.raises(ParameterError, match=r"one of this model's two classes \('no', 'yes'\)"):
        model.learn_one({"a": 0.3}, "maybe")
    assert model.learner.state.t == 2


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_repr_shows_every_parameter_but_the_key(kind):
    model = CLASSIFIERS[kind](classes=(0, 1))
    text = repr(model)
    assert text.startswith(type(model).__name__ + " (") and "epsilon=4.0" in text
    assert "classes=(0, 1)" in text and "key=<secret>" in text
    assert KEY.decode() not in text and repr(KEY) not in text
    assert repr(model.clone()) == text


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_clone_is_an_unfitted_model_with_equal_params(kind):
    records, positive = learnable(300)
    model = CLASSIFIERS[kind](block=10) if kind == "dp_ftrl" else CLASSIFIERS[kind]()
    for x, p in zip(records, positive):
        model.learn_one(x, "yes" if p else "no")
    clone = model.clone()
    assert type(clone) is type(model) and clone._get_params() == model._get_params()
    assert clone.learner.state.t == 0 and clone.learner.version == 0 and clone.labels.classes == ()
    assert clone.predict_one(records[0]) is None
    before = pickle.dumps(clone)
    model.learn_one(records[0], "yes")
    assert pickle.dumps(clone) == before
    if kind == "dp_ftrl":
        assert model.clone({"block": 20}).learner.params.block == 20


def test_two_models_with_one_key_draw_different_noise_unless_given_one_model_id():
    """Same key, same data: without a model_id each instance (a clone too) has its own
    noise, so releases of two models never differ by their data alone; one explicit
    model_id reproduces the releases (before: every model used the stream "library")."""
    records, positive = learnable(200)

    def trained(model):
        for x, p in zip(records, positive):
            model.learn_one(x, bool(p))
        return model.learner.w

    a = CLASSIFIERS["dp_ftrl"](block=10, model_id=None)
    assert not np.allclose(trained(a), trained(a.clone()))
    assert np.array_equal(trained(CLASSIFIERS["dp_ftrl"](block=10, model_id="m")),
                          trained(CLASSIFIERS["dp_ftrl"](block=10, model_id="m")))


def test_dp_ftrl_predict_proba_is_the_released_logistic_probability():
    """A probability distribution over the user's classes, the logistic of the released
    model's score (its log-odds are <w, x> plus one intercept for every x), not a hard 0/1,
    whose likelier class is the answer (before: {label: 1.0})."""
    records, positive = learnable()
    model = CLASSIFIERS["dp_ftrl"]()
    for x, p in zip(records, positive):
        model.learn_one(x, "phish" if p else "legit")
    probes = [{"a": a, "b": b} for a in (-0.8, -0.1, 0.05, 0.7) for b in (-0.5, 0.5)]
    intercepts = []
    for x in probes:
        proba = model.predict_proba_one(x)
        assert set(proba) == {"legit", "phish"} and math.isclose(sum(proba.values()), 1.0)
        assert 0.0 < proba["phish"] < 1.0
        margin = float((model.learner.rows([model.featuriser.dense(x)]) @ model.learner.w)[0])
        intercepts.append(math.log(proba["phish"] / proba["legit"]) - margin)
        assert model.predict_one(x) == max(proba, key=proba.get)
    assert np.allclose(intercepts, intercepts[0], atol=1e-9)
    spread = [model.predict_proba_one(x)["phish"] for x in probes]
    assert min(spread) < 0.3 and max(spread) > 0.7 and len(set(np.round(spread, 6))) == len(probes)


def test_continual_winnow_predict_proba_is_its_label_with_probability_one():
    """Winnow releases a sign rule, not a probability: all the mass on its answer."""
    records, positive = learnable(500)
    model = CLASSIFIERS["continual_winnow"]()
    for x, p in zip(records, positive):
        model.learn_one(x, int(p))
    for x in records[:20]:
        assert model.predict_proba_one(x) == {model.predict_one(x): 1.0, 1 - model.predict_one(x): 0.0}


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_a_pickled_or_copied_model_continues_as_the_original(kind, monkeypatch):
    """Before: continual Winnow did not pickle (its noise prefetch held a thread's future).
    A pickle holds no key: loading it takes the key from the environment."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY.hex())
    records, positive = learnable(400)
    model = CLASSIFIERS[kind]()
    for x, p in zip(records[:200], positive[:200]):
        model.learn_one(x, bool(p))
    twins = [pickle.loads(pickle.dumps(model)), copy.deepcopy(model)]
    for x, p in zip(records[200:], positive[200:]):
        answers = {repr(m.predict_proba_one(x)) for m in [model, *twins]}
        assert len(answers) == 1
        for m in [model, *twins]:
            m.learn_one(x, bool(p))


# ---------------------------------------------------------------- with River itself (the test extra)

def phishing(encoding, first_positive: bool):
    """River's Phishing stream (1,250 real records, shipped with River) from its first
    example of the wanted class, labels in ``encoding``."""
    from river import datasets
    rows = list(datasets.Phishing())
    start = next(i for i, (_, y) in enumerate(rows) if y == first_positive)
    return [(x, encoding[int(y)]) for x, y in rows[start:]]


@pytest.mark.parametrize("cls", [DPFTRLClassifier, ContinualWinnowClassifier], ids=lambda c: c.__name__)
@pytest.mark.parametrize("encoding", [(False, True), (-1, 1), ("legit", "phish")], ids=str)
@pytest.mark.parametrize("first_positive", [True, False], ids=["first+", "first-"])
def test_progressive_val_score_reports_the_true_accuracy_whatever_the_first_label(cls, encoding,
                                                                                   first_positive):
    """River's progressive_val_score on real data reports the model's accuracy, the same
    for every encoding and first label (before: ~50% for -1/+1 starting with +1, 0% for
    named classes)."""
    from river import evaluate, metrics
    stream = phishing(encoding, first_positive)
    model = cls(PHISHING_FIELDS, epsilon=4.0, horizon=1250, key=KEY, model_id="phishing",
                **({"block": 50} if cls is ContinualWinnowClassifier else {}))
    twin = model.clone()
    reported = evaluate.progressive_val_score(stream, model, metrics.Accuracy()).get()
    _, accuracy = prequential(twin, [x for x, _ in stream], [y for _, y in stream])
    assert math.isclose(reported, accuracy) and reported > 0.75


@pytest.mark.parametrize("cls", [DPFTRLClassifier,
                                 pytest.param(ContinualWinnowClassifier, marks=pytest.mark.slow)],
                         ids=lambda c: c.__name__)
def test_rivers_own_estimator_checks_pass(cls, monkeypatch):
    """river.checks.check_estimator (River's conventions: params, clone, repr, pickling,
    pure predictions, probabilities, bool keys, bounded memory) on River's Phishing, with
    River's bool classes declared as its binary classifiers have them (the key in the
    environment too: a pickle holds none)."""
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", next(cls._unit_test_params())["key"].hex())
    from river import base, checks                  # River is in the test extra (pyproject.toml)
    model = cls(**next(cls._unit_test_params()))
    assert isinstance(model, base.Classifier) and not model._multiclass
    checks.check_estimator(model)


def test_in_a_river_pipeline_repr_and_notebook_view_hide_the_key_and_clone_works():
    from river import compose
    secret = b"S" * 32
    model = DPFTRLClassifier(FIELDS, epsilon=4.0, horizon=100, key=secret)
    pipeline = compose.Select("a", "b") | model
    assert "SSSS" not in repr(pipeline) and "SSSS" not in pipeline._repr_html_()
    assert "key=<secret>" in repr(pipeline)
    clone = pipeline.clone()
    assert clone["DPFTRLClassifier"].key == secret and clone["DPFTRLClassifier"].learner is not model.learner


def test_without_river_the_estimator_protocol_still_works(monkeypatch):
    """River is optional: learners/online.py loaded with ``import river`` failing still
    has River's _get_params / clone / repr."""
    monkeypatch.setitem(sys.modules, "river", None)
    monkeypatch.setitem(sys.modules, "river.base", None)
    spec = importlib.util.spec_from_file_location("dpstream.learners._online_without_river",
                                                  Path(online.__file__))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.DPFTRLClassifier(FIELDS, epsilon=4.0, horizon=2000, key=KEY, block=10, model_id="t")
    assert not any(c.__module__.startswith("river") for c in type(model).__mro__)
    model.learn_one({"a": 0.5}, "yes")
    clone = model.clone()
    assert clone._get_params() == model._get_params() and clone._get_params()["block"] == 10
    assert clone.labels.classes == () and "key=<secret>" in repr(clone)


def test_the_readme_python_api_block_runs_as_written(monkeypatch, capsys):
    """The README's Python API example, verbatim, with a key in the environment as the
    quick start sets it: River's progressive_val_score reports a real accuracy."""
    from tests.docs.blocks import block_under
    block = block_under("README.md", "Python API", "python").text
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", KEY.hex())
    exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Accuracy: ") and float(out[0].split()[1].rstrip("%")) > 75
    assert out[1].startswith("{False: ") and "True: " in out[1]


def test_a_pickled_model_holds_no_key_and_loads_only_with_the_same_key(monkeypatch):
    """Before: ``pickle.dumps(model)`` held the secret key (``learner.rng._secret``, and the
    ``key`` parameter), so sharing a saved model shared the noise of every model under
    that key. Now a pickle holds the key's public fingerprint; loading takes the key from
    the environment and refuses another one."""
    import pickle

    from dpstream.learners.online import DPFTRLClassifier
    from dpstream.mechanisms.errors import MissingKeyError
    key = bytes(range(32))
    fields = [{"name": "a", "type": "numeric", "lower": 0, "upper": 1}]
    model = DPFTRLClassifier(fields, epsilon=4.0, horizon=100, key=key)
    for i in range(30):
        model.learn_one({"a": i / 30}, i % 2 == 0)
    blob = pickle.dumps(model)
    assert key not in blob and key.hex().encode() not in blob
    for derived in model.learner.rng._model_keys.values():
        assert derived not in blob
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", bytes(range(100, 132)).hex())
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    with pytest.raises(MissingKeyError, match="fingerprint"):
        pickle.loads(blob)
    monkeypatch.setenv("DPSTREAM_SECRET_KEY", key.hex())
    loaded = pickle.loads(blob)
    x = {"a": 0.9}
    assert loaded.predict_proba_one(x) == model.predict_proba_one(x)
    loaded.learn_one(x, True)
    model.learn_one(x, True)
    assert loaded.predict_proba_one(x) == model.predict_proba_one(x)   # the same noise on


def _named_stream(n=600):
    records, positive = learnable(n)
    return [(r, "yes" if p else "no") for r, p in zip(records, positive)]


@pytest.mark.parametrize("kind", CLASSIFIERS)
def test_the_mini_batch_verbs_do_what_the_one_verbs_do_on_each_record(kind):
    """Before: the classifiers had no ``learn_many`` / ``predict_many`` /
    ``predict_proba_many`` (AttributeError), though the README says every online learner
    speaks River's verbs. Now one call does what the ``_one`` verbs do record by record:
    the same releases, answers and probabilities."""
    stream = _named_stream()
    X, y = [r for r, _ in stream], [t for _, t in stream]
    one, many = CLASSIFIERS[kind](), CLASSIFIERS[kind]()
    assert many.predict_many(X[:3]) == [None] * 3 and many.predict_proba_many(X[:3]) == [{}] * 3
    for r, t in stream:
        one.learn_one(r, t)
    many.learn_many(X[:250], y[:250])
    many.learn_many(X[250:], y[250:])
    assert many.labels.classes == one.labels.classes
    assert many.predict_many(X) == [one.predict_one(r) for r in X]
    assert many.predict_proba_many(X) == [one.predict_proba_one(r) for r in X]
    assert np.mean([a == t for a, t in zip(many.predict_many(X), y)]) > 0.8


def test_the_mini_batch_verbs_take_and_give_pandas_as_river_does():
    """River's ``MiniBatchClassifier``: ``learn_many(DataFrame, Series)``, ``predict_many``
    a Series and ``predict_proba_many`` a DataFrame on the input's index."""
    pd = pytest.importorskip("pandas")
    stream = _named_stream()
    X = pd.DataFrame([r for r, _ in stream], index=[f"r{i}" for i in range(len(stream))])
    y = pd.Series([t for _, t in stream], index=X.index)
    model = CLASSIFIERS["dp_ftrl"]()
    model.learn_many(X, y)
    pred, proba = model.predict_many(X), model.predict_proba_many(X)
    assert isinstance(pred, pd.Series) and list(pred.index) == list(X.index)
    assert list(proba.columns) == ["no", "yes"] and list(proba.index) == list(X.index)
    assert pred.iloc[7] == model.predict_one(stream[7][0])
    assert proba.iloc[7].to_dict() == model.predict_proba_one(stream[7][0])
    with_missing = X.head(2).assign(b=[np.nan, 0.5])          # a missing cell: the field's missing slot
    assert model.predict_many(with_missing).notna().all()


def test_a_bad_batch_is_refused_before_anything_is_learned():
    stream = _named_stream(60)
    X, y = [r for r, _ in stream], [t for _, t in stream]
    model = CLASSIFIERS["dp_ftrl"]()
    before = copy.deepcopy(model.learner.__dict__)
    with pytest.raises(ParameterError, match="one label per record"):
        model.learn_many(X, y[:-1])
    with pytest.raises(ParameterError, match="third class"):
        model.learn_many(X, y[:-1] + ["maybe"])
    assert model.labels.classes == () and model.last_step is None
    assert pickle.dumps(model.learner.__dict__) == pickle.dumps(before)
    with pytest.raises(ParameterError, match="_one verbs"):
        model.learn_many(X[0], y[:1])
    with pytest.raises(ParameterError, match="records as dicts"):
        model.predict_many(np.zeros((3, 2)))
    with pytest.raises(ParameterError, match="records as dicts"):
        model.learn_many(None, [])
    with pytest.raises(ParameterError, match="the labels as a list"):
        model.learn_many(X[:2], "ab")                   # not the labels "a" and "b"
    assert model.labels.classes == () and model.last_step is None


def test_classes_taken_by_a_batch_stay_once_its_learning_started():
    """A reviewer's finding: an ``on_charge`` that raised mid-batch left the learner in its
    next epoch while the batch's class names were dropped, so the next label seen could
    take the other sign."""
    calls = []

    def fail_on_second(entry):
        calls.append(entry)
        if len(calls) == 2:
            raise RuntimeError("the caller's callback")
    stream = _named_stream(60)
    model = DPFTRLClassifier(FIELDS, epsilon=4.0, horizon=20, block=5, key=KEY, model_id="t",
                             on_charge=fail_on_second)
    with pytest.raises(RuntimeError):
        model.learn_many([r for r, _ in stream], [t for _, t in stream])
    assert set(model.labels.classes) == {"yes", "no"}
    assert model.labels.by_sign[1] == stream[0][1]          # the first label seen is +1, as before


@pytest.mark.parametrize("first", ["ok", "fraud"])
def test_a_declared_prior_with_named_classes_needs_them_declared(first):
    """Before: ``prior=0.05`` with labels "ok" / "fraud" went to whichever came first:
    with "ok" first the model answered P(fraud) = 0.95 on a neutral record, silently.
    Now named labels with a declared prior need ``classes``; bools and 1/0 do not."""
    fields = [{"type": "numeric", "name": "a", "lower": -1, "upper": 1}]
    other = {"ok": "fraud", "fraud": "ok"}[first]
    model = DPFTRLClassifier(fields, epsilon=2.0, horizon=500, key=KEY, prior=0.05, prior_weight=0)
    with pytest.raises(ParameterError, match="classes"):
        model.learn_one({"a": 0.0}, first)
    with pytest.raises(ParameterError, match="classes"):
        model.learn_many([{"a": 0.0}], [first])
    declared = DPFTRLClassifier(fields, epsilon=2.0, horizon=500, key=KEY, prior=0.05, prior_weight=0,
                                classes=("ok", "fraud"))
    declared.learn_one({"a": 0.5}, first)
    declared.learn_one({"a": -0.5}, other)
    assert declared.predict_proba_one({"a": 0.0})["fraud"] == pytest.approx(0.05)
    with pytest.raises(ParameterError, match="classes"):          # 0 and -1 both read as -1
        DPFTRLClassifier(fields, epsilon=2.0, horizon=500, key=KEY, prior=0.05,
                         prior_weight=0).learn_many([{"a": 0.5}, {"a": -0.5}], [0, -1])
    for labels in ((False, True), (0, 1), (-1, 1)):
        conventional = DPFTRLClassifier(fields, epsilon=2.0, horizon=500, key=KEY, prior=0.05, prior_weight=0)
        conventional.learn_many([{"a": 0.5}, {"a": -0.5}], list(labels))
        assert conventional.predict_proba_one({"a": 0.0})[labels[1]] == pytest.approx(0.05)


def test_a_model_made_with_key_bytes_loads_inside_loading_key(monkeypatch):
    """Before: a model made with ``key=`` could be loaded only by putting that key in the
    environment. ``loading_key(key)`` gives it; another key is still refused, and the
    loaded model's clone keeps the key."""
    from dpstream.mechanisms.errors import MissingKeyError
    from dpstream.mechanisms.randomness import loading_key
    monkeypatch.delenv("DPSTREAM_SECRET_KEY", raising=False)
    monkeypatch.delenv("DPSTREAM_SECRET_KEY_FILE", raising=False)
    model = CLASSIFIERS["dp_ftrl"]()
    for r, t in _named_stream(200):
        model.learn_one(r, t)
    blob = pickle.dumps(model)
    with pytest.raises(MissingKeyError, match="loading_key"):
        pickle.loads(blob)
    with pytest.raises(MissingKeyError, match="fingerprint"), loading_key(bytes(range(32))):
        pickle.loads(blob)
    with loading_key(KEY):
        loaded = pickle.loads(blob)
    x = {"a": 0.3, "b": -0.2}
    assert loaded.predict_proba_one(x) == model.predict_proba_one(x)
    assert loaded.key == KEY and loaded.clone().key == KEY
    assert pickle.loads(pickle.dumps(3)) == 3                 # the block's key is gone after it


@pytest.mark.parametrize("kind,typo,meant", [("dp_ftrl", "blok", "block"), ("continual_winnow", "etaa", "eta")])
def test_a_misspelt_learner_setting_is_a_parameter_error_naming_the_closest(kind, typo, meant):
    """Before: ``DPFTRLClassifier(..., blok=5)`` raised a raw TypeError from deep inside
    ("dp_ftrl_parameters() got an unexpected keyword argument")."""
    with pytest.raises(ParameterError, match=f"did you mean '{meant}'"):
        CLASSIFIERS[kind](**{typo: 5})
