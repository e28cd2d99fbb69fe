"""An sklearn-style DP decision-list classifier (fit / predict / score / get_params),
without depending on scikit-learn.

>>> import numpy as np
>>> X = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 50)
>>> y = X[:, 0].astype(int)
>>> clf = DPDecisionListClassifier(epsilon=4.0, delta=1e-6, key=b"doc-key-0123456789").fit(X, y)
>>> clf.score(X, y) >= 0.5
True
"""
from __future__ import annotations

import inspect

import numpy as np

from mechanisms.accounting import Ledger
from mechanisms.errors import ParameterError
from mechanisms.params import (greedy_cover_advanced_round_epsilon, greedy_cover_basic_round_epsilon,
                               greedy_cover_round_epsilon)
from mechanisms.randomness import KeyedRandomness

from .decision_list import FeatureFamily, check_labels, check_rows
from .greedy_cover import dp_greedy_cover

ACCOUNTING = ("set_cover", "advanced", "basic")


def round_epsilon(accounting: str, epsilon: float, delta: float, n_features: int) -> float:
    """Per-round epsilon under the chosen analysis; rounds <= |F| + 1."""
    rounds = n_features + 1
    if accounting == "set_cover":
        return greedy_cover_round_epsilon(epsilon, delta)
    if accounting == "advanced":
        return greedy_cover_advanced_round_epsilon(epsilon, delta, rounds)
    if accounting == "basic":
        return greedy_cover_basic_round_epsilon(epsilon, rounds)
    raise ParameterError("accounting", accounting, f"one of {ACCOUNTING}")


class DPDecisionListClassifier:
    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-6, max_conjunction: int = 1,
                 negations: bool = True, accounting: str = "set_cover", key: bytes | None = None,
                 model_id: str = "decision-list", fit_round: int = 0):
        self.epsilon, self.delta = epsilon, delta
        self.max_conjunction, self.negations = max_conjunction, negations
        self.accounting, self.key, self.model_id, self.fit_round = accounting, key, model_id, fit_round

    def get_params(self, deep: bool = True) -> dict:
        names = [p for p in inspect.signature(type(self).__init__).parameters if p != "self"]
        return {n: getattr(self, n) for n in names}

    def set_params(self, **params) -> "DPDecisionListClassifier":
        valid = self.get_params()
        for k, v in params.items():
            if k not in valid:
                raise ParameterError(k, v, f"one of {sorted(valid)}")
            setattr(self, k, v)
        return self

    def fit(self, X, y) -> "DPDecisionListClassifier":
        X = np.asarray(X)
        family = FeatureFamily(X.shape[1], self.max_conjunction, self.negations)
        X = check_rows(X, family.d)
        y = check_labels(y, X.shape[0])
        rng = KeyedRandomness(self.key) if self.key is not None else KeyedRandomness.from_env()
        self.epsilon_round_ = round_epsilon(self.accounting, self.epsilon, self.delta, len(family))
        self.ledger_ = Ledger.create(epsilon=self.epsilon, delta=self.delta, rule="basic")
        self.ledger_.charge(f"dp_greedy_cover[{self.accounting}]", self.epsilon, self.delta)
        stream = rng.stream(self.model_id, "dp_greedy_cover", self.fit_round)
        self.list_ = dp_greedy_cover(family, X, y, epsilon_round=self.epsilon_round_, stream=stream)
        return self

    def predict(self, X) -> np.ndarray:
        return self.list_.predict(X)

    def score(self, X, y) -> float:
        return float((self.predict(X) == np.asarray(y)).mean())
