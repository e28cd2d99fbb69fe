"""Random access to a keyed i.i.d. discrete-Laplace sequence.

A sparse-vector instance needs one fresh noise value per query. Drawing them one
at a time costs a numpy round trip per event; drawing them in blocks makes the
t-th value depend on how the stream was consumed. A tape fixes both: the values are cut into blocks of
sizes 16, 32, ... up to ``block`` and then ``block`` each (short-lived instances draw little),
and each block b is its own keyed stream ``(purpose, (instance, b))``. So value t is a pure function of
(key, model, purpose, instance, t): a restart, a replay, or a state restored from a
table sees the same noise, and nothing but two counters needs storing.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from .randomness import KeyedRandomness
from .samplers import discrete_laplace


class NoiseTape:
    """Value t of a keyed i.i.d. discrete-Laplace sequence, computed in blocks and cached."""
    __slots__ = ("_rng", "_model", "_purpose", "_instance", "scale", "_block", "_cached", "_values")

    def __init__(self, rng: KeyedRandomness, model_id: str, purpose: str, instance: int,
                 scale: Fraction, block: int = 1024):
        self._rng, self._model, self._purpose, self._instance = rng, model_id, purpose, instance
        if block < 16 or block & (block - 1):
            raise ValueError(f"block={block} must be a power of two >= 16")
        self.scale, self._block = scale, block
        self._cached = -1
        self._values = np.empty(0, dtype=np.int64)

    def __getitem__(self, t: int) -> int:
        b, start, size = self._locate(t)
        self._load(b, size)
        return int(self._values[t - start])

    def values(self, start: int, stop: int) -> np.ndarray:
        """Values start, ..., stop - 1 (the same as indexing each one)."""
        parts, t = [], start
        while t < stop:
            b, first, size = self._locate(t)
            self._load(b, size)
            end = min(stop, first + size)
            parts.append(self._values[t - first:end - first])
            t = end
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def _load(self, b: int, size: int) -> None:
        if b != self._cached:
            stream = self._rng.stream(self._model, self._purpose, (self._instance, b))
            self._values = discrete_laplace(stream, self.scale, size)
            self._cached = b

    def _locate(self, t: int) -> tuple[int, int, int]:
        """(block index, first position, size): sizes 16 * 2^b until they reach the
        block size (a power of two >= 16), then the block size; O(1)."""
        growth = self._block.bit_length() - 5          # number of growing blocks
        head = 16 * ((1 << growth) - 1)                # positions they cover
        if t < head:
            b = (t // 16 + 1).bit_length() - 1
            return b, 16 * ((1 << b) - 1), 16 << b
        b = growth + (t - head) // self._block
        return b, head + (b - growth) * self._block, self._block
