"""Bounded, not refused (issue: raw records with declared features): a well-formed record
the model cannot take as it is (a row with too many active features, a number outside
its declared bounds, an unseen category, a missing or wrongly typed field) is bounded at
the edge, never dead-lettered; and the bound is what keeps the guarantee: for
neighbouring streams that differ in such a record, the released outputs' exact
divergence stays within the declared budget."""
import asyncio
import math

import numpy as np
import pytest
from scipy.stats import norm

from dpstream.agents.kinds.continual_winnow import parameters as winnow_parameters
from dpstream.agents.kinds.dp_ftrl import parameters as ftrl_parameters
from dpstream.learners.continual_winnow import ContinualWinnow
from dpstream.learners.dp_ftrl import DPFTRL
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.mechanisms.samplers import discrete_gaussian_pmf
from dpstream.schemas import ModelConfig
from dpstream.streams.tools.embedded import EmbeddedRuntime

RNG = KeyedRandomness(b"bounds-tests-key-000000000000000")
SPARSE = {"model_id": "sparse", "dimension": 40, "budget": {"epsilon": 4.0, "delta": 1e-6},
          "params": {"kind": "continual_winnow", "max_active": 3, "block": 10, "horizon": 40}}
DENSE = {"model_id": "dense", "budget": {"epsilon": 4.0, "delta": 1e-6},
         "params": {"kind": "dp_ftrl", "horizon": 40, "block": 10},
         "features": [{"type": "numeric", "name": "amount", "lower": 0, "upper": 100},
                      {"type": "categorical", "name": "country", "vocabulary": ["fr", "us"]}]}


def logged(items):
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed_all(items))
    return rt


def test_too_wide_rows_and_out_of_bounds_values_are_bounded_not_dead_lettered():
    rt = logged([("models", SPARSE), ("models", DENSE),
                 ("examples", {"model_id": "sparse", "active": list(range(39, 0, -2)), "y": 1}),
                 ("examples", {"model_id": "dense", "features": {"amount": 1e300, "country": "jp",
                                                                 "extra": {"nested": [1]}}, "y": 1}),
                 ("examples", {"model_id": "dense", "features": {"amount": "12"}, "y": -1})])
    assert rt.outputs["rejected"] == []
    assert len(rt.outputs["predictions"]) == 3
    events = [r["value"]["event"] for r in rt.log[2:]]
    assert events[0]["active"] == [1, 3, 5]                              # the lowest 3 distinct
    assert events[1]["x"] == [1.0, 0.0, 0.0, 1.0]                         # clamped; 'other'
    assert events[2]["x"] == [0.0, 0.0, 0.0, 1.0]                         # wrong type: missing


@pytest.mark.parametrize("repeats", [100_000, 100_001, 170_000])
def test_a_row_of_many_repeated_indices_is_merged_whatever_its_length(repeats):
    """Before: ``active`` had a length cap of 100,000, so 100,001 repeated indices were
    dead-lettered ("active: too_long") while 100,000 were merged: the dead letter told two
    valid records apart by size. A list's length is now bounded by the record's bytes."""
    row = [7] * repeats + [3]
    rt = logged([("models", SPARSE), ("examples", {"model_id": "sparse", "active": row, "y": 1}),
                 ("queries", {"model_id": "sparse", "active": row})])
    assert rt.outputs["rejected"] == [] and len(rt.outputs["predictions"]) == 2
    assert rt.log[-2]["value"]["event"]["active"] == [3, 7]


