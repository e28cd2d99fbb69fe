"""River-compatible private classifiers over raw feature dicts.

``learn_one(x: dict, y)`` and ``predict_one(x: dict)`` on records as users have them,
with the declared featuriser (learners/features.py) inside, so River's
``evaluate.progressive_val_score``, pipelines, ``clone`` and ``repr`` work with them.
With River installed the classes are ``river.base.Classifier``s (River's metrics and
``compose`` check that); without it they implement the same ``base.Estimator`` protocol
(``_get_params``, ``clone``) themselves, so River is not a dependency.

River's conventions, as River 0.26 implements them (river/base/base.py,
river/checks/; tests/learners/test_river_api.py runs ``river.checks.check_estimator``):
* parameters: every ``__init__`` argument is kept under its own name, so
  ``_get_params`` reads them back and ``clone()`` builds a fresh, unfitted model with
  the same parameters (extra learner settings in ``**params`` included);
* labels: bools as River's binary classifiers take them, also 0/1, -1/+1 and two named
  classes; answers are always one of the user's labels (learners/labels.py says which
  label is +1 and what is answered before both classes are known: nothing, i.e.
  ``predict_one`` None and ``predict_proba_one`` {}; declare ``classes=(False, True)``
  for River's binary convention of both keys from the first call);
* ``predict_proba_one``: DP-FTRL's is the released logistic model's probability
  sigmoid(<w, x>) (learners/dp_ftrl.py ``predict_proba_many``); continual Winnow
  releases a sign rule, not a probability, so its ``predict_proba_one`` puts all the
  mass on its label. Both are post-processing of
  the released model: they cost no budget.
* ``repr`` shows every parameter but the key (``key=<secret>``).

The noise stream is keyed by (``key``, ``model_id``). Two models with the same key and
model id draw the *same* noise: trained on different data, their releases differ by the
data alone, and the difference gives the data away. So ``model_id=None`` (the default)
gives every instance, clones included, its own stream (a random name from
``secrets``, not privacy noise: the noise itself stays keyed); pass a ``model_id`` only
to reproduce one model's releases, and never reuse it for other data. A pickle of a
model holds its exact, unreleased sums (never the key: loading it takes the key from
the environment again, or, for a model made with ``key=``, from
``mechanisms.randomness.loading_key(key)`` around ``pickle.load``): keep it as private
as the examples.

River's mini-batch verbs (``river.base.MiniBatchClassifier``): ``learn_many(X, y)``,
``predict_many(X)`` and ``predict_proba_many(X)`` take a pandas DataFrame (answering a
Series / DataFrame on its index, as River's do) or any iterable of records (answering
lists), and do what the ``_one`` verbs do on each record in turn, in one call into the
learner (several times faster than a Python loop of ``learn_one``).

What the guarantee covers: only what the learner releases, i.e. its model after each
block, and so every prediction made from it (post-processing), against the examples
passed to ``learn_one``; each epoch's charge is on ``ledger`` (and handed to
``on_charge``). What the caller does with the labels itself (a progressive validation
score computed from them, for instance) is the caller's computation on private data,
outside the guarantee; so is ``last_step.prediction`` (a function of the private
example, which the worker never publishes); and so are the class names when they are
read from the labels rather than declared (learners/labels.py).

Measured against River's own logistic regression on data River ships:
``.venv/bin/python bench/river_api.py`` (numbers in its docstring).

>>> from dpstream.schemas.features import CategoricalField, NumericField
>>> fields = [NumericField(name="amount", lower=0, upper=100),
...           CategoricalField(name="country", vocabulary=["fr", "us"])]
>>> model = DPFTRLClassifier(fields, epsilon=4.0, horizon=1000, key=bytes(range(32)))
>>> model.predict_one({"amount": 10.0, "country": "fr"}) is None       # no label seen yet
True
>>> model.learn_one({"amount": 80.0, "country": "us"}, "fraud")
>>> model.learn_one({"amount": 5.0, "country": "fr"}, "ok")
>>> model.predict_one({"amount": 10.0, "country": "fr"}) is None       # nothing released yet
True
>>> for _ in range(4):                                                  # the first release
...     model.learn_one({"amount": 80.0, "country": "us"}, "fraud")
...     model.learn_one({"amount": 5.0, "country": "fr"}, "ok")
>>> model.predict_one({"amount": 10.0, "country": "fr"}) in ("fraud", "ok")
True
>>> sorted(model.predict_proba_one({"amount": 10.0, "country": "fr"}))
['fraud', 'ok']
>>> model.clone().labels.classes, "key=<secret>" in repr(model)
((), True)
>>> model.ledger.totals().epsilon <= 4.0
True
"""
from __future__ import annotations

import copy
import inspect
import secrets

from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.randomness import KeyedRandomness, loading

