"""An sklearn-style DP decision-list classifier (fit / predict / score / get_params),
without depending on scikit-learn: DP-GreedyCover (seed 000 Algorithm 3.1) behind the
estimator interface.

What the epsilon covers: one call of ``fit`` is (epsilon, delta)-DP with respect to
replacing one row of that call's (X, y) (``fitted.ledger_`` records that one charge).
Fits on overlapping data compose: k fits of the same rows cost k times the budget (basic
composition), as in any DP library; cross-validation's refits are such fits.

Noise: each fit draws from its own keyed stream, named by a fresh 128-bit nonce from the
OS CSPRNG (``fit_nonce_``), so two fits never share noise: not two fits with the same
key, not ``clone()``s in cross-validation, and never a streaming model (whose ids cannot
contain ':'). The nonce only names the stream; the noise itself is keyed
(mechanisms/randomness.py), so ``fit(X, y, nonce=fitted.fit_nonce_)`` with the same key reproduces a fit
bit for bit for an audit. Reusing a nonce on other data reuses noise: do it only to
reproduce.

>>> import numpy as np
>>> X = np.array([[1, 0], [0, 1], [1, 1], [0, 0]] * 50)
>>> y = X[:, 0].astype(int)
>>> clf = DPDecisionListClassifier(epsilon=4.0, delta=1e-6, key=bytes(range(32))).fit(X, y)
>>> clf.score(X, y) >= 0.5
True
"""
from __future__ import annotations

import inspect
import os

import numpy as np

from dpstream.mechanisms.accounting import Ledger
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.params import (GreedyCoverRound, greedy_cover_advanced_round_epsilon,
                                        greedy_cover_basic_round_epsilon, greedy_cover_person_round,
                                        greedy_cover_round_epsilon)
from dpstream.mechanisms.randomness import KeyedRandomness

from .decision_list import DecisionList, FeatureFamily, check_labels, check_rows
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


def round_plan(accounting: str, epsilon: float, delta: float, n_features: int,
               max_contributions: int = 1) -> GreedyCoverRound:
    """How the rounds run for the privacy unit: one example (``round_epsilon``, score
    sensitivity 1), or a person with k = ``max_contributions`` rows of the window
    (``mechanisms.params.greedy_cover_person_round``); rounds <= |F| + 1."""
    if max_contributions == 1:
        return GreedyCoverRound(round_epsilon(accounting, epsilon, delta, n_features), 1, accounting, epsilon)
    return greedy_cover_person_round(accounting, epsilon, delta, n_features + 1, max_contributions)


def private_fit(family: FeatureFamily, X: np.ndarray, y: np.ndarray, *, epsilon: float,
                delta: float, accounting: str, stream, on_charge=None,
                max_contributions: int = 1) -> tuple[DecisionList, Ledger]:
    """One DP-GreedyCover run (seed 000 Algorithm 3.1) on rows X (bool) and labels y (0/1),
    charged first: a fresh ledger pays (epsilon, delta) for the whole run (per example, or
    per person with at most ``max_contributions`` rows), then the run uses the rounds the
    chosen analysis gives (``round_plan``). ``on_charge`` receives the ledger entry before
    any rule is chosen."""
    ledger = Ledger.create(epsilon=epsilon, delta=delta, rule="basic")
    if on_charge is not None:
        ledger.on_entry.append(on_charge)
    plan = round_plan(accounting, epsilon, delta, len(family), max_contributions)
    ledger.charge(f"dp_greedy_cover[{accounting}]", epsilon, delta)
    return dp_greedy_cover(family, X, y, epsilon_round=plan.epsilon, stream=stream,
                           sensitivity=plan.sensitivity), ledger


class DPDecisionListClassifier:
    """DP-GreedyCover (seed 000 Algorithm 3.1, privacy by its Theorem 7) behind sklearn's fit /
    predict / score."""
    def __init__(self, *, epsilon: float = 1.0, delta: float = 1e-6, max_conjunction: int = 1,
                 negations: bool = True, accounting: str = "set_cover", key: bytes | None = None):
        self.epsilon, self.delta = epsilon, delta
        self.max_conjunction, self.negations = max_conjunction, negations
        self.accounting, self.key = accounting, key

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

    def fit(self, X, y, *, nonce: bytes | None = None) -> "DPDecisionListClassifier":
        """Fit on (X, y); ``nonce`` only to reproduce an earlier fit (see the module doc)."""
        if nonce is None:
            nonce = os.urandom(16)
        if not isinstance(nonce, bytes) or len(nonce) != 16:
            raise ParameterError("nonce", "<bytes>", "16 bytes (a fitted estimator's fit_nonce_)")
        X = np.asarray(X)
        family = FeatureFamily(X.shape[1], self.max_conjunction, self.negations)
        X = check_rows(X, family.d)
        y = check_labels(y, X.shape[0])
        rng = KeyedRandomness(self.key) if self.key is not None else KeyedRandomness.from_env()
        self.epsilon_round_ = round_epsilon(self.accounting, self.epsilon, self.delta, len(family))
        self.fit_nonce_ = nonce
        stream = rng.stream("estimator:" + nonce.hex(), "dp_greedy_cover", 0)
        self.list_, self.ledger_ = private_fit(family, X, y, epsilon=self.epsilon, delta=self.delta,
                                               accounting=self.accounting, stream=stream)
        return self

    def predict(self, X) -> np.ndarray:
        return self.list_.predict(X)

    def score(self, X, y) -> float:
        return float((self.predict(X) == np.asarray(y)).mean())
