"""DP-FTRL online logistic regression (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021,
"Practical and Private (Deep) Learning without Sampling or Shuffling", Algorithm 1 with
the linearised loss), with matrix-factorization noise (mechanisms/factorization.py):
dpstream's dense online learner. Not a seed algorithm.

Learner. Rows are dense x in R^d with entries in [-1, 1] (declared features give such
rows; other entries are clamped), extended by a bias feature 1 and scaled to unit norm
(a function of the row alone). Per example the gradient of the logistic loss
log(1 + exp(-y <w, x>)) (or the hinge loss max(0, 1 - y <w, x>)) at the *released* model
w is clipped to norm ``clip`` and added to the block's sum. When a block of ``block`` examples closes, the prefix sum of all block sums
so far is released through the factorization's mechanism, and the model becomes
w = -eta * (released prefix): FTRL with the l2 regulariser ||w||^2 / (2 eta) on
linearised losses. Every prediction and gradient reads only the released w.

Privacy (replace-one, single participation, per epoch): an example enters one block's
sum with one clipped gradient of norm <= clip; replacing it moves that block by at most
2 clip, plus the rounding below: sens = 2 clip + sqrt(d + 1) 2^-30 (each of the two
gradients is rounded by at most 2^-31 per coordinate). The factorization's
release is then rho-zCDP with rho = sens^2 ||C e_1||^2 / (2 sigma^2)
(mechanisms/factorization.py, adaptive increments included), and sigma is calibrated so
that rho meets the epoch's (epsilon, delta) (``dp_ftrl_parameters``). An epoch is
``horizon`` examples; the next starts from the released prefix (public) on fresh
examples, so the per-example guarantee is one epoch's (epsilon, delta), forever, as for
continual Winnow (mechanisms/continual.py, "Epochs on disjoint examples").

Exact arithmetic where outputs must not depend on batching: gradients are rounded to
multiples of 2^-30 and summed as int64 (exact, in any order), and inner products are
row sums of elementwise products (numpy's pairwise sum per row, the same alone or in a
batch). So a batch gives the state and outputs of one example at a time, bit for bit,
and replay reproduces every release.

Rules: ``clip`` = 1/4 (unit rows' logistic gradients are mostly far below 1 once the
model learns, so a smaller bound buys a 4x smaller noise for the few it cuts), and
``eta`` and ``block`` follow from the noise and the stream (``default_eta``,
``default_block``). ``bench/dp_ftrl.py --grid`` sets them against the best of a grid
(clip 1, 1/2, 1/4, 1/10; eta x clip 0.03 to 1; block 10, 50) on six real sets at
epsilon 1 and 4: the rules' cumulative error was within 0 to 3.2 points of the grid's
best cell (itself the best of 32 noisy runs), e.g. 12.7% against 12.5% (phishing) and
19.7% against 20.1% (digits) at epsilon 4.

>>> from dpstream.mechanisms.randomness import KeyedRandomness
>>> params = dp_ftrl_parameters(epsilon=4.0, delta=1e-6, d=3, horizon=1000, block=10)
>>> model = DPFTRL(params=params, rng=KeyedRandomness(bytes(32)), model_id="doc")
>>> model.learn_one([0.5, -1.0, 0.2], +1).prediction in (-1, 1)
True
>>> model.ledger.totals().epsilon <= 4.0
True
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from dpstream.mechanisms.accounting import Ledger, LedgerState, zcdp_epsilon, zcdp_rho
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.factorization import (BLT, TREE, BLTNoise, BLTParams, TreeNoiseF,
                                               factorization, optimal_blt)
from dpstream.mechanisms.randomness import KeyedRandomness

from .protocol import BlockReleases, Step

PURPOSE = "dp_ftrl/noise"
SCALE = float(1 << 30)             # gradients are summed as integers in units of 2^-30
LOSSES = ("logistic", "hinge")


def mechanism_name(mechanism: str) -> str:
    return f"dp_ftrl[{mechanism}, gaussian]"


@dataclass(frozen=True)
class DPFTRLParameters:
    """DP-FTRL's settings and calibrated noise (``dp_ftrl_parameters``)."""
    d: int                     # features; the bias is feature d
    block: int                 # examples per release
    horizon: int               # examples per epoch (a multiple of block)
    eta: float                 # w = -eta * released prefix of gradient sums
    loss: str
    mechanism: str             # "blt" or "tree"
    sigma: float               # Gaussian noise std per coordinate and step
    sensitivity: float         # replace-one l2 sensitivity of a block sum
    strategy_norm2: float      # max_j ||C e_j||^2 of the factorization
    rho: float
    epsilon: float             # per-example guarantee (one epoch), at delta
    delta: float
    blt: tuple | None = None   # (theta, omega) of the BLT
    clip: float = 0.25         # l2 bound on one example's gradient

    @property
    def blocks(self) -> int:
        return self.horizon // self.block


