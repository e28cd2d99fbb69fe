import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.learners.decision_list import TRUE, DecisionList, FeatureFamily
from dpstream.learners.dl_halfspace import (brute_force_margin, decision_list_weights, exact_margin,
                                            nonnegative_embedding)
from dpstream.learners.decision_list_classifier import DPDecisionListClassifier
from dpstream.learners.greedy_cover import dp_greedy_cover, rivest_greedy
from dpstream.mechanisms.errors import ParameterError
from dpstream.mechanisms.randomness import KeyedRandomness

RNG = KeyedRandomness(b"decision-list-tests-key000000000")


def bits01(seed: int, n: int, d: int) -> np.ndarray:
    s = RNG.stream("dl-tests", "x", seed)
    return s.bits(n * d).reshape(n, d)


@st.composite
def planted_lists(draw, d=8, max_rules=5):
    fam = FeatureFamily(d, max_conjunction=draw(st.sampled_from([1, 2])))
    r = draw(st.integers(0, max_rules))
    feats = draw(st.lists(st.integers(0, len(fam) - 1), min_size=r, max_size=r, unique=True))
    bits = draw(st.lists(st.integers(0, 1), min_size=r + 1, max_size=r + 1))
    rules = tuple(zip(feats, bits[:-1])) + ((TRUE, bits[-1]),)
    return DecisionList(fam, rules, bits[-1])


@settings(max_examples=40, deadline=None)
@given(target=planted_lists(), seed=st.integers(0, 10**6), n=st.integers(1, 300))
def test_dp_greedy_cover_with_huge_epsilon_is_consistent_when_a_list_exists(target, seed, n):
    """Seed 000 Prop. 6: zero-error choices keep a consistent completion available."""
    X = bits01(seed, n, target.family.d)
    y = target.predict(X)
    dl = dp_greedy_cover(target.family, X, y, epsilon_round=1e6,
                         stream=RNG.stream("dl-tests", "em", seed))
    assert np.array_equal(dl.predict(X), y)


@settings(max_examples=40, deadline=None)
@given(target=planted_lists(), seed=st.integers(0, 10**6), n=st.integers(1, 300))
def test_rivest_greedy_returns_a_consistent_list(target, seed, n):
    X = bits01(seed, n, target.family.d)
    y = target.predict(X)
    assert np.array_equal(rivest_greedy(target.family, X, y).predict(X), y)


KEY = b"decision-list-tests-key-32-bytes!!"


def test_dp_greedy_cover_is_accurate_on_a_planted_list_and_reproducible_from_key_and_nonce():
    fam = FeatureFamily(30)
    target = DecisionList(fam, ((2, 1), (30 + 7, 0), (11, 1), (TRUE, 0)), 0)
    X = bits01(1, 20_000, 30)
    y = target.predict(X)
    clf = DPDecisionListClassifier(epsilon=1.0, key=KEY).fit(X, y)
    again = DPDecisionListClassifier(epsilon=1.0, key=KEY).fit(X, y, nonce=clf.fit_nonce_)
    assert clf.list_.rules == again.list_.rules
    Xt = bits01(2, 5000, 30)
    assert clf.score(Xt, target.predict(Xt)) > 0.95
    assert clf.ledger_.totals().epsilon == pytest.approx(1.0)


def test_estimator_params_round_trip_and_reject_unknown_names():
    clf = DPDecisionListClassifier(epsilon=0.5)
    assert clf.get_params()["epsilon"] == 0.5
    assert clf.set_params(epsilon=2.0).epsilon == 2.0
    with pytest.raises(ParameterError):
        clf.set_params(gamma=1)


def test_conjunction_features_evaluate_as_conjunctions():
    fam = FeatureFamily(3, max_conjunction=2)
    X = np.array([[1, 1, 0], [1, 0, 0]])
    F = fam.evaluate(X)
    name_to_col = {fam.name(i): i for i in range(len(fam))}
    assert F[:, name_to_col["x0 and x1"]].tolist() == [True, False]
    assert F[:, name_to_col["x0 and not x2"]].tolist() == [True, True]
    assert np.array_equal(np.unpackbits(fam.evaluate_packed(X), axis=1, count=len(fam)), F)


@settings(max_examples=60, deadline=None)
@given(d=st.integers(1, 10), data=st.data())
def test_decision_list_and_its_halfspace_agree_on_all_inputs(d, data):
    r = data.draw(st.integers(0, d))
    vars_ = data.draw(st.permutations(range(d)))[:r]
    bits = data.draw(st.lists(st.sampled_from([-1, 1]), min_size=r + 1, max_size=r + 1))
    rules = list(zip(vars_, bits[:-1]))
    v = decision_list_weights(rules, bits[-1], d)
    margin, agree = brute_force_margin(rules, bits[-1], v, d)
    assert agree
    assert exact_margin(rules, bits[-1], v) == pytest.approx(margin)
    assert margin >= 1 / np.abs(v).sum() - 1e-12
    vp = nonnegative_embedding(v)
    assert (vp >= 0).all() and np.abs(vp).sum() == pytest.approx(np.abs(v).sum())
    z = np.append(np.where(np.arange(d) % 2 == 0, 1, -1), 1)
    assert vp @ np.concatenate([z, -z]) == pytest.approx(v @ z)


def test_margin_shrinks_like_one_over_r_to_the_D():
    """Alternations cost margin (Omega(1/r^D) is the guarantee); equal bits keep it large."""
    same = [(i, 1) for i in range(8)]
    alt = [(i, 1 if i % 2 else -1) for i in range(8)]
    m_same = exact_margin(same, -1, decision_list_weights(same, -1, 8))
    m_alt = exact_margin(alt, 1, decision_list_weights(alt, 1, 8))
    assert m_same > 0.05 and m_alt < m_same / 4


def test_two_fits_with_the_same_key_never_share_noise():
    """Issue 8: each fit draws a fresh stream. At a tiny epsilon the exponential mechanism
    is close to uniform over 2 |F| + 2 choices per round, so two fits sharing noise give
    the same list and two independent fits almost surely do not."""
    X = bits01(3, 200, 40)
    y = (X[:, 0] == 1).astype(int)
    first = DPDecisionListClassifier(epsilon=1e-3, key=KEY).fit(X, y)
    second = DPDecisionListClassifier(epsilon=1e-3, key=KEY).fit(X, y)
    assert first.fit_nonce_ != second.fit_nonce_
    assert first.list_.rules != second.list_.rules
    with pytest.raises(ParameterError):
        DPDecisionListClassifier(key=KEY).fit(X, y, nonce=b"short")