from .continual_winnow import ContinualWinnow, continual_winnow_parameters
from .dp_ftrl import DPFTRL, dp_ftrl_parameters, featurised_row, row_dimension
from .features import Featuriser
from .labels import BinaryLabels, conventional

try:                                 # River is optional: its base class when it is there
    from river.base import Classifier as _Base
except ImportError:
    class _Base:
        """River's ``base.Estimator`` protocol for use without River (river/base/base.py:
        ``_get_params`` from the ``__init__`` signature, ``clone`` from those params)."""

        def _get_params(self) -> dict:
            params = {}
            for name, param in inspect.signature(self.__init__).parameters.items():
                if param.kind == param.VAR_KEYWORD:
                    params.update(getattr(self, name, {}))
                elif param.kind != param.VAR_POSITIONAL:
                    params[name] = getattr(self, name)
            return params

        def clone(self, new_params: dict | None = None):
            """A fresh, unfitted estimator with the same parameters (``new_params`` win)."""
            import copy
            params = {**self._get_params(), **(new_params or {})}
            return self.__class__(**{k: copy.deepcopy(v) for k, v in params.items()})

        @property
        def _multiclass(self) -> bool:
            return False


def _fields(features) -> list:
    """Field declarations from schema objects or plain dicts (as in a registration)."""
    from pydantic import TypeAdapter

    from dpstream.schemas.features import FeatureField
    adapter = TypeAdapter(FeatureField)
    return [f if hasattr(f, "sizes") else adapter.validate_python(f) for f in features]


def _rng(key: bytes | None) -> KeyedRandomness:
    return KeyedRandomness(key) if key is not None else KeyedRandomness.from_env()


def _records(X) -> tuple[list[dict], object]:
    """(records, the DataFrame's index or None) from a pandas DataFrame, a polars one or
    an iterable of dicts; a missing cell (NaN, None) is a missing value to the featuriser."""
    if hasattr(X, "to_dict") and hasattr(X, "columns") and hasattr(X, "index"):     # pandas
        return X.to_dict(orient="records"), X.index
    if hasattr(X, "to_dicts"):                                                     # polars
        return X.to_dicts(), None
    if isinstance(X, dict):
        raise ParameterError("X", "<one record>", "many records (a DataFrame or a list of dicts): "
                                                  "for one record use the _one verbs")
    if isinstance(X, (str, bytes)) or not hasattr(X, "__iter__"):
        raise ParameterError("X", "<rows>", "records as dicts of field values (or a DataFrame), as "
                                            "learn_one takes them")
    records = list(X)
    if not all(isinstance(r, dict) for r in records):
        raise ParameterError("X", "<rows>", "records as dicts of field values (or a DataFrame), as "
                                            "learn_one takes them")
    return records, None


def _labels_of(y) -> list:
    """Labels as a list, from a pandas Series, an array or any iterable but a string (whose
    characters would be taken as labels)."""
    if isinstance(y, (str, bytes, dict)) or not hasattr(y, "__iter__"):
        raise ParameterError("y", "<labels>", "the labels as a list, an array or a Series, one per record")
    return list(y.tolist() if hasattr(y, "tolist") else y)


def _known(settings, params: dict, given: tuple = ()) -> dict:
    """``params`` if ``settings`` (a parameters function) takes each of them; else
    ParameterError naming the unknown one and the closest known (before: a raw TypeError,
    "dp_ftrl_parameters() got an unexpected keyword argument")."""
    import difflib
    known = [n for n in inspect.signature(settings).parameters if n not in given]
    for name in params:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise ParameterError(name, "<given>", "a setting this learner has" + (
                f": did you mean {close[0]!r}?" if close else f" ({', '.join(known)})"))
    return params


def _noise_id(model_id: str | None) -> str:
    """The learner's noise stream name: ``model_id``, or a fresh random one (module
    docstring: two models must not share noise)."""
    return model_id if model_id is not None else f"library-{secrets.token_hex(16)}"


