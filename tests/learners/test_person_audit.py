"""A canary audit of DP-FTRL with a person as the privacy unit: a canary person with k
records in a small stream, neighbouring streams that differ in the labels of the canary's
records, many keys. The black-box epsilon lower bound (Clopper-Pearson,
mechanisms/audit.py) stays below the claimed per-person epsilon, and the auditor flags
two broken variants (its power check):

(a) the bound not applied: the canary gets 3k records into the learner (three in each of
    its k blocks) while the noise is calibrated for k;
(b) the noise calibrated for one example (P_1) while the person has k records.

The statistic. With a tiny eta every gradient is clipped to the same size whatever the
model, and with a declared public prior nothing else is released, so the releases are
S = B (C g + Z) exactly as mechanisms/factorization.py states it: Y = B^{-1} S = C g + Z,
B and C public (the registration's BLT). The neighbours shift Y by W = C (g_D' - g_D);
T = <Y - C g_D, W> / (sigma ||W||) is N(0, 1) under D and N(||W|| / sigma, 1) under D',
sigma the noise the mechanism under audit reports. Event: T >= 3 (fixed in advance).
Each key runs both neighbours (the same noise on both sides: each side is still a sample
of its own output distribution, and the Bonferroni split of the auditor's confidence
covers the two intervals whatever their dependence).
"""
import math

import numpy as np

from dpstream.learners.dp_ftrl import DPFTRL, dp_ftrl_parameters
from dpstream.mechanisms.audit import epsilon_lower_bound
from dpstream.mechanisms.factorization import optimal_blt
from dpstream.mechanisms.randomness import KeyedRandomness

BLOCKS, BLOCK, K = 8, 3, 4
EPSILON, DELTA = 3.0, 1e-3
RUNS, THRESHOLD = 500, 3.0


def claimed(k: int):
    return dp_ftrl_parameters(epsilon=EPSILON, delta=DELTA, d=1, horizon=BLOCKS * BLOCK, block=BLOCK,
                              eta=1e-9, prior=0.5, max_contributions=k)


def matrices():
    """C and B = A C^{-1} of the registration's BLT, materialised."""
    p = optimal_blt(BLOCKS)
    lag = np.subtract.outer(np.arange(BLOCKS), np.arange(BLOCKS))
    c_inv = p.inverse_coefficients(BLOCKS)
    C_inv = np.where(lag >= 0, c_inv[np.clip(lag, 0, BLOCKS - 1)], 0.0)
    return np.linalg.inv(C_inv), np.tril(np.ones((BLOCKS, BLOCKS))) @ C_inv


def stream(label: int, per_block: int):
    """The canary's records (x = 1, ``label``): the first ``per_block`` examples of each of
    the first K blocks (the packed set, BLT's worst); every other example public filler."""
    xs, ys = [], []
    for b in range(BLOCKS):
        for i in range(BLOCK):
            canary = b < K and i < per_block
            xs.append([1.0] if canary else [0.5])
            ys.append(label if canary else 1)
    return xs, ys


def block_sums(xs, ys) -> np.ndarray:
    """g: each block's sum of clipped gradients at w ~ 0 (coefficient -y/2 on a unit row,
    clipped to 1/4), (BLOCKS, 2)."""
    X = np.asarray(xs)
    R = np.hstack([X, np.ones((len(X), 1))])
    R /= np.linalg.norm(R, axis=1)[:, None]
    return (-np.asarray(ys)[:, None] * 0.25 * R).reshape(BLOCKS, BLOCK, 2).sum(axis=1)


def audit(params, per_block: int, tag: bytes):
    C, B = matrices()
    streams = {label: stream(label, per_block) for label in (+1, -1)}
    g_d = block_sums(*streams[+1])
    W = C @ (block_sums(*streams[-1]) - g_d)
    scale = params.sigma * np.linalg.norm(W)
    hits = {}
    for label, (xs, ys) in streams.items():
        T = []
        for i in range(RUNS):
            model = DPFTRL(params=params, rng=KeyedRandomness(b"canary-%s-%024d" % (tag, i)), model_id="canary")
            rows, labels = model.checked(xs, ys)
            released = []
            for b in range(BLOCKS):
                model.learn_rows(rows[b * BLOCK:(b + 1) * BLOCK], labels[b * BLOCK:(b + 1) * BLOCK])
                released.append(model.released.copy())
            Y = np.linalg.solve(B, np.array(released))
            T.append(float(np.sum((Y - C @ g_d) * W)) / scale)
        hits[label] = int((np.array(T) >= THRESHOLD).sum())
    return epsilon_lower_bound(hits[-1], RUNS, hits[+1], RUNS, delta=DELTA), np.linalg.norm(W) / params.sigma


def test_a_canary_persons_audit_stays_below_the_claim_and_flags_unbounded_or_per_example_noise():
    good, per_example = claimed(K), claimed(1)
    assert good.epsilon <= EPSILON and math.isclose(good.epsilon, EPSILON, rel_tol=1e-6)
    honest, mu = audit(good, 1, b"honest")
    assert math.isclose(mu, math.sqrt(2 * good.sensitivity ** 2 * good.participation_norm2 / (2 * good.sigma ** 2)),
                        rel_tol=1e-6)                  # the canary realises the bound P_k
    assert not honest.flags(EPSILON), honest
    unbounded, _ = audit(good, 3, b"unbounded")       # (a): 3k records, calibrated for k
    assert unbounded.flags(EPSILON), unbounded
    one, _ = audit(per_example, 1, b"per-example")    # (b): sigma from P_1, the person has k
    assert one.flags(EPSILON), one
