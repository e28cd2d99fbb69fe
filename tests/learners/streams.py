"""Realizable test streams built from keyed randomness (reproducible everywhere)."""
import numpy as np

from dpstream.learners.inputs import BinaryInput
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(b"dpstream-test-streams-0001000000")


def random_margin_target(d: int, seed: int, support: int = 3):
    """A nonnegative v with ||v||_1 = 1 on a few coordinates."""
    s = RNG.stream("streams", "target", seed)
    idx = s.below(d, size=support)
    v = np.zeros(d)
    np.add.at(v, idx, 1 + s.below(4, size=support))
    return v / v.sum()


def margin_stream(v: np.ndarray, rho: float, n: int, seed: int):
    """Dense inputs in {-1,1}^d labelled by sgn<v,x>, keeping only |<v,x>| >= rho."""
    s = RNG.stream("streams", "xs", seed)
    out = []
    while len(out) < n:
        xs = np.where(s.bits(200 * v.size).reshape(200, v.size), 1, -1)
        for x in xs:
            m = float(v @ x)
            if abs(m) >= rho:
                out.append((BinaryInput.from_dense(x), 1 if m > 0 else -1))
    return out[:n]


def disjunction_stream(d: int, relevant: int, active: int, n: int, seed: int):
    """Sparse inputs: label +1 iff a relevant feature (0..relevant-1) is active; the last
    coordinate d-1 is always active (the constant feature). Half the rows are positive."""
    s = RNG.stream("streams", "disj", seed)
    rows = []
    pos = s.bits(n)
    for i in range(n):
        irrelevant = relevant + s.below(d - 1 - relevant, size=active - 2)
        feats = [d - 1, *irrelevant.tolist()]
        if pos[i]:
            feats.append(int(s.below(relevant, size=1)[0]))
        rows.append((BinaryInput.from_active(feats, d), 1 if pos[i] else -1))
    return rows


def disjunction_margin(relevant: int) -> float:
    """OR of k variables with a constant feature: margin 1/(2k - 1) (seed 000 Sec. 4.3 style)."""
    return 1.0 / (2 * relevant - 1)
