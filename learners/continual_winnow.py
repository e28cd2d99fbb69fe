"""Continual-release Winnow: our extension (not a seed algorithm). Balanced Winnow whose
statistic is released by continual counting, so that it learns at single-digit epsilon.

Why: the seed's DP-Winnow (Algorithm 4.2) releases w~ as m exponential-mechanism draws,
K times; its privacy loss has a floor near 2 m K eta^2 whatever the accountant
(mechanisms/params.py ``dp_winnow_guarantee``; docs/privacy.md, "DP-Winnow"), so it cannot learn at epsilon <= 10 on practical streams.

Learner. Inputs are sparse {0,1} rows given by their active indices (at most
``max_active`` of them count; more are cut, the lowest indices kept) plus a constant
bias feature (index d), so a row has at most s = max_active + 1 features. Balanced Winnow keeps
positive and negative weights w+_j ~ exp(+eta A_j), w-_j ~ exp(-eta A_j) and predicts
sgn(sum over the row's features of (w+_j - w-_j)) = sgn(sum_j sinh(eta A_j)), where
A = sum over update rounds of y * 1_row (the normaliser is positive and common to all
features, so it drops out of the sign). Every prediction and every update decision uses
only the *released* estimate A^ of A (below), never A itself.

Update rule: a round updates when the released model errs or is not confident:
y * sum_{j in row} A^_j < margin * u, with u the noise scale of A^ (one coordinate's
standard deviation, sqrt(sigma2 * levels / 2)). Margin updates are free under DP (an
example contributes at most one term y * 1_row whatever the rule) and they make the
statistic grow past the noise early; eta is likewise in units of u. Measured on the
bench's sparse disjunction at epsilon = 1: 6.0% cumulative mistakes with mistake-only
updates, 2.4% with margin 5 (bench/continual_winnow.py).

Release. A is released block by block: the increments of each block of ``block``
examples go to the binary tree mechanism with exact discrete Gaussian noise
(mechanisms/continual.py); after block b closes, A^ = (previous epochs' final release)
+ (this epoch's noisy prefix estimate). Replace-one neighbours change one block's
increment by y * 1_row - y' * 1_row' (or one of the two terms alone), at most
2 sqrt(s) in l2: that is the sensitivity. An epoch is ``horizon`` examples; then
a new epoch starts a new tree on fresh examples from the released A^ (each example is
in one epoch; per-example guarantee = one epoch's (epsilon, delta), forever; proof in
mechanisms/continual.py). Rows with more active features than allowed are cut to the
limit by a rule that looks at the row alone (``inputs.bounded_active``), so the
sensitivity holds for every row, and none is refused.

A person as the privacy unit (``max_contributions`` = k > 1): at most k of a person's
examples per epoch reach the learner, at most one per block (the agents' admission),
so neighbours differ in at most k blocks' increments, each by at most 2 sqrt(s), and
the epoch is P_k Delta^2 / (2 sigma2)-zCDP per person with P_k the tree's participation
norm (mechanisms/participation.py; mechanisms/continual.py, "A person"). sigma2 is
calibrated on that, so the epoch ledger is in persons; ``epsilon_example`` is what one
example costs under the same noise. The guarantee is per person and epoch: a person in
E epochs composes to E epochs' rho.

Ledger: the learner charges each epoch's (epsilon, delta) to a fresh epoch ledger when
the epoch starts (``ledger``; ``on_charge`` receives each entry).

>>> from dpstream.mechanisms.randomness import KeyedRandomness
>>> params = continual_winnow_parameters(epsilon=4.0, delta=1e-6, d=20, max_active=3,
...                                      horizon=1000, block=50)
>>> model = ContinualWinnow(params=params, rng=KeyedRandomness(bytes(32)), model_id="doc")
>>> model.learn_one([3, 7], +1).prediction in (-1, 1)
True
>>> model.ledger.totals().epsilon <= 4.0
True
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpstream.mechanisms.continual import (TreeNoise, calibrate_tree_sigma2, close_block, tree_epsilon,
                                           tree_levels, tree_rho)
from dpstream.mechanisms.accounting import Ledger, LedgerState
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.factorization import TreeFactorization
from dpstream.mechanisms.participation import participation_norm2
from dpstream.mechanisms.randomness import KeyedRandomness

from .inputs import active_matrix
from .protocol import BlockReleases, Step

TREE_MECHANISM = "tree_aggregation[discrete_gaussian]"


@dataclass(frozen=True)
class ContinualWinnowParameters:
    """Continual Winnow's settings and calibrated noise (our extension; derived from the budget
    by ``continual_winnow_parameters``)."""
    d: int                     # user features; the bias is feature d
    max_active: int            # active user features per row (the bias not counted)
    block: int                 # B: examples per release
    horizon: int               # T: examples per epoch (a multiple of B)
    eta: float                 # learning rate, in units of the noise scale u
    margin: float              # update when y <A^, x> < margin * u
    sigma2: int                # discrete Gaussian variance per tree node coordinate
    levels: int
    epsilon: float             # the guarantee per privacy unit (one epoch), at delta
    delta: float
    max_contributions: int = 1  # k: a person's examples per epoch (1: the unit is one example)

    @property
    def s(self) -> int:
        """Features per row, the bias included: max_active + 1."""
        return self.max_active + 1

    @property
    def sensitivity(self) -> float:
        """Replace-one l2 sensitivity of a block increment: 2 sqrt(s)."""
        return continual_winnow_sensitivity(self.max_active)

    @property
    def blocks(self) -> int:
        return self.horizon // self.block

    @property
    def noise_unit(self) -> float:
        """u: the standard deviation of one coordinate of A^ for a typical prefix
        (levels / 2 noisy nodes of variance sigma2); at least 1."""
        return max(1.0, math.sqrt(self.sigma2 * self.levels / 2.0))

    @property
    def participation(self) -> float | None:
        """P_k of the epoch's tree for a person (None for one example: ``levels``)."""
        return continual_winnow_participation(self.blocks, self.max_contributions)

    @property
    def rho(self) -> float:
        """zCDP of one epoch per privacy unit (per person for k > 1)."""
        return tree_rho(sigma2=self.sigma2, levels=self.levels, sensitivity=self.sensitivity,
                        participation=self.participation)

    @property
    def epsilon_example(self) -> float:
        """The epsilon one example costs under the same noise (= ``epsilon`` for k = 1)."""
        return tree_epsilon(sigma2=self.sigma2, levels=self.levels, sensitivity=self.sensitivity,
                            delta=self.delta)


