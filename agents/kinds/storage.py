"""Where a model's state lives in the state mapping, and how large a record may be.

Keys: every record of model ``<id>`` sits under ``model/<id>/``: ``config``, ``key`` (the
noise key's fingerprint), ``head`` (written once per batch: log position, input
positions, the learner's small counters) and the kind's cold records (written only
when they change, under versioned keys: a kind's module lists its own).

Size: every state record stays well below Kafka's default 1 MiB message limit. Chunk
sizes follow the dimension, and a model whose single record cannot fit is refused at
registration (each kind's ``config_problem``), never discovered by a worker that then
crash-loops.
"""
from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np

from dpstream.learners.winnow import decode_array, encode_array

RECORD_BYTES = 600_000           # budget per record, JSON as faust writes it
FLOAT_BYTES, BIT_BYTES = 25, 3   # worst-case JSON bytes of one float / one 0-1 int, with ", "
VECTOR_COLUMNS = 32_768          # columns per sparse-vector record: <= 700 kB of base64 when dense


def model_key(model_id: str, *parts) -> str:
    """``model/<id>/<part>/<part>...``: the key of one of a model's records."""
    return "/".join(["model", model_id, *map(str, parts)])


def rows_per_record(values_per_row: int, value_bytes: int, cap: int) -> int:
    """How many rows of ``values_per_row`` values fit in one record (0: not even one)."""
    return min(cap, RECORD_BYTES // (values_per_row * value_bytes))


def chunk_keys(model_id: str, *parts, n: int, per: int) -> set[str]:
    """Keys ``parts/<c>`` of the ceil(n / per) chunks of n items."""
    return {model_key(model_id, *parts, c) for c in range((n + per - 1) // per)}


def vector_records(v: np.ndarray) -> list[dict]:
    """An int64 vector as sparse records of VECTOR_COLUMNS columns each (non-zeros only)."""
    out = []
    for lo in range(0, v.size, VECTOR_COLUMNS):
        part = v[lo:lo + VECTOR_COLUMNS]
        nz = np.flatnonzero(part)
        out.append({"idx": encode_array(nz), "val": encode_array(part[nz])})
    return out


def read_vector(state: MutableMapping, key, dim: int) -> np.ndarray:
    """The int64 vector ``vector_records`` wrote under ``key(c)`` for its chunks c."""
    v = np.zeros(dim, dtype=np.int64)
    for c, lo in enumerate(range(0, dim, VECTOR_COLUMNS)):
        r = state[key(c)]
        v[lo + decode_array(r["idx"])] = decode_array(r["val"])
    return v
