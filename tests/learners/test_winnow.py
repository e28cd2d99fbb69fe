import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.learners.inputs import BinaryInput
from dpstream.learners.winnow import ConfidentWinnow, Winnow, WinnowState
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.params import winnow_update_bound

from .streams import disjunction_margin, disjunction_stream, margin_stream, random_margin_target


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), c=st.sampled_from([0.0, 0.25, 0.45]),
       bits=st.integers(0, 2**32))
def test_confident_winnow_never_exceeds_lemma_9_bound_on_realizable_streams(seed, c, bits):
    d, rho = 24, 0.15
    v = random_margin_target(d, seed)
    rho_true = rho
    data = margin_stream(v, rho_true, 400, seed)
    eta = rho                                   # any eta with a positive denominator
    learner = ConfidentWinnow(d=d, eta=eta, c=c, rho=rho)
    for t, (x, y) in enumerate(data):
        learner.learn_one(x, y, update_bit=(bits >> (t % 32)) & 1)   # adversarial update bits
    assert learner.state.updates <= winnow_update_bound(d, eta, rho, c)


def test_winnow_learns_a_sparse_disjunction_within_its_mistake_bound():
    d, k = 1000, 5
    rho = disjunction_margin(k)
    data = disjunction_stream(d, k, 12, 4000, seed=1)
    eta = rho
    w = Winnow(d=d, eta=eta)
    for x, y in data:
        w.learn_one(x, y)
    assert w.state.mistakes <= winnow_update_bound(d, eta, rho, 0.0)
    late = sum(w.predict_one(x) != y for x, y in data[-500:])
    assert late == 0


def test_sparse_and_dense_inputs_give_identical_learning():
    data = disjunction_stream(60, 3, 6, 300, seed=2)
    a, b = Winnow(d=60, eta=0.3), Winnow(d=60, eta=0.3)
    for x, y in data:
        assert a.learn_one(x, y) == b.learn_one(BinaryInput.from_dense(x.to_dense()), y)
    assert np.array_equal(a.state.u, b.state.u)


def test_signed_embedding_learns_a_target_with_negative_weights():
    # label = sgn(x0 - x1 + x2/2): negative weight on x1, margin 0.5/2.5
    xs = np.array(np.meshgrid(*[[-1, 1]] * 8)).reshape(8, -1).T
    v = np.array([1.0, -1.0, 0.5, 0, 0, 0, 0, 0]) / 2.5
    w = Winnow(d=8, eta=0.2, signed=True)
    for _ in range(5):
        for x in xs:
            w.learn_one(BinaryInput.from_dense(x), 1 if v @ x > 0 else -1)
    assert all(w.predict_one(BinaryInput.from_dense(x)) == (1 if v @ x > 0 else -1) for x in xs)
    assert w.state.mistakes <= winnow_update_bound(16, 0.2, 0.2, 0.0)


def test_state_round_trips_through_its_record_bit_for_bit():
    data = disjunction_stream(50, 3, 5, 200, seed=4)
    w = ConfidentWinnow(d=50, eta=0.2, c=0.25, rho=0.2)
    for x, y in data[:100]:
        w.learn_one(x, y)
    restored = ConfidentWinnow(d=50, eta=0.2, c=0.25, rho=0.2,
                               state=WinnowState.from_record(w.state.to_record()))
    for x, y in data[100:]:
        assert w.learn_one(x, y) == restored.learn_one(x, y)
    assert np.array_equal(w.state.u, restored.state.u)


@pytest.mark.parametrize("kwargs", [dict(eta=0), dict(c=0.5), dict(rho=1.5), dict(d=0)])
def test_bad_parameters_raise_typed_errors(kwargs):
    with pytest.raises(ParameterError):
        ConfidentWinnow(**(dict(d=10, eta=0.1, c=0.1, rho=0.1) | kwargs))


def test_dimension_mismatch_raises():
    with pytest.raises(ParameterError):
        Winnow(d=10, eta=0.1).predict_one(BinaryInput.from_active([1], 11))


def test_active_matrix_rows_are_the_distinct_indices_in_order_then_pads():
    import numpy as np
    from dpstream.learners.inputs import active_matrix
    rows = [[5, 1, 5, 3], [], [0], [2, 2, 2]]
    m = active_matrix(rows, 6, pad=6)
    assert m.tolist() == [[1, 3, 5, 6], [6, 6, 6, 6], [0, 6, 6, 6], [2, 6, 6, 6]]
    with_bias = active_matrix(rows, 6, pad=7, extra=6)
    assert [[j for j in r if j != 7] for r in with_bias.tolist()] == \
        [sorted(set(r) | {6}) for r in rows]
    assert active_matrix([], 6, pad=6).shape[0] == 0
    for bad in ([[6]], [[-1]], [["a"]], [[1.5]], [[True]], [None]):
        with pytest.raises(ParameterError):
            active_matrix(bad, 6, pad=6)
    assert np.array_equal(active_matrix([[4, 0]], 6, pad=6), [[0, 4]])