def continual_winnow_sensitivity(max_active: int) -> float:
    """Replace-one l2 sensitivity of one block's increment y * 1_row: 2 sqrt(s), s =
    max_active + 1 (a row's features, the bias included): replacing an example removes
    one such term and adds another, each of l2 norm at most sqrt(s)."""
    return 2.0 * math.sqrt(max_active + 1)


def continual_winnow_participation(blocks: int, max_contributions: int) -> float | None:
    """The tree's participation norm P_k over ``blocks`` blocks for a person with k =
    ``max_contributions`` examples per epoch, at most one per block
    (mechanisms/participation.py); None for k = 1, where the calibration uses ``levels``
    as it always has."""
    if max_contributions == 1:
        return None
    return participation_norm2(TreeFactorization(), blocks, max_contributions)


def continual_winnow_parameters(*, epsilon: float, delta: float, d: int, max_active: int,
                                horizon: int = 1_000_000, block: int = 100, eta: float = 1.0,
                                margin: float = 5.0, max_contributions: int = 1) -> ContinualWinnowParameters:
    """Parameters that spend (epsilon, delta) per privacy unit: the smallest integer noise
    variance whose tree guarantee fits (``mechanisms.continual.calibrate_tree_sigma2``),
    per example, or per person with at most ``max_contributions`` examples per epoch (one
    per block: so at most the epoch's blocks; module docstring). ``max_active`` does not
    count the bias feature. Defaults (block 100, eta 1, margin 5) come from
    bench/continual_winnow.py."""
    if d < 1:
        raise ParameterError("d", d, ">= 1")
    if not 1 <= max_active <= d:
        raise ParameterError("max_active", max_active, f"in [1, d = {d}] (the bias not counted)")
    if block < 1 or horizon < block or horizon % block:
        raise ParameterError("horizon, block", (horizon, block), "block >= 1 dividing horizon")
    if not (eta > 0 and math.isfinite(eta)):
        raise ParameterError("eta", eta, "a finite number > 0")
    if not (margin >= 0 and math.isfinite(margin)):
        raise ParameterError("margin", margin, "a finite number >= 0")
    blocks = horizon // block
    if not (isinstance(max_contributions, int) and 1 <= max_contributions <= blocks):
        raise ParameterError("max_contributions", max_contributions,
                             f"an integer in [1, {blocks}]: a person has at most one example per "
                             f"block and an epoch has {blocks} blocks (horizon {horizon} / block "
                             f"{block}): raise the horizon, lower the block, or lower max_contributions")
    levels = tree_levels(blocks)
    sens = continual_winnow_sensitivity(max_active)
    participation = continual_winnow_participation(blocks, max_contributions)
    sigma2 = calibrate_tree_sigma2(epsilon=epsilon, delta=delta, levels=levels, sensitivity=sens,
                                   participation=participation)
    spent = tree_epsilon(sigma2=sigma2, levels=levels, sensitivity=sens, delta=delta,
                         participation=participation)
    return ContinualWinnowParameters(d, max_active, block, horizon, float(eta), float(margin),
                                     sigma2, levels, spent, delta, max_contributions)


