"""Shared bench helpers: timing and keyed synthetic streams (reproducible anywhere)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402

DATA_KEY = KeyedRandomness(b"dpstream-bench-data-not-secret00")


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def disjunction_rows(d: int, relevant: int, active: int, n: int, seed: int):
    """Sparse rows over d coordinates: the last one is the constant feature, each row has
    ``active`` active coordinates, label +1 iff one of the first ``relevant`` is active."""
    s = DATA_KEY.stream("bench", f"disjunction-{d}-{relevant}-{active}", seed)
    pos = s.bits(n)
    irrelevant = relevant + s.below(d - 1 - relevant, size=n * (active - 2)).reshape(n, active - 2)
    rel = s.below(relevant, size=n)
    const = np.full((n, 1), d - 1)
    fill = np.where(pos, rel, relevant + s.below(d - 1 - relevant, size=n))[:, None]
    rows = np.concatenate([const, irrelevant, fill], axis=1)
    return rows, np.where(pos, 1, -1)


def shuttle_rows(bins: int = 16):
    """River's bundled UCI Statlog (Shuttle) data (49,097 rows, 9 sensor readings, label +1
    for the 7% anomalies), offline. Each reading is cut into ``bins`` equal-width bins over
    its observed range and one-hot encoded: 9 active features of 9 * bins. (The range is
    read from the data, which a deployment would fix from public knowledge instead.)"""
    from river import datasets

    data = list(datasets.Shuttle())
    names = sorted(data[0][0])
    X = np.array([[x[n] for n in names] for x, _ in data], dtype=float)
    lo, hi = X.min(axis=0), X.max(axis=0)
    b = np.clip(((X - lo) / np.where(hi > lo, hi - lo, 1) * bins).astype(int), 0, bins - 1)
    rows = b + bins * np.arange(len(names))[None, :]
    return rows.astype(np.int64), np.array([1 if y else -1 for _, y in data]), len(names) * bins


# ------------------------------------------------------------------ classification metrics
def error(pred: np.ndarray, y: np.ndarray) -> float:
    """Share of wrong answers; an abstention (0 or None) counts as wrong."""
    return float(np.mean(_labels(pred) != y))


def balanced_error(pred: np.ndarray, y: np.ndarray) -> float:
    """(false-negative rate + false-positive rate) / 2, abstentions wrong: 0.5 for any
    constant answer, whatever the class balance (docs/models.md, "The benchmark data")."""
    pred = _labels(pred)
    pos, neg = y == 1, y == -1
    rates = [np.mean(pred[m] != t) for m, t in ((pos, 1), (neg, -1)) if m.any()]
    return float(np.mean(rates))


def auc(scores: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve of scores for y = +1 (Mann-Whitney, ties count 1/2); nan
    when one class is absent."""
    scores, pos = np.asarray(scores, dtype=float), np.asarray(y) == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _labels(pred) -> np.ndarray:
    return np.array([0 if v is None else int(v) for v in pred])
