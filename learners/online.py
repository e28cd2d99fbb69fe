"""River-compatible private classifiers over raw feature dicts.

``learn_one(x: dict, y)`` and ``predict_one(x: dict)`` on records as users have them,
with the declared featuriser (learners/features.py) inside, so River's
``evaluate.progressive_val_score`` and pipelines run them. With River installed the
classes are ``river.base.Classifier``s (River's metrics check that); without it they
are plain classes with the same verbs.

What the guarantee covers here: only what the learner releases, i.e. its model after
each block, and so every prediction made from it (post-processing), against the
examples passed to ``learn_one``; each epoch's charge is on ``ledger`` (and handed to
``on_charge``). What the caller does with the labels itself (a progressive validation
score computed from them, for instance) is the caller's computation on private data,
outside the guarantee; so is ``last_step.prediction`` (a function of the private
example, which the worker never publishes).

>>> from dpstream.schemas.features import CategoricalField, NumericField
>>> model = DPFTRLClassifier([NumericField(name="amount", lower=0, upper=100),
...                           CategoricalField(name="country", vocabulary=["fr", "us"])],
...                          epsilon=4.0, horizon=1000, key=bytes(32))
>>> model.learn_one({"amount": 80.0, "country": "us"}, True)
>>> model.predict_one({"amount": 10.0, "country": "fr"}) in (True, False)
True
>>> model.ledger.totals().epsilon <= 4.0
True
"""
from __future__ import annotations

from dpstream.mechanisms.randomness import KeyedRandomness

from .continual_winnow import ContinualWinnow, continual_winnow_parameters
from .dp_ftrl import DPFTRL, dp_ftrl_parameters
from .features import Featuriser

try:                                 # River is optional: its base class when it is there
    from river.base import Classifier as _Base
except ImportError:                  # pragma: no cover - exercised without river installed
    _Base = object


def _fields(features) -> list:
    """Field declarations from schema objects or plain dicts (as in a registration)."""
    from pydantic import TypeAdapter

    from dpstream.schemas.features import FeatureField
    adapter = TypeAdapter(FeatureField)
    return [f if hasattr(f, "sizes") else adapter.validate_python(f) for f in features]


class PrivateClassifier(_Base):
    """A private online learner behind River's classifier verbs (module docstring).
    ``binary``: whether the learner takes active indices (Winnow family) or dense rows."""

    def __init__(self, learner, featuriser: Featuriser, binary: bool):
        self.learner, self.featuriser, self.binary = learner, featuriser, binary
        self.labels: tuple = (True, False)          # (positive, negative), as first seen
        self._seen_labels = False
        self.last_step = None

    @property
    def ledger(self):
        return self.learner.ledger

    def _row(self, x: dict):
        return self.featuriser.active(x) if self.binary else self.featuriser.dense(x)

    def _sign(self, y) -> int:
        """+1 for a positive label (True, 1, +1, "yes"...), -1 for a negative one (False,
        0, -1, None, ""); the first labels seen are the ones ``predict_one`` returns."""
        positive = bool(y) and y != -1
        if not self._seen_labels and not isinstance(y, bool):
            if isinstance(y, (int, float)) and y in (0, 1, -1):
                self.labels = (1, -1 if y == -1 else 0)
                self._seen_labels = True
        return 1 if positive else -1

    def learn_one(self, x: dict, y) -> None:
        self.last_step = self.learner.learn_one(self._row(x), self._sign(y))

    def predict_one(self, x: dict):
        return self.labels[0] if self.learner.predict_one(self._row(x)) == 1 else self.labels[1]

    def predict_proba_one(self, x: dict) -> dict:
        """The released model's label with probability 1 (it releases labels, not scores)."""
        label = self.predict_one(x)
        other = self.labels[1] if label == self.labels[0] else self.labels[0]
        return {label: 1.0, other: 0.0}

    @property
    def _multiclass(self) -> bool:
        return False


def _rng(key: bytes | None) -> KeyedRandomness:
    return KeyedRandomness(key) if key is not None else KeyedRandomness.from_env()


class DPFTRLClassifier(PrivateClassifier):
    """DP-FTRL logistic regression (learners/dp_ftrl.py) on declared features; other
    settings as ``dp_ftrl_parameters`` takes them. ``key``: the noise key (bytes), else
    $DPSTREAM_SECRET_KEY."""

    def __init__(self, features, *, epsilon: float, delta: float = 1e-6, horizon: int,
                 key: bytes | None = None, model_id: str = "library", on_charge=None, **params):
        featuriser = Featuriser(_fields(features))
        p = dp_ftrl_parameters(epsilon=epsilon, delta=delta, d=featuriser.real_dimension,
                               horizon=horizon, **params)
        super().__init__(DPFTRL(params=p, rng=_rng(key), model_id=model_id, on_charge=on_charge),
                         featuriser, binary=False)


class ContinualWinnowClassifier(PrivateClassifier):
    """Continual-release Winnow (learners/continual_winnow.py) on declared features (one
    active feature per field)."""

    def __init__(self, features, *, epsilon: float, delta: float = 1e-6, horizon: int = 1_000_000,
                 block: int = 100, key: bytes | None = None, model_id: str = "library",
                 on_charge=None, **params):
        featuriser = Featuriser(_fields(features))
        p = continual_winnow_parameters(epsilon=epsilon, delta=delta, d=featuriser.binary_dimension,
                                        max_active=featuriser.active_count,
                                        horizon=-(-horizon // block) * block, block=block, **params)
        super().__init__(ContinualWinnow(params=p, rng=_rng(key), model_id=model_id, on_charge=on_charge),
                         featuriser, binary=True)