@dataclass
class ContinualWinnowState:
    """Small counters (every event), the epoch ledger, and the epoch's tree nodes (on
    block closes)."""
    epoch: int = 0
    t: int = 0                               # examples seen this epoch
    b: int = 0                               # blocks closed this epoch
    inc_idx: list = field(default_factory=list)    # this block's increment, sparse
    inc_val: list = field(default_factory=list)
    mistakes: int = 0                        # private: in-process evaluation only
    updates: int = 0                         # private
    ledger: LedgerState | None = None        # this epoch's ledger (charged when it starts)
    alpha: dict = field(default_factory=dict)      # closing block -> true node sum (int64)
    offset: np.ndarray | None = None         # released A^ at the end of earlier epochs

    def hot_record(self) -> dict:
        """The small record. The block's increment is stored aggregated (sorted indices with
        non-zero sums): at most d + 1 entries, and the same however events were batched."""
        self.compact()
        return {"epoch": self.epoch, "t": self.t, "b": self.b, "inc_idx": list(self.inc_idx),
                "inc_val": list(self.inc_val), "mistakes": self.mistakes, "updates": self.updates,
                "ledger": None if self.ledger is None else dict(vars(self.ledger))}

    @classmethod
    def from_hot_record(cls, r: dict) -> "ContinualWinnowState":
        """The state of a record, sharing no mutable object with it (the learner extends
        the block's increment lists; the stored record must not change with them)."""
        r = dict(r)
        r["ledger"] = None if r["ledger"] is None else LedgerState(**r["ledger"])
        r["inc_idx"], r["inc_val"] = list(r["inc_idx"]), list(r["inc_val"])
        return cls(**r)

    def compact(self) -> None:
        if not self.inc_idx:
            return
        idx, inv = np.unique(np.asarray(self.inc_idx, dtype=np.int64), return_inverse=True)
        val = np.bincount(inv, weights=np.asarray(self.inc_val, dtype=np.float64)).astype(np.int64)
        keep = val != 0
        self.inc_idx, self.inc_val = idx[keep].tolist(), val[keep].tolist()


