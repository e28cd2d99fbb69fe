"""The thresholds and finite-class fits count instead of tabulating (an attacker's pass:
blocks of 100,000 asked for 9 GiB and 4.7 GiB); they must return exactly what the
tabulating fits returned, tie-breaks included, on every input a worker gives them:
labels +-1 (``start_epoch`` refuses others), points in the domain (``input_problem``
refuses others), hard queries with both labels on one point (property test against the
former code, kept here as the reference)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.learners.generators import FiniteClass, Thresholds


def thresholds_reference(X, y, hard_X, hard_y):
    X, y = np.asarray(X, float).ravel(), np.asarray(y)
    hx, hy = np.asarray(hard_X, float).ravel(), np.asarray(hard_y)
    lo = hx[hy == -1].max() if (hy == -1).any() else -np.inf
    hi = hx[hy == 1].min() if (hy == 1).any() else np.inf
    cands = np.unique(np.concatenate([X, hx, [hi]]))
    cands = cands[(cands > lo) & (cands <= hi)]
    if cands.size == 0:
        cands = np.array([np.nextafter(lo, np.inf)])
    pred = np.where(X[None, :] >= cands[:, None], 1, -1)
    return float(cands[np.argmin((pred != y[None, :]).sum(axis=1))])


def finite_reference(P, X, y, hard_X, hard_y):
    hard = np.asarray(hard_X, dtype=int).ravel()
    ok = np.all(P[:, hard] == np.asarray(hard_y), axis=1) if hard.size else np.ones(P.shape[0], dtype=bool)
    if not ok.any():
        ok[:] = True
    err = (P[:, np.asarray(X, dtype=int).ravel()] != np.asarray(y)).sum(axis=1)
    return int(np.argmin(np.where(ok, err, np.iinfo(np.int64).max)))


labels = st.sampled_from([-1, 1])
points = st.integers(-6, 6).map(lambda v: v / 2)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(points, labels), min_size=1, max_size=30),
       st.lists(st.tuples(points, labels), max_size=5))
def test_thresholds_fit_as_the_tabulating_fit(block, hard):
    X, y = [x for x, _ in block], [t for _, t in block]
    hX, hy = [x for x, _ in hard], [t for _, t in hard]
    assert Thresholds().fit(X, y, hX, hy) == thresholds_reference(X, y, hX, hy)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.data())
def test_finite_fit_as_the_tabulating_fit(h, n, data):
    P = np.array(data.draw(st.lists(st.lists(labels, min_size=n, max_size=n), min_size=h, max_size=h)),
                 dtype=np.int8)
    block = data.draw(st.lists(st.tuples(st.integers(0, n - 1), labels), min_size=1, max_size=25))
    hard = data.draw(st.lists(st.tuples(st.integers(0, n - 1), labels), max_size=4))
    X, y = [[x] for x, _ in block], [t for _, t in block]
    hX, hy = [[x] for x, _ in hard], [t for _, t in hard]
    assert FiniteClass(P).fit(X, y, hX, hy) == finite_reference(P, X, y, hX, hy)


def test_large_blocks_fit_in_bounded_memory():
    r = np.random.default_rng(0)
    X = r.uniform(-1, 1, 100_000)
    y = np.where(X > 0.25, 1, -1)
    assert abs(Thresholds().fit(X, y, [], []) - 0.25) < 1e-3
    P = np.where(r.uniform(size=(20_000, 5)) > 0.5, 1, -1).astype(np.int8)
    P[7] = [-1, -1, 1, 1, 1]
    Xf = r.integers(0, 5, 100_000)
    best = FiniteClass(P).fit(Xf, np.where(Xf >= 2, 1, -1), [], [])
    assert best <= 7 and P[best].tolist() == [-1, -1, 1, 1, 1]