class PrivateClassifier(_Base):
    """A private online learner behind River's classifier verbs (module docstring).
    Subclasses keep their ``__init__`` arguments as attributes and call ``_start``."""

    binary: bool = False          # the learner takes active indices (Winnow family)

    def _start(self, learner, featuriser: Featuriser) -> None:
        self.learner, self.featuriser = learner, featuriser
        self.labels = BinaryLabels(self.classes)
        self.last_step = None

    def __getstate__(self) -> dict:
        """Pickled without the key (mechanisms/randomness.py ``KeyedRandomness.__reduce__``):
        a given ``key`` is left out too, and loading takes the key from the environment."""
        state = dict(self.__dict__)
        if state.get("key") is not None:
            state["key"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        """Inside ``loading_key(key)`` the loaded model gets its ``key`` parameter back, so
        that its ``clone()`` uses that key too (not the environment's)."""
        self.__dict__.update(state)
        given = loading()
        if "key" in state and state["key"] is None and given is not None:
            self.key = given._secret

    def __repr__(self) -> str:
        """River's layout (one parameter a line), the key never shown."""
        shown = {k: ("<secret>" if k == "key" and v is not None else repr(v))
                 for k, v in self._get_params().items()}
        return f"{type(self).__name__} (" + "".join(f"\n  {k}={v}" for k, v in shown.items()) + "\n)"

    @property
    def ledger(self):
        return self.learner.ledger

    def _row(self, x: dict):
        return self.featuriser.active(x) if self.binary else self.featuriser.dense(x)

    def learn_one(self, x: dict, y) -> None:
        """Learn one labelled record. ParameterError (before learning anything) for a
        label that is None, NaN, or a third class, and for a named label when a setting
        about the positive class is declared but ``classes`` is not (``_sided``)."""
        self._side_known([y])
        self.last_step = self.learner.learn_one(self._row(x), self.labels.sign(y))

    def _sided(self) -> str | None:
        """The name of a declared setting about "y = +1", if any (none here)."""
        return None

    def _side_known(self, ys) -> None:
        """Refuse to guess which class a declared setting about "y = +1" means. Before, a
        declared ``prior=0.05`` with labels "ok" / "fraud" applied to whichever came first
        ("ok"), and the model answered P(fraud) = 0.95 on a neutral record, silently."""
        name = self._sided()
        if not name or self.classes is not None:
            return
        seen = [*self.labels.classes, *ys]
        if not all(conventional(v) for v in seen) or {0, -1} <= set(seen):     # 0 and -1 both mean -1
            raise ParameterError("classes", None, f"(negative, positive) declared when {name!r} is: it is "
                                 "about the positive class, and with named labels (not bools, 1/0 or "
                                 "+1/-1) nothing else says which class that is")

    def predict_one(self, x: dict):
        """The released model's label in the user's labels; None while the model cannot
        name both classes or abstains (learners/labels.py)."""
        if not self.labels.complete:
            return None
        return self.labels.label(self.learner.predict_one(self._row(x)))

    def predict_proba_one(self, x: dict) -> dict:
        """{negative: 1 - p, positive: p} over the user's two classes, {} until both are
        known; p from ``_p_positive_many`` (module docstring)."""
        if not self.labels.complete:
            return {}
        return self.labels.proba(float(self._p_positive_many([self._row(x)])[0]))

    def learn_many(self, X, y) -> None:
        """``learn_one`` on each record of ``X`` with its label in ``y`` (same order and
        length), in one call into the learner: the same releases and state. ParameterError
        before learning anything (and before taking any class from the labels) for a
        length mismatch or a label ``learn_one`` would refuse."""
        records, _ = _records(X)
        ys = _labels_of(y)
        if len(ys) != len(records):
            raise ParameterError("y", f"{len(ys):,} labels", f"one label per record ({len(records):,})")
        self._side_known(ys)
        labels = copy.deepcopy(self.labels)            # classes taken only if all labels are usable
        signs = [labels.sign(v) for v in ys]
        rows = [self._row(r) for r in records]
        if not rows:
            return
        self.labels = labels       # from here on the learner learns under these signs
        self.last_step = self.learner.learn_many(rows, signs)[-1]

    def predict_many(self, X):
        """``predict_one`` on each record: a pandas Series on ``X``'s index for a pandas
        DataFrame (River's ``predict_many``), else a list."""
        records, index = _records(X)
        if not self.labels.complete or not records:
            out = [None] * len(records)
        else:
            out = [self.labels.label(None if s is None else int(s))
                   for s in self.learner.predict_many([self._row(r) for r in records])]
        return _series(out, index)

    def predict_proba_many(self, X):
        """``predict_proba_one`` on each record: a pandas DataFrame (one column per class,
        negative first) on ``X``'s index for a pandas DataFrame, else a list of dicts."""
        records, index = _records(X)
        if not self.labels.complete or not records:
            out = [{} for _ in records]
        else:
            out = [self.labels.proba(float(p)) for p in self._p_positive_many([self._row(r) for r in records])]
        if index is None:
            return out
        import pandas as pd
        return pd.DataFrame(out, index=index, columns=list(self.labels.classes) or None)

    def _p_positive_many(self, rows):
        raise NotImplementedError

    @property
    def _multiclass(self) -> bool:
        return False


class DPFTRLClassifier(PrivateClassifier):
    """DP-FTRL logistic regression (learners/dp_ftrl.py) on declared ``features``, at
    (``epsilon``, ``delta``) per example for epochs of ``horizon`` examples; other learner
    settings (``block``, ``eta``, ``loss``, ``mechanism``, ``clip``...) as
    ``dp_ftrl_parameters`` takes them. ``key``: the noise key (bytes), else
    $DPSTREAM_SECRET_KEY; ``model_id``: the noise stream (None: a fresh one per instance);
    ``classes``: the declared ``(negative, positive)`` labels, else read from the labels;
    ``on_charge``: receives each ledger entry; ``rows``: numeric fields as ``"values"``,
    ``"bins"`` or ``"both"`` (learners/dp_ftrl.py, Rows). ``predict_proba_one`` is the
    released model's sigmoid(<w, x>). A learner setting about "y = +1" (a declared prior,
    say) is about the positive class: True, 1, or ``classes[1]``; with named classes,
    declare ``classes`` so that it is known which one that is (learners/labels.py)."""

    def __init__(self, features, *, epsilon: float, delta: float = 1e-6, horizon: int,
                 key: bytes | None = None, model_id: str | None = None, classes: tuple | None = None,
                 on_charge=None, rows: str = "values", **params):
        self.features, self.epsilon, self.delta, self.horizon = features, epsilon, delta, horizon
        self.key, self.model_id, self.classes, self.on_charge = key, model_id, classes, on_charge
        self.rows, self.params = rows, params
        featuriser = Featuriser(_fields(features))
        p = dp_ftrl_parameters(epsilon=epsilon, delta=delta, d=row_dimension(featuriser, rows),
                               horizon=horizon, **_known(dp_ftrl_parameters, params,
                                                         ("epsilon", "delta", "d", "horizon")))
        self._start(DPFTRL(params=p, rng=_rng(key), model_id=_noise_id(model_id), on_charge=on_charge),
                    featuriser)

    def _row(self, x: dict):
        return featurised_row(self.featuriser, x, self.rows)

    def _p_positive_many(self, rows):
        return self.learner.predict_proba_many(rows)

    def _sided(self) -> str | None:
        return "prior" if self.params.get("prior") is not None else None

    @classmethod
    def _unit_test_params(cls):
        """River's checks (river/checks) run on its Phishing stream: its nine fields,
        River's bool classes, a fixed test key."""
        yield {"features": PHISHING_FIELDS, "epsilon": 4.0, "horizon": 1000, "key": bytes(range(32)),
               "classes": (False, True)}


class ContinualWinnowClassifier(PrivateClassifier):
    """Continual-release Winnow (learners/continual_winnow.py) on declared features (one
    active feature per field); parameters as for ``DPFTRLClassifier``, other learner
    settings (``eta``, ``margin``) as ``continual_winnow_parameters`` takes them.
    ``predict_proba_one`` puts all the mass on the model's label: Winnow releases a sign
    rule, not a probability (and never abstains)."""

    binary = True

    def __init__(self, features, *, epsilon: float, delta: float = 1e-6, horizon: int = 1_000_000,
                 block: int = 100, key: bytes | None = None, model_id: str | None = None,
                 classes: tuple | None = None, on_charge=None, **params):
        self.features, self.epsilon, self.delta, self.horizon = features, epsilon, delta, horizon
        self.block, self.key, self.model_id, self.classes = block, key, model_id, classes
        self.on_charge, self.params = on_charge, params
        featuriser = Featuriser(_fields(features))
        p = continual_winnow_parameters(epsilon=epsilon, delta=delta, d=featuriser.binary_dimension,
                                        max_active=featuriser.active_count,
                                        horizon=-(-horizon // block) * block, block=block,
                                        **_known(continual_winnow_parameters, params,
                                                 ("epsilon", "delta", "d", "max_active", "horizon", "block")))
        self._start(ContinualWinnow(params=p, rng=_rng(key), model_id=_noise_id(model_id),
                                    on_charge=on_charge), featuriser)

    def _p_positive_many(self, rows):
        return [float(s == 1) for s in self.learner.predict_many(rows)]      # Winnow never abstains

    @classmethod
    def _unit_test_params(cls):
        """As ``DPFTRLClassifier._unit_test_params``."""
        yield {"features": PHISHING_FIELDS, "epsilon": 4.0, "horizon": 1000, "key": bytes(range(32)),
               "classes": (False, True)}


def _series(values: list, index):
    """``values`` as a pandas Series on ``index`` (a DataFrame's), or the list itself."""
    if index is None:
        return values
    import pandas as pd
    return pd.Series(values, index=index, dtype=object)


# River's Phishing stream (river/datasets/phishing.py): seven scores in {0, 0.5, 1} and two
# 0/1 flags; the declaration River's checks run the classifiers with (``_unit_test_params``).
PHISHING_FIELDS = tuple(
    {"type": "numeric", "name": name, "lower": 0.0, "upper": 1.0, "bins": 3}
    for name in ("empty_server_form_handler", "popup_window", "https", "request_from_other_domain",
                 "anchor_from_other_domain", "is_popular", "long_url", "age_of_domain", "ip_in_url"))