CLIP = 0.25


def default_block(horizon: int) -> int:
    """Examples per release: a hundredth of the epoch, at least 10 and at most 50 (fresher
    models against fewer, larger releases; module docstring, Rules)."""
    return min(50, max(10, horizon // 100))


def default_eta(sigma: float, strategy_norm2: float) -> float:
    """The learning rate: the l2 regulariser 1 / eta sized to the noise of a released
    prefix (per coordinate about sigma ||C e_1||, as ||B_t|| and ||C e_1|| grow alike), so
    that the noise alone moves a margin <w, x> of a unit row by about 1; at most 1
    (module docstring, Rules)."""
    return 1.0 / max(1.0, sigma * math.sqrt(strategy_norm2))


def dp_ftrl_parameters(*, epsilon: float, delta: float, d: int, horizon: int, block: int | None = None,
                       eta: float | None = None, loss: str = "logistic", mechanism: str = BLT,
                       clip: float = CLIP) -> DPFTRLParameters:
    """Parameters that spend (epsilon, delta) per example (one epoch): rho from dp-accounting
    (``zcdp_rho``), sigma = sens ||C e_1|| / sqrt(2 rho). ``horizon`` (examples per epoch)
    is rounded up to a multiple of the block."""
    if d < 1:
        raise ParameterError("d", d, ">= 1")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    if horizon < 1:
        raise ParameterError("horizon", horizon, ">= 1")
    block = default_block(horizon) if block is None else block
    if block < 1:
        raise ParameterError("block", block, ">= 1")
    horizon = -(-horizon // block) * block
    if loss not in LOSSES:
        raise ParameterError("loss", loss, f"one of {LOSSES}")
    if not (clip > 0 and math.isfinite(clip)):
        raise ParameterError("clip", clip, "a finite number > 0")
    n = horizon // block
    fac = factorization(mechanism, n)
    norm2 = fac.sensitivity_squared(n)
    if not math.isfinite(norm2):
        raise ParameterError("mechanism", mechanism, "a factorization with finite sensitivity")
    sens = 2.0 * clip + math.sqrt(d + 1) / SCALE
    rho = zcdp_rho(epsilon, delta)
    sigma = sens * math.sqrt(norm2) / math.sqrt(2 * rho)
    eta = default_eta(sigma, norm2) if eta is None else eta
    if not (eta > 0 and math.isfinite(eta)):
        raise ParameterError("eta", eta, "a finite number > 0")
    blt = (fac.params.theta, fac.params.omega) if mechanism == BLT else None
    spent = zcdp_epsilon(sens * sens * norm2 / (2 * sigma * sigma), delta)
    return DPFTRLParameters(d, block, horizon, float(eta), loss, mechanism, sigma, sens, norm2,
                            rho, spent, delta, blt, float(clip))


@dataclass
class DPFTRLState:
    """Counters and the block's integer gradient sum (every event); the epoch's true prefix
    sum, the noise state and the ledger (on block closes)."""
    epoch: int = 0
    t: int = 0                          # examples this epoch
    b: int = 0                          # blocks closed this epoch
    inc: np.ndarray | None = None       # this block's gradient sum, int64 in units of 2^-30
    prefix: np.ndarray | None = None    # the epoch's true prefix sum (int64, same units)
    noise: tuple | None = None          # the factorization's noise state after block b (BLT)
    offset: np.ndarray | None = None    # released prefix at the end of earlier epochs (float)
    ledger: LedgerState | None = None
    mistakes: int = 0                   # private: in-process evaluation only


class DPFTRL(BlockReleases):
    """DP-FTRL over explicit state; every decision reads only the released model."""

    def __init__(self, *, params: DPFTRLParameters, rng: KeyedRandomness, model_id: str,
                 state: DPFTRLState | None = None, on_charge=None):
        self.params, self.rng, self.model_id, self.on_charge = params, rng, model_id, on_charge
        self.dim = params.d + 1
        s = self.state = state or DPFTRLState()
        for name in ("inc", "prefix"):
            if getattr(s, name) is None:
                setattr(s, name, np.zeros(self.dim, dtype=np.int64))
        if s.offset is None:
            s.offset = np.zeros(self.dim)
        if s.ledger is None:
            self._charge_epoch()
        self.ledger = Ledger(s.ledger, on_entry=[on_charge] if on_charge else [])
        self._noise = self._noise_for(s.epoch)
        self._refresh()

    # ------------------------------------------------------------ privacy
    def _charge_epoch(self) -> None:
        """A fresh epoch ledger, charged the epoch's (epsilon, delta) up front (the whole
        factorization release is one mechanism), rho stated for zCDP composition."""
        p = self.params
        ledger = Ledger.create(epsilon=p.epsilon, delta=p.delta, rule="basic")
        if self.on_charge:
            ledger.on_entry.append(self.on_charge)
        ledger.charge(mechanism_name(p.mechanism), p.epsilon, p.delta)
        self.state.ledger = ledger.state
        self.ledger = ledger

    def _noise_for(self, epoch: int):
        p = self.params
        if p.mechanism == TREE:
            return TreeNoiseF(self.rng, self.model_id, PURPOSE, epoch, p.sigma, self.dim)
        return BLTNoise(self.rng, self.model_id, PURPOSE, epoch, p.sigma, self.dim,
                        BLTParams(*p.blt))

    # ------------------------------------------------------------ the released model
    def _refresh(self, noise_total: np.ndarray | None = None) -> None:
        """w = -eta (offset + released prefix of this epoch)."""
        s, p = self.state, self.params
        if s.b == 0:
            released = np.zeros(self.dim)
        else:
            if noise_total is None:
                noise_total = self._noise_total()
            released = s.prefix / SCALE + noise_total
        self.released = s.offset + released
        self.w = -p.eta * self.released

    def _noise_total(self) -> np.ndarray:
        s = self.state
        if self.params.mechanism == TREE:
            return self._noise.prefix(s.b)[0]
        return s.noise[1]

    def rows(self, X) -> np.ndarray:
        """(n, d + 1) rows: x clamped to [-1, 1], the bias appended, scaled to unit norm.
        ParameterError on a row of another length or a non-finite entry."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X.reshape(1, -1)
        if X.ndim != 2 or X.shape[1] != self.params.d or not np.isfinite(X).all():
            raise ParameterError("x", "<features>", f"finite rows of {self.params.d} entries")
        R = np.empty((X.shape[0], self.dim))
        R[:, :-1] = np.clip(X, -1.0, 1.0)
        R[:, -1] = 1.0
        return R / np.sqrt(np.sum(R * R, axis=1))[:, None]         # >= 1: the bias

    def _margins(self, R: np.ndarray) -> np.ndarray:
        return np.sum(R * self.w, axis=1)          # per row, independent of the batch

    def predict_one(self, x) -> int:
        """sgn <w, x>: post-processing of the released model, free."""
        return int(self.predict_many([x])[0])

    def predict_many(self, X) -> np.ndarray:
        return np.where(self._margins(self.rows(X)) >= 0, 1, -1)

    def predict_proba_many(self, X) -> np.ndarray:
        """P(y = +1 | x) = sigmoid(<w, x>) per row, the released logistic model's estimate
        (for the hinge loss a monotone score only): post-processing, free."""
        return 1.0 / (1.0 + np.exp(-np.clip(self._margins(self.rows(X)), -700, 700)))

    # ------------------------------------------------------------ learning
    def learn_one(self, x, y: int) -> Step:
        return self.learn_many([x], [y])[0]

    def learn_many(self, X, ys) -> list[Step]:
        return self.learn_rows(*self.checked(X, ys))

    def checked(self, X, ys) -> tuple[np.ndarray, np.ndarray]:
        ys = np.asarray(ys, dtype=np.int64).reshape(-1)
        R = self.rows(X)
        if ys.size != R.shape[0] or not np.all((ys == 1) | (ys == -1)):
            raise ParameterError("y", "<labels>", "one label per row, each -1 or +1")
        return R, ys

    def _gradients(self, R: np.ndarray, ys: np.ndarray, margins: np.ndarray) -> np.ndarray:
        """Clipped per-example gradients at the released w, as int64 multiples of 2^-30."""
        z = ys * margins
        if self.params.loss == "logistic":
            coef = -ys / (1.0 + np.exp(np.clip(z, -700, 700)))     # -y sigmoid(-y <w, x>)
        else:
            coef = np.where(z < 1.0, -ys, 0.0).astype(np.float64)
        G = coef[:, None] * R
        norms = np.sqrt(np.sum(G * G, axis=1))
        G /= np.maximum(1.0, norms / self.params.clip)[:, None]
        return np.rint(G * SCALE).astype(np.int64)

    def _learn_segment(self, rows: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Predictions, then the gradients at the same released w into the block's sum."""
        margins = self._margins(rows)
        pred = np.where(margins >= 0, 1, -1)
        self.state.mistakes += int((pred != ys).sum())
        self.state.inc = self.state.inc + self._gradients(rows, ys, margins).sum(axis=0)
        return pred

    def _close_block(self) -> None:
        s = self.state
        s.b += 1
        s.prefix = s.prefix + s.inc
        s.inc = np.zeros(self.dim, dtype=np.int64)
        total, s.noise = self._noise.prefix(s.b, s.noise)
        self._refresh(total)

    def _next_epoch(self) -> None:
        """The epoch's final release becomes the public offset; fresh noise on fresh data,
        paid for by a fresh epoch ledger."""
        s = self.state
        s.offset = self.released.copy()
        s.epoch += 1
        s.t = s.b = 0
        s.prefix = np.zeros(self.dim, dtype=np.int64)
        s.noise = None
        self._charge_epoch()
        self._noise = self._noise_for(s.epoch)
        self._refresh()

    # ------------------------------------------------------------ state as records
    def hot_record(self) -> dict:
        s = self.state
        return {"epoch": s.epoch, "t": s.t, "b": s.b, "inc": _ints(s.inc), "mistakes": s.mistakes,
                "ledger": dict(vars(s.ledger))}

    def cold_record(self) -> dict:
        """What changes when a block closes: the epoch's prefix, the noise state, the offset."""
        s = self.state
        noise = None if s.noise is None else [_floats(s.noise[0].ravel()), _floats(s.noise[1])]
        return {"prefix": _ints(s.prefix), "noise": noise, "offset": _floats(s.offset)}

    @classmethod
    def state_from(cls, hot: dict, cold: dict | None, dim: int, buffers: int) -> DPFTRLState:
        s = DPFTRLState(epoch=hot["epoch"], t=hot["t"], b=hot["b"], inc=_unints(hot["inc"]),
                        mistakes=hot["mistakes"], ledger=LedgerState(**hot["ledger"]))
        cold = cold or {}
        if cold.get("prefix") is not None:
            s.prefix = _unints(cold["prefix"])
        if cold.get("offset") is not None:
            s.offset = _unfloats(cold["offset"])
        if cold.get("noise") is not None:
            s.noise = (_unfloats(cold["noise"][0]).reshape(buffers, dim), _unfloats(cold["noise"][1]))
        return s


def _ints(a: np.ndarray) -> str:
    from .winnow import encode_array
    return encode_array(a)


def _unints(s: str) -> np.ndarray:
    from .winnow import decode_array
    return decode_array(s)


def _floats(a: np.ndarray) -> str:
    import base64
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode()


def _unfloats(s: str) -> np.ndarray:
    import base64
    return np.frombuffer(base64.b64decode(s), dtype="<f8").astype(np.float64)


def parameters_record(p: DPFTRLParameters) -> dict:
    return asdict(p)