def _tree_delta(sigma2: int, shift: np.ndarray, nodes: int, epsilon: float) -> float:
    """Exact hockey-stick divergence of the tree's releases for neighbours whose block
    increments differ by the integer vector ``shift`` (a block lies in ``nodes`` released
    nodes; each coordinate's noise is a discrete Gaussian per node, so coordinate i of the
    nodes' sum is T_i, a sum of ``nodes`` of them). The privacy loss is
    sum_i (nodes shift_i^2 - 2 shift_i T_i) / (2 sigma2): linear in S = sum_i shift_i T_i,
    whose distribution is a convolution over coordinates."""
    support = int(40 * math.sqrt(sigma2)) + 1
    pmf = discrete_gaussian_pmf(np.arange(-support, support + 1), sigma2, support)
    node_sum = pmf
    for _ in range(nodes - 1):
        node_sum = np.convolve(node_sum, pmf)
    dist, lo = np.array([1.0]), 0                  # distribution of S on lo, lo + 1, ...
    for s in shift[shift != 0]:
        scaled = np.zeros(abs(int(s)) * (node_sum.size - 1) + 1)
        scaled[::abs(int(s))] = node_sum if s > 0 else node_sum[::-1]
        dist = np.convolve(dist, scaled)
        lo -= abs(int(s)) * nodes * support
    values = lo + np.arange(dist.size)
    loss = (nodes * float(shift @ shift) - 2.0 * values) / (2.0 * sigma2)
    return float(np.sum(dist * np.clip(-np.expm1(epsilon - loss), 0.0, None)))


def test_continual_winnow_neighbours_differing_in_a_too_wide_row_stay_within_the_budget():
    """Neighbours: a block holds the too-wide row (20 active indices) labelled +1 in one
    stream and a plain row labelled -1 in the other (both update). The rows the learner
    uses are the bounded ones, so the block increments differ by a vector of norm at most
    2 sqrt(max_active + 1), and the exact divergence at the declared epsilon is within
    delta. Without the bound (the raw 20 indices), the same computation exceeds it."""
    config = ModelConfig.model_validate(SPARSE)
    p = winnow_parameters(config)
    learner = ContinualWinnow(params=p, rng=RNG, model_id="sparse")
    dim = p.d + 1
    wide, plain = list(range(39, 0, -2)), [0, 2, 4]

    def increment(active, y):
        row = learner._rows([active])[0]
        g = np.zeros(dim + 1, dtype=np.int64)
        np.add.at(g, row, y)
        return g[:dim]                                  # the pad slot is dropped

    shift = increment(wide, +1) - increment(plain, -1)
    assert float(shift @ shift) <= p.sensitivity ** 2 + 1e-9
    assert _tree_delta(p.sigma2, shift, p.levels, p.epsilon) <= p.delta
    raw = np.zeros(dim, dtype=np.int64)
    raw[wide] += 1
    raw[plain] += 1
    raw[p.d] += 2                                        # the bias, in both rows
    assert _tree_delta(p.sigma2, raw, p.levels, p.epsilon) > p.delta


@pytest.mark.parametrize("amount", [1e300, -5.0, 2 ** 1100, "a string"])
def test_dp_ftrl_neighbours_differing_in_an_out_of_bounds_value_stay_within_the_budget(amount):
    """Neighbours: one record with an amount far outside [0, 100] (or of the wrong type)
    labelled +1, against an ordinary record labelled -1. Featurised, clamped and scaled to
    a unit row, each example's clipped gradient has norm <= clip, so the releases (Gaussian
    mechanism on C g) differ by at most 2 clip ||C e_1||: the exact divergence at the
    declared epsilon (Balle and Wang 2018) is within delta."""
    from dpstream.learners.features import Featuriser
    config = ModelConfig.model_validate(DENSE)
    p = ftrl_parameters(config)
    f = Featuriser(config.features)
    learner = DPFTRL(params=p, rng=RNG, model_id="dense")
    a = learner.rows([f.dense({"amount": amount, "country": "us"})])
    b = learner.rows([f.dense({"amount": 50.0, "country": "fr"})])
    ga = learner._gradients(a, np.array([1]), learner._margins(a))[0] / 2 ** 30
    gb = learner._gradients(b, np.array([-1]), learner._margins(b))[0] / 2 ** 30
    shift = np.linalg.norm(ga - gb) * math.sqrt(p.strategy_norm2) / p.sigma
    assert shift <= p.sensitivity * math.sqrt(p.strategy_norm2) / p.sigma + 1e-12
    exact = norm.cdf(-p.epsilon / shift + shift / 2) - math.exp(p.epsilon) * norm.cdf(-p.epsilon / shift - shift / 2)
    assert exact <= p.delta
