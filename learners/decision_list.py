"""Decision lists over feature families (seed 000 Sec. 2 and 3).

Inputs are boolean rows x in {0,1}^d, labels sigma in {0,1} (the seed's PAC
convention). A feature is a conjunction of up to k literals (x_i or not x_i);
k = 1 gives literals and their negations (Rivest's 1-decision lists). The constant
true feature T is appended by the learners, not listed in the family.

Feature matrices for large n are bit-packed row-major (``numpy.packbits`` along the
features), so n = 10^6 rows by |F| = 2,000 features take 250 MB instead of 2 GB.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from dpstream.mechanisms.errors import ParameterError

TRUE = -1   # feature index of the constant-true rule in a DecisionList


@dataclass(frozen=True)
class FeatureFamily:
    """Rivest's k-decision-list features (seed 000 Sec. 2): literals, their negations and
    conjunctions of up to ``max_conjunction`` of them."""
    d: int
    max_conjunction: int = 1
    negations: bool = True
    terms: tuple = field(init=False, repr=False)   # each: tuple of (variable, positive)

    def __post_init__(self):
        if self.d < 1:
            raise ParameterError("d", self.d, ">= 1")
        if not 1 <= self.max_conjunction <= 3:
            raise ParameterError("max_conjunction", self.max_conjunction, "1, 2 or 3")
        lits = [(i, True) for i in range(self.d)]
        if self.negations:
            lits += [(i, False) for i in range(self.d)]
        terms = []
        for size in range(1, self.max_conjunction + 1):
            for combo in itertools.combinations(lits, size):
                if len({v for v, _ in combo}) == size:
                    terms.append(combo)
        object.__setattr__(self, "terms", tuple(terms))

    def __len__(self) -> int:
        return len(self.terms)

    def name(self, f: int) -> str:
        if f == TRUE:
            return "true"
        return " and ".join(f"x{v}" if pos else f"not x{v}" for v, pos in self.terms[f])

    def evaluate(self, X: np.ndarray) -> np.ndarray:
        """Boolean (n, |F|) matrix of feature values."""
        X = check_rows(X, self.d)
        lit = np.concatenate([X, ~X], axis=1) if self.negations else X
        if self.max_conjunction == 1:
            return lit
        col = {lt: j for j, lt in enumerate([(i, True) for i in range(self.d)]
                                            + ([(i, False) for i in range(self.d)]
                                               if self.negations else []))}
        out = np.empty((X.shape[0], len(self.terms)), dtype=bool)
        for f, term in enumerate(self.terms):
            out[:, f] = np.logical_and.reduce([lit[:, col[t]] for t in term])
        return out

    def evaluate_packed(self, X: np.ndarray, chunk: int = 65_536) -> np.ndarray:
        """Row-major bit-packed feature matrix, uint8 (n, ceil(|F| / 8))."""
        n = X.shape[0]
        out = np.empty((n, (len(self) + 7) // 8), dtype=np.uint8)
        for a in range(0, n, chunk):
            out[a:a + chunk] = np.packbits(self.evaluate(X[a:a + chunk]), axis=1)
        return out


def check_rows(X, d: int) -> np.ndarray:
    """Boolean rows of width d (ParameterError naming the shape otherwise)."""
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != d:
        raise ParameterError("X", f"shape {X.shape}", f"(n, {d})")
    if X.dtype != bool:
        if not np.isin(X, (0, 1)).all():
            raise ParameterError("X", "<features>", "entries in {0, 1}")
        X = X.astype(bool)
    return X


def check_labels(y, n: int) -> np.ndarray:
    """n labels in {0, 1}, as int8 (ParameterError otherwise)."""
    y = np.asarray(y)
    if y.shape != (n,) or not np.isin(y, (0, 1)).all():
        raise ParameterError("y", f"shape {y.shape}", f"({n},) with entries in {{0, 1}}")
    return y.astype(np.int8)


@dataclass(frozen=True)
class DecisionList:
    """Rules (feature index, bit) in order; TRUE is the constant-true feature."""
    family: FeatureFamily
    rules: tuple
    default: int = 0

    def predict(self, X: np.ndarray) -> np.ndarray:
        F = self.family.evaluate(X)
        return self.predict_features(F)

    def predict_features(self, F: np.ndarray) -> np.ndarray:
        n = F.shape[0]
        out = np.full(n, self.default, dtype=np.int8)
        open_ = np.ones(n, dtype=bool)
        for f, b in self.rules:
            hit = open_ if f == TRUE else open_ & F[:, f]
            out[hit] = b
            open_ &= ~hit
            if f == TRUE or not open_.any():
                break
        return out

    def describe(self) -> list[str]:
        return [f"if {self.family.name(f)} then {b}" for f, b in self.rules] + [f"else {self.default}"]

    def to_record(self) -> dict:
        return {"d": self.family.d, "max_conjunction": self.family.max_conjunction,
                "negations": self.family.negations, "rules": [list(r) for r in self.rules],
                "default": self.default}