class ContinualWinnow(BlockReleases):
    """Predict and learn over explicit state; every decision reads only A^."""

    def __init__(self, *, params: ContinualWinnowParameters, rng: KeyedRandomness, model_id: str,
                 state: ContinualWinnowState | None = None, on_charge=None):
        self.params, self.rng, self.model_id = params, rng, model_id
        self.on_charge = on_charge
        self.dim = params.d + 1
        self.state = state or ContinualWinnowState(offset=np.zeros(self.dim, dtype=np.int64))
        if self.state.offset is None:
            self.state.offset = np.zeros(self.dim, dtype=np.int64)
        if self.state.ledger is None:
            self._charge_epoch()
        self.ledger = Ledger(self.state.ledger, on_entry=[on_charge] if on_charge else [])
        self._noise = TreeNoise(rng, model_id, self.state.epoch, params.sigma2, self.dim)
        self._refresh()
        self._noise.expect(self.state.b + 1)

    def _charge_epoch(self) -> None:
        """A fresh epoch ledger, charged the whole epoch's (epsilon, delta) up front: the
        tree's releases of this epoch are one mechanism (mechanisms/continual.py)."""
        p = self.params
        ledger = Ledger.create(epsilon=p.epsilon, delta=p.delta, rule="basic")
        if self.on_charge:
            ledger.on_entry.append(self.on_charge)
        ledger.charge(TREE_MECHANISM, p.epsilon, p.delta)
        self.state.ledger = ledger.state
        self.ledger = ledger

    # ------------------------------------------------------------ released model
    def _refresh(self) -> None:
        """A^ = offset + noisy prefix of this epoch (zero before its first block closes),
        extended by one zero slot that pads short rows."""
        s, p = self.state, self.params
        prefix = self._noise.release(s.alpha) if s.alpha else np.zeros(self.dim, dtype=np.int64)
        self.released = (s.offset + prefix).astype(np.float64)
        self._released_ext = np.append(self.released, 0.0)
        self._scaled_ext = p.eta * self._released_ext / p.noise_unit

    def _rows(self, actives) -> np.ndarray:
        """(n, s) feature indices: each row's distinct active indices (the lowest
        ``max_active`` of them, ``bounded_active``) and the bias d, ascending, then the pad
        slot d + 1 (``active_matrix``). A fixed width makes one row's arithmetic the same
        alone or in a batch (float sums in the same order). ParameterError if an index is
        outside [0, d)."""
        p = self.params
        n = len(actives)
        m = active_matrix(actives, p.d, pad=self.dim)[:, :p.max_active]   # lowest first
        out = np.full((n, p.s), self.dim, dtype=np.int64)
        out[:, :m.shape[1]] = m
        out[:, -1] = p.d                         # the bias: above every index, below the pad
        out.sort(axis=1)
        return out

    def _decide(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predictions, margins <A^, x>) per row. The score is sum_j sinh(eta A^_j / u),
        scaled by e^-max|.| per row so that it cannot overflow; pads contribute 0."""
        a = self._scaled_ext[idx]
        top = np.abs(a).max(axis=1, keepdims=True)
        score = np.sum(np.sign(a) * (np.exp(np.abs(a) - top) - np.exp(-np.abs(a) - top)), axis=1)
        return np.where(score >= 0, 1, -1), self._released_ext[idx].sum(axis=1)

    def predict_one(self, active) -> int:
        """Post-processing of the released A^: free."""
        return int(self._decide(self._rows([active]))[0][0])

    def predict_many(self, actives) -> np.ndarray:
        return self._decide(self._rows(actives))[0]

    # ------------------------------------------------------------ learning
    def learn_one(self, active, y: int) -> Step:
        return self.learn_many([active], [y])[0]

    def learn_many(self, actives, ys) -> list[Step]:
        """Learn a sequence of labelled rows, a block segment at a time (A^ is fixed
        within a block); the same steps as calling ``learn_one`` on each in turn.
        Raises before learning anything if any row or label is invalid."""
        return self.learn_rows(*self.checked(actives, ys))

    def checked(self, actives, ys) -> tuple[np.ndarray, np.ndarray]:
        """(rows, labels) validated for ``learn_rows`` (ParameterError if one is not)."""
        ys = np.asarray(ys, dtype=np.int64).reshape(-1)
        if ys.size != len(actives) or (ys.size and not np.isin(ys, (-1, 1)).all()):
            raise ParameterError("y", "<labels>", "one label per row, each -1 or +1")
        return self._rows(actives), ys

    def _learn_segment(self, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Predictions, then the rows that err or fall below the margin into the block's
        increment (A^ is fixed within the segment)."""
        p, s = self.params, self.state
        pred, lin = self._decide(rows)
        wrong = pred != y
        updated = wrong | (y * lin < p.margin * p.noise_unit)
        s.mistakes += int(wrong.sum())
        s.updates += int(updated.sum())
        if updated.any():
            kept = rows[updated]
            mask = kept < self.dim
            s.inc_idx.extend(kept[mask].tolist())
            s.inc_val.extend(np.broadcast_to(y[updated][:, None], kept.shape)[mask].tolist())
            if len(s.inc_idx) > 4 * self.dim:       # keep memory bounded by the dimension
                s.compact()
        return pred

    def _close_block(self) -> None:
        s = self.state
        g = np.zeros(self.dim, dtype=np.int64)
        if s.inc_idx:
            np.add.at(g, np.asarray(s.inc_idx, dtype=np.int64), np.asarray(s.inc_val, dtype=np.int64))
        s.b += 1
        s.alpha = close_block(s.alpha, s.b, g)
        s.inc_idx, s.inc_val = [], []
        self._refresh()

    def _next_epoch(self) -> None:
        """The epoch's final release becomes the public offset; a fresh tree on fresh data,
        paid for by a fresh epoch ledger."""
        s = self.state
        s.offset = self.released.astype(np.int64)
        s.epoch += 1
        s.t = s.b = 0
        s.alpha = {}
        self._charge_epoch()
        self._noise = TreeNoise(self.rng, self.model_id, s.epoch, self.params.sigma2, self.dim)
        self._refresh()
        self._noise.expect(1)
