"""Winnow (Littlestone 1988) and ConfidentWinnow (seed 000 Algorithm 4.1).

Both keep normalised multiplicative weights w (w^(0) = (1/d, ..., 1/d)) and update
w_j <- w_j exp(eta y x_j) / Z on (x, y). Winnow updates on mistakes; ConfidentWinnow
also when the prediction is correct but unconfident (-c rho < <w,x> < c rho) and the
adversary's update bit b is 1. Lemma 9: on data with a rho-margin nonnegative target
(||v||_1 = 1) and c < 1/2, ConfidentWinnow makes at most ln d / ((1-c) eta rho -
eta^2/2) updates, whatever the bits (``mechanisms.params.winnow_update_bound``).

Weights are kept as integer scores u (w proportional to exp(eta u)): an update adds
y z to u, so the state is exact integers and replays bit for bit. The projected
weights p (see :mod:`learners.inputs`) make predictions O(active) on sparse inputs;
updates cost O(d) and happen at most the update bound many times.

>>> from dpstream.learners.inputs import BinaryInput
>>> learner = Winnow(d=4, eta=0.5)
>>> learner.learn_one(BinaryInput.from_active([0], 4), +1)   # predicts -1, updates
-1
>>> learner.state.updates
1
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

from dpstream.mechanisms.errors import ParameterError

from .inputs import BinaryInput, embed, project, sign


def encode_array(a: np.ndarray) -> str:
    """An int64 array as base64 text (table records cannot hold numpy arrays)."""
    return base64.b64encode(np.ascontiguousarray(a, dtype="<i8").tobytes()).decode()


def decode_array(s: str) -> np.ndarray:
    """The inverse of ``encode_array``."""
    return np.frombuffer(base64.b64decode(s), dtype="<i8").astype(np.int64)


def softmax_weights(u: np.ndarray, eta: float) -> np.ndarray:
    """Winnow's normalised weights w_j proportional to exp(eta u_j) (seed 000 Algorithm 4.1),
    overflow-free."""
    z = eta * (u - u.max())
    w = np.exp(z)
    return w / w.sum()


@dataclass
class WinnowState:
    """Winnow / ConfidentWinnow state as a plain record (seed 000 Algorithm 4.1)."""
    d: int
    eta: float
    signed: bool = False
    c: float = 0.0
    rho: float = 0.0
    u: np.ndarray | None = None          # integer scores, length d (2d when signed)
    rounds: int = 0
    mistakes: int = 0
    updates: int = 0

    def to_record(self) -> dict:
        r = dict(vars(self))
        r["u"] = encode_array(self.u)
        return r

    @classmethod
    def from_record(cls, r: dict) -> "WinnowState":
        r = dict(r)
        r["u"] = decode_array(r["u"])
        return cls(**r)


class ConfidentWinnow:
    """Seed 000 Algorithm 4.1. ``update_bit`` is the adversary's b^(t) (default 1)."""

    def __init__(self, *, d: int, eta: float, c: float = 0.0, rho: float = 0.0,
                 signed: bool = False, state: WinnowState | None = None):
        if d < 1:
            raise ParameterError("d", d, ">= 1")
        if not eta > 0:
            raise ParameterError("eta", eta, "> 0")
        if not 0 <= c < 0.5:
            raise ParameterError("c", c, "in [0, 1/2) (Lemma 9)")
        if not 0 <= rho <= 1:
            raise ParameterError("rho", rho, "in [0, 1]")
        dim = 2 * d if signed else d
        self.state = state or WinnowState(d, eta, signed, c, rho, np.zeros(dim, dtype=np.int64))
        self._refresh()

    def _refresh(self) -> None:
        s = self.state
        self._p = project(softmax_weights(s.u, s.eta), s.signed)
        self._p_total = float(self._p.sum())

    def _check(self, x: BinaryInput) -> None:
        if x.d != self.state.d:
            raise ParameterError("x.d", x.d, f"the model dimension {self.state.d}")

    def margin(self, x: BinaryInput) -> float:
        """<w, z> for the current weights."""
        self._check(x)
        return x.inner(self._p, self._p_total)

    def predict_one(self, x: BinaryInput) -> int:
        return sign(self.margin(x))

    def learn_one(self, x: BinaryInput, y: int, update_bit: int = 1) -> int:
        """Predict, then update per Algorithm 4.1; returns the prediction."""
        if y not in (-1, 1):
            raise ParameterError("y", y, "-1 or +1")
        s = self.state
        m = self.margin(x)
        yhat = sign(m)
        s.rounds += 1
        wrong = yhat != y
        s.mistakes += int(wrong)
        unconfident = -s.c * s.rho < m < s.c * s.rho
        if wrong or (unconfident and update_bit == 1):
            s.u = s.u + y * embed(x, s.signed)
            s.updates += 1
            self._refresh()
        return yhat


class Winnow(ConfidentWinnow):
    """Classic Winnow in the normalised form: ConfidentWinnow with c = 0 (update on
    mistakes only)."""

    def __init__(self, *, d: int, eta: float, signed: bool = False, state: WinnowState | None = None):
        super().__init__(d=d, eta=eta, c=0.0, rho=0.0, signed=signed, state=state)
