"""Continual-release Winnow (learners/continual_winnow.py): parameters from a budget,
the released model is the only thing decisions read, batches equal single steps."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.learners.continual_winnow import ContinualWinnow, continual_winnow_parameters
from dpstream.mechanisms.continual import tree_epsilon
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.randomness import KeyedRandomness

from .streams import disjunction_stream

RNG = KeyedRandomness(b"continual-winnow-tests-key-00000")


def rows(n, d=40, seed=0):
    data = disjunction_stream(d, 3, 6, n, seed=seed)
    return [np.flatnonzero(x.to_dense() == 1) for x, _ in data], [y for _, y in data]


def test_parameters_spend_the_budget_and_no_more():
    for eps in (0.5, 1.0, 4.0):
        p = continual_winnow_parameters(epsilon=eps, delta=1e-6, d=1000, max_active=20,
                                        horizon=100_000, block=100)
        assert p.epsilon <= eps
        looser = tree_epsilon(sigma2=p.sigma2 - 1, levels=p.levels, sensitivity=p.sensitivity,
                              delta=1e-6)
        assert looser > eps                       # sigma2 is the smallest integer that fits
        assert p.sensitivity == pytest.approx(2 * np.sqrt(21))     # 20 features and the bias


def test_batches_give_the_same_steps_and_state_as_single_events():
    actives, ys = rows(3000)
    p = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=40, max_active=6, horizon=1000, block=50)
    one = ContinualWinnow(params=p, rng=RNG, model_id="m")
    many = ContinualWinnow(params=p, rng=RNG, model_id="m")
    singles = [one.learn_one(a, y) for a, y in zip(actives, ys)]
    batched = []
    for lo in range(0, 3000, 333):
        batched += many.learn_many(actives[lo:lo + 333], ys[lo:lo + 333])
    assert singles == batched
    assert one.state.hot_record() == many.state.hot_record() and one.state.epoch == 3
    assert np.array_equal(one.released, many.released)


def test_decisions_read_only_the_released_statistic():
    """Within a block nothing the model predicts moves, whatever it learns: predictions
    are post-processing of the last release."""
    actives, ys = rows(200)
    p = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=40, max_active=6, horizon=1000, block=100)
    m = ContinualWinnow(params=p, rng=RNG, model_id="m")
    m.learn_many(actives[:100], ys[:100])               # first release
    probe = [a for a in actives[:50]]
    before = m.predict_many(probe)
    m.learn_many(actives[100:199], ys[100:199])          # 99 examples: no release
    assert np.array_equal(m.predict_many(probe), before)
    step = m.learn_one(actives[199], ys[199])
    assert step.released


def test_every_noise_block_is_drawn_ahead_never_on_the_learning_thread(monkeypatch):
    """The first block of each epoch too (``TreeNoise.expect``): a block drawn on demand
    holds the caller (a worker's event loop) for the whole draw. Waiting for a block on
    its way is allowed; drawing one is not."""
    import threading

    from dpstream.mechanisms import continual
    drawn_on: list[str] = []
    draw = continual.draw_block

    def recorded(*args):
        drawn_on.append(threading.current_thread().name)
        return draw(*args)

    monkeypatch.setattr(continual, "draw_block", recorded)
    actives, ys = rows(3000)
    p = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=3000, max_active=6, horizon=1000, block=10)
    m = ContinualWinnow(params=p, rng=RNG, model_id="ahead")
    assert m._noise.per_chunk == 16                    # 100 releases an epoch: several blocks
    steps = m.learn_many(actives, ys)
    assert m.state.epoch == 3 and drawn_on
    assert threading.current_thread().name not in drawn_on, drawn_on
    again = ContinualWinnow(params=p, rng=RNG, model_id="ahead")    # the same noise
    monkeypatch.setattr(continual, "draw_block", draw)
    assert [s.prediction for s in again.learn_many(actives, ys)] == [s.prediction for s in steps]


def test_it_learns_a_sparse_disjunction_at_epsilon_four():
    actives, ys = rows(40_000, d=100, seed=3)
    p = continual_winnow_parameters(epsilon=4.0, delta=1e-6, d=100, max_active=6,
                                    horizon=40_000, block=100)
    m = ContinualWinnow(params=p, rng=RNG, model_id="learns")
    steps = m.learn_many(actives, ys)
    late = sum(s.prediction != y for s, y in zip(steps[-4000:], ys[-4000:]))
    majority = min(sum(y == 1 for y in ys[-4000:]), sum(y == -1 for y in ys[-4000:]))
    assert late < majority / 10, (late, majority)


def test_rows_beyond_the_cap_are_cut_and_bad_inputs_refused():
    """A row with more active features than max_active is bounded, not refused: its lowest
    max_active distinct indices count (a rule that looks at the row alone)."""
    p = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=40, max_active=3, horizon=100, block=10)
    m = ContinualWinnow(params=p, rng=RNG, model_id="m")
    assert m._rows([[9, 4, 1, 2, 2]]).tolist() == m._rows([[1, 2, 4]]).tolist()
    with pytest.raises(ParameterError):
        m.learn_one([1, 2], 0)
    with pytest.raises(ParameterError):
        m.learn_one([40], 1)
    assert m.learn_one([1, 2, 2, 3, 7, 9], 1).prediction in (-1, 1)


def _row_by_definition(active, d: int, max_active: int) -> np.ndarray | None:
    """One row as the learner defines it: the lowest max_active distinct indices and the
    bias d, ascending, padded with d + 1; None if the row must be refused."""
    a = np.asarray(active, dtype=np.int64)
    if a.size and (a.min() < 0 or a.max() >= d):
        return None
    row = np.append(np.unique(a)[:max_active], d)
    out = np.full(max_active + 1, d + 1, dtype=np.int64)
    out[:row.size] = row
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-2, 12), max_size=9), max_size=6))
def test_a_batch_of_rows_is_each_row_by_definition_or_refused(actives):
    """The batch's rows (one vectorised pass on the worker's hot path) equal each row
    built alone by definition; the batch is refused iff some row is (an index out of
    range); rows with more distinct indices than max_active are cut, not refused."""
    p = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=10, max_active=4, horizon=100, block=10)
    m = ContinualWinnow(params=p, rng=RNG, model_id="rows")
    expected = [_row_by_definition(a, p.d, p.max_active) for a in actives]
    if any(e is None for e in expected):
        with pytest.raises(ParameterError):
            m._rows(actives)
    else:
        got = m._rows(actives)
        assert got.shape == (len(actives), p.s)
        for row, e in zip(got, expected):
            assert row.tolist() == e.tolist()
