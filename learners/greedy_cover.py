"""Rivest's greedy learner and DP-GreedyCover (seed 000 Algorithm 3.1), vectorised.

Both maintain, for the remaining sample S_j, the counts pos_f = #{x in S_j^1 : f(x) = 1}
and neg_f = #{x in S_j^0 : f(x) = 1} for every feature f. When the rows a rule covers
leave S_j, their feature rows are subtracted from the counts, so each row is
subtracted once: O(n |F|) total work over all rounds, not O(M n |F|). Rows are
bit-packed and unpacked only when they leave.

DP-GreedyCover, round j: score q(S_j, (f, b)) = -#_{f->1}(S_j^{1-b}), i.e. -neg_f
for b = 1 and -pos_f for b = 0, over the remaining features plus the constant-true
rule; pick (f_j, b_j) with the exponential mechanism at the per-round epsilon
(``mechanisms.params.greedy_cover_round_epsilon``); S_{j+1} = {x in S_j : f_j(x) = 0};
drop f_j. The loop stops when the constant-true rule is picked: rules after it are
unreachable, so dropping them is post-processing. Rounds on an empty sample are
data-independent uniform choices and are run as the seed runs them.
"""
from __future__ import annotations

import numpy as np

from dpstream.mechanisms.exponential import exponential_mechanism
from dpstream.mechanisms.randomness import RandomStream

from .decision_list import TRUE, DecisionList, FeatureFamily, check_labels, check_rows

_CHUNK = 32_768


class _Cover:
    """Remaining sample and its per-feature label counts."""

    def __init__(self, packed: np.ndarray, y: np.ndarray, n_features: int):
        self.packed, self.y, self.nf = packed, y, n_features
        self.remaining = np.arange(y.size)
        self.pos = self._count(self.remaining[y == 1])
        self.neg = self._count(self.remaining[y == 0])
        self.n_pos, self.n_neg = int((y == 1).sum()), int((y == 0).sum())

    def _count(self, rows: np.ndarray) -> np.ndarray:
        total = np.zeros(self.nf, dtype=np.int64)
        for a in range(0, rows.size, _CHUNK):
            bits = np.unpackbits(self.packed[rows[a:a + _CHUNK]], axis=1, count=self.nf)
            total += bits.sum(axis=0, dtype=np.int64)
        return total

    def covered(self, f: int) -> np.ndarray:
        if f == TRUE:
            return np.ones(self.remaining.size, dtype=bool)
        col = self.packed[self.remaining, f >> 3]
        return ((col >> (7 - (f & 7))) & 1).astype(bool)

    def remove(self, f: int) -> None:
        hit = self.covered(f)
        gone = self.remaining[hit]
        if f == TRUE:
            self.pos[:] = 0
            self.neg[:] = 0
        else:
            self.pos -= self._count(gone[self.y[gone] == 1])
            self.neg -= self._count(gone[self.y[gone] == 0])
        self.n_pos -= int((self.y[gone] == 1).sum())
        self.n_neg -= int((self.y[gone] == 0).sum())
        self.remaining = self.remaining[~hit]


def _prepare(family: FeatureFamily, X, y, packed):
    if packed is None:
        X = check_rows(X, family.d)
        packed = family.evaluate_packed(X)
    y = check_labels(y, packed.shape[0])
    return _Cover(packed, y, len(family))


def rivest_greedy(family: FeatureFamily, X=None, y=None, *, packed=None) -> DecisionList:
    """Rivest (1987): repeatedly take a rule that makes no error on the remaining sample
    and covers the most of it. If no such rule exists (the sample is not consistent
    with any F-decision list), take the rule with the fewest errors (greedy ERM)."""
    cov = _prepare(family, X, y, packed)
    available = np.ones(len(family), dtype=bool)
    rules = []
    while cov.remaining.size:
        if cov.n_pos == 0 or cov.n_neg == 0:
            rules.append((TRUE, int(cov.n_pos > 0)))
            break
        # b = 1 is consistent iff neg_f == 0; b = 0 iff pos_f == 0; cover = the other count
        err = np.stack([cov.pos, cov.neg])            # row b: errors of (f, b) = count of 1-b
        gain = np.stack([cov.neg, cov.pos])
        err = np.where(available, err, np.iinfo(np.int64).max)
        ok = (err == 0) & (gain > 0)
        if ok.any():
            b, f = np.unravel_index(np.argmax(np.where(ok, gain, -1)), ok.shape)
        else:
            b, f = np.unravel_index(np.argmin(err - 1e-9 * gain), err.shape)
        rules.append((int(f), int(b)))
        available[f] = False
        cov.remove(int(f))
    return DecisionList(family, tuple(rules), default=rules[-1][1] if rules else 0)


def dp_greedy_cover(family: FeatureFamily, X=None, y=None, *, epsilon_round: float,
                    stream: RandomStream, packed=None, sensitivity: int = 1) -> DecisionList:
    """Seed 000 Algorithm 3.1 with per-round exponential-mechanism epsilon
    ``epsilon_round`` for a score of sensitivity ``sensitivity`` (1 for one example; k for
    a person with k rows, ``mechanisms.params.greedy_cover_person_round``). Charging is the
    caller's job (one release of the whole list, see
    ``mechanisms.params.greedy_cover_round_epsilon``)."""
    cov = _prepare(family, X, y, packed)
    nf = len(family)
    available = np.ones(nf + 1, dtype=bool)         # the last slot is the constant-true rule
    rules = []
    while True:
        feats = np.flatnonzero(available)
        pos = np.append(cov.pos, cov.n_pos)[feats]
        neg = np.append(cov.neg, cov.n_neg)[feats]
        scores = np.concatenate([-pos, -neg])       # first half: (f, b=0); second: (f, b=1)
        pick = exponential_mechanism(stream, scores, epsilon_round, sensitivity)
        b = int(pick >= feats.size)
        f = int(feats[pick % feats.size])
        is_true = f == nf
        rules.append((TRUE if is_true else f, b))
        available[f] = False
        cov.remove(TRUE if is_true else f)
        if is_true:
            break
    return DecisionList(family, tuple(rules), default=rules[-1][1])
