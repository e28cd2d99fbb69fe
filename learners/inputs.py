"""Binary inputs in {-1,+1}^d, dense or sparse, and the (x, -x) embedding.

A sparse input lists the indices that are +1 (``active``); every other coordinate is
-1 (docs/concepts.md, "Events and topics"). For a vector v that sums to s, <v, x> = 2 sum_{j active}
v_j - s, so inner products cost O(active).

The nonnegative embedding of seed 000 Sec. 4.3 maps x in {-1,1}^d to z = (x, -x) in
{-1,1}^{2d}; a target v with negative entries becomes v' = (max(v, 0), max(-v, 0)),
with the same l1 norm and margin. It is never materialised: for a length-2d vector
u, <u, z> = <u[:d] - u[d:], x>, so learners keep that d-length projection.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from dpstream.mechanisms.errors import ParameterError
from .linalg import dot


@dataclass(frozen=True)
class BinaryInput:
    """A vector in {-1, +1}^d, dense or as the sorted indices of its +1 coordinates (module
    docstring)."""
    d: int
    dense: np.ndarray | None = None     # int8 in {-1, +1}, length d
    active: np.ndarray | None = None    # sorted unique int64 indices of +1 coordinates

    @classmethod
    def from_dense(cls, x) -> "BinaryInput":
        x = np.asarray(x)
        if x.ndim != 1 or not np.all(np.abs(x) == 1):
            raise ParameterError("x", "<features>", "a 1-d vector with entries in {-1, +1}")
        return cls(x.size, dense=x.astype(np.int8))

    @classmethod
    def from_active(cls, active, d: int) -> "BinaryInput":
        if not _all_ints(active):
            raise ParameterError("active", "<indices>", "a list of integer indices")
        # sorted(set(.)) over a short Python list costs about half of np.unique
        s = sorted(set(active))
        if s and (s[0] < 0 or s[-1] >= d):
            raise ParameterError("active", "<indices>", f"indices in [0, {d})")
        return cls(d, active=np.array(s, dtype=np.int64))

    def inner(self, v: np.ndarray, v_total: float) -> float:
        """<v, x> for a length-d vector v whose entries sum to v_total."""
        if self.dense is not None:
            return float(dot(v, self.dense))          # learners/linalg.py: no BLAS
        return 2.0 * float(v[self.active].sum()) - v_total

    def to_record(self) -> dict:
        if self.dense is not None:
            return {"dense": self.dense.astype(int).tolist()}
        return {"active": self.active.astype(int).tolist()}

    @classmethod
    def from_record(cls, r: dict, d: int) -> "BinaryInput":
        return cls.from_dense(r["dense"]) if "dense" in r else cls.from_active(r["active"], d)

    def to_dense(self) -> np.ndarray:
        if self.dense is not None:
            return self.dense.astype(np.int64)
        x = -np.ones(self.d, dtype=np.int64)
        x[self.active] = 1
        return x


def embed(x: BinaryInput, signed: bool) -> np.ndarray:
    """The dense vector the learner's weights multiply: x, or (x, -x) when signed."""
    dense = x.to_dense()
    return np.concatenate([dense, -dense]) if signed else dense


def project(v: np.ndarray, signed: bool) -> np.ndarray:
    """The d-length vector p with <v, embed(x)> = <p, x>."""
    if not signed:
        return v
    d = v.size // 2
    return v[:d] - v[d:]


def sign(z: float) -> int:
    """sgn with sgn(0) = +1 (the seeds leave the tie open; this is our convention)."""
    return 1 if z >= 0 else -1


def _all_ints(values) -> bool:
    """Every value an integer (Python or numpy), not a bool or a float (numpy would
    truncate 1.5 to 1)."""
    return all(t is not bool and issubclass(t, (int, np.integer)) for t in set(map(type, values)))


def bounded_active(active, limit: int) -> list[int]:
    """A row's distinct active indices, ascending, cut to the lowest ``limit``: how every
    layer bounds a row with more active features than a model takes (a rule that looks
    at the row alone, so a neighbouring dataset's rows are bounded the same way)."""
    return sorted(set(active))[:limit]


def active_matrix(actives, d: int, *, pad: int, extra: int | None = None) -> np.ndarray:
    """(n, width) int64: row i holds the distinct indices of ``actives[i]`` (and ``extra``,
    if given, e.g. a bias slot), ascending, then ``pad`` up to the common width.

    Vectorised over the batch (one sort of a padded matrix, not one ``np.unique`` or
    ``sorted(set(.))`` per row: this runs on the worker's loop for every event).
    ParameterError if a row is not a list of integers or an index is outside [0, d)."""
    n = len(actives)
    try:
        lengths = np.fromiter((len(a) for a in actives), dtype=np.int64, count=n)
        if not _all_ints(itertools.chain.from_iterable(actives)):
            raise TypeError
        flat = np.fromiter(itertools.chain.from_iterable(actives), dtype=np.int64,
                           count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError):
        raise ParameterError("active", "<indices>", "lists of integer indices") from None
    if flat.size and (flat.min() < 0 or flat.max() >= d):
        raise ParameterError("active", "<indices>", f"indices in [0, {d})")
    width = int(lengths.max(initial=0)) + (extra is not None)
    m = np.full((n, width), pad, dtype=np.int64)
    rows = np.repeat(np.arange(n), lengths)
    cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    m[rows, cols] = flat
    if extra is not None:
        m[np.arange(n), lengths] = extra
    m.sort(axis=1)
    repeated = np.zeros_like(m, dtype=bool)
    repeated[:, 1:] = m[:, 1:] == m[:, :-1]
    m[repeated] = pad                                            # duplicates become pads
    m.sort(axis=1)
    return m
