"""A person as the privacy unit (k = max_contributions examples per epoch), per kind:
the charge each registration computes equals a materialised computation (C built
explicitly, every set of at most k blocks enumerated), pure-DP pieces are charged k
times the mechanism's epsilon, the predictor keeps a person in one block, and with
k = 1 every number is the per-example one of old (recomputed here by the formulas the
calibrations always used)."""
import dataclasses
import itertools
import math

import numpy as np
import pytest

from dpstream.agents.kinds import KINDS
from dpstream.agents.kinds.base import Outputs
from dpstream.learners.continual_winnow import continual_winnow_parameters
from dpstream.learners.decision_list import FeatureFamily
from dpstream.learners.dp_ftrl import dp_ftrl_parameters, release_rho
from dpstream.learners.dp_winnow import DPWinnow
from dpstream.learners.generators import NearestNeighbours, Thresholds
from dpstream.learners.predictor import (PredictorConfig, PrivatePredictor, keyed_permutation, largest_block,
                                         partition_units)
from dpstream.mechanisms.accounting import zcdp_epsilon, zcdp_rho
from dpstream.mechanisms.continual import calibrate_tree_sigma2, tree_epsilon, tree_levels
from dpstream.mechanisms.factorization import factorization, optimal_blt
from dpstream.mechanisms.params import (dp_winnow_guarantee, dp_winnow_practical_parameters,
                                        dp_winnow_theory_parameters, greedy_cover_person_round)
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig

RNG = KeyedRandomness(b"person-unit-tests-key-0000000000")


def config(kind: str, params: dict, *, k: int | None, dimension: int = 3, epsilon: float = 2.0,
           delta: float = 1e-6) -> ModelConfig:
    raw = {"model_id": "person", "dimension": dimension, "budget": {"epsilon": epsilon, "delta": delta},
           "params": {"kind": kind, **params}}
    if k is not None:
        raw["privacy_unit"] = {"max_contributions": k}
    return ModelConfig.model_validate(raw)


def toeplitz(c):
    n = c.size
    i, j = np.indices((n, n))
    return np.where(i >= j, c[np.clip(i - j, 0, n - 1)], 0.0)


def complete_tree(n: int) -> np.ndarray:
    top = tree_levels(n) - 1
    return np.array([[1.0 if start <= j < start + (1 << level) else 0.0 for j in range(n)]
                     for level in range(top + 1) for start in range(0, 1 << top, 1 << level)])


def worst_set(C: np.ndarray, k: int) -> float:
    """max over every set S of at most k blocks of ||C 1_S||^2, by enumeration."""
    n = C.shape[1]
    return max(float(np.sum(C[:, list(S)].sum(axis=1) ** 2))
               for size in range(1, k + 1) for S in itertools.combinations(range(n), size))


# ---------------------------------------------------------------- dp_ftrl, continual Winnow
@pytest.mark.parametrize("mechanism", ["blt", "tree"])
def test_a_dp_ftrl_registration_of_persons_charges_the_materialised_rho(mechanism):
    """12 blocks, k = 4: rho per person = sens^2 max_S ||C 1_S||^2 / (2 sigma^2) with C built
    as a matrix and every S of at most 4 blocks tried; the epoch ledger's charge is its
    epsilon, and the per-example epsilon of the same noise is P_1's."""
    cfg = config("dp_ftrl", {"horizon": 120, "block": 10, "mechanism": mechanism}, k=4)
    kind = KINDS["dp_ftrl"]
    q = kind.parameters(cfg)
    n = q.blocks
    C = (np.linalg.inv(toeplitz(optimal_blt(n).inverse_coefficients(n))) if mechanism == "blt"
         else complete_tree(n))
    assert np.all(C.T @ C >= -1e-15)
    materialised = q.sensitivity ** 2 * worst_set(C, 4) / (2 * q.sigma ** 2)
    assert release_rho(q.sensitivity, q.participation_norm2, q.sigma) == pytest.approx(materialised, rel=1e-12)
    assert q.epsilon == pytest.approx(zcdp_epsilon(materialised, 1e-6), rel=1e-9) and q.epsilon <= 2.0
    single = q.sensitivity ** 2 * worst_set(C, 1) / (2 * q.sigma ** 2)
    assert q.epsilon_example == pytest.approx(zcdp_epsilon(single, 1e-6), rel=1e-9)
    handler = kind(cfg, RNG, {})
    out = Outputs()
    handler.create(out)
    [entry] = [v for topic, _, v in out.items if topic == "ledger"]
    assert entry["epsilon"] == q.epsilon and entry["spent_epsilon"] <= 2.0


def test_a_continual_winnow_registration_of_persons_charges_the_materialised_rho():
    cfg = config("continual_winnow", {"max_active": 2, "horizon": 1200, "block": 100}, k=4, dimension=10)
    c = KINDS["continual_winnow"].parameters(cfg)
    n = c.blocks
    assert n == 12 and c.max_contributions == 4
    materialised = c.sensitivity ** 2 * worst_set(complete_tree(n), 4) / (2 * c.sigma2)
    assert c.rho == pytest.approx(materialised, rel=1e-12)
    assert c.epsilon == pytest.approx(zcdp_epsilon(materialised, 1e-6), rel=1e-9) and c.epsilon <= 2.0
    assert tree_epsilon(sigma2=c.sigma2 - 1, levels=c.levels, sensitivity=c.sensitivity, delta=1e-6,
                        participation=c.participation) > 2.0            # the smallest that fits
    assert c.epsilon_example == tree_epsilon(sigma2=c.sigma2, levels=c.levels, sensitivity=c.sensitivity,
                                             delta=1e-6)


@pytest.mark.parametrize("kind,params", [("dp_ftrl", {"horizon": 30, "block": 10}),
                                         ("continual_winnow", {"max_active": 2, "horizon": 300, "block": 100})])
def test_more_contributions_than_blocks_per_epoch_is_refused_in_one_line_with_the_remedy(kind, params):
    cfg = config(kind, params, k=4, dimension=10)
    problem = KINDS[kind].config_problem(cfg)
    assert problem is not None and "\n" not in problem
    assert "max_contributions=4" in problem and "3 blocks" in problem and "lower the block" in problem


def test_with_one_example_as_the_unit_dp_ftrl_and_continual_winnow_calibrate_as_always():
    """k = 1 (no privacy_unit, or a person with one example): the formulas as they were,
    recomputed here: sigma = sens ||C e_1|| / sqrt(2 rho), sigma2 from levels."""
    for mechanism in ("blt", "tree"):
        p = dp_ftrl_parameters(epsilon=3.0, delta=1e-6, d=4, horizon=2000, block=10, mechanism=mechanism)
        f = factorization(mechanism, 200)
        norm2 = f.sensitivity_squared(200)
        assert p.sigma == p.sensitivity * math.sqrt(norm2) / math.sqrt(2 * zcdp_rho(3.0, 1e-6))
        assert p.epsilon == zcdp_epsilon(p.sensitivity * p.sensitivity * norm2 / (2 * p.sigma * p.sigma), 1e-6)
        assert p.epsilon_example == p.epsilon and p.participation_norm2 == norm2
        person = KINDS["dp_ftrl"].parameters(config("dp_ftrl", {"horizon": 2000, "block": 10,
                                                                "mechanism": mechanism}, k=1, dimension=4,
                                                    epsilon=3.0))
        # a person's learner also releases the count of examples that reached it (for the
        # private prior, learners/dp_ftrl.py): no privacy number changes with it
        assert person.count_weight == person.prior_weight > 0
        assert dataclasses.replace(person, count_weight=0.0) == p
    c = continual_winnow_parameters(epsilon=2.0, delta=1e-6, d=50, max_active=3, horizon=10_000, block=100)
    levels = tree_levels(100)
    assert c.sigma2 == calibrate_tree_sigma2(epsilon=2.0, delta=1e-6, levels=levels, sensitivity=c.sensitivity)
    assert c.participation is None and c.epsilon_example == c.epsilon
    assert c.rho == levels * c.sensitivity ** 2 / (2.0 * c.sigma2)


# ---------------------------------------------------------------- DP-Winnow
def winnow_run(params, rounds=400):
    """A DP-Winnow learner on a stream that makes it err, its ledger entries collected."""
    entries = []
    model = DPWinnow(params=params, d=8, rng=RNG, model_id="person-winnow",
                     budget=(params.epsilon, params.delta), on_charge=entries.append)
    s = RNG.stream("person-tests", "winnow", 0)
    bits = s.bits(rounds * 8).reshape(rounds, 8)
    for row in bits:
        active = [j for j in range(8) if row[j]]
        model.learn_one(active, 1 if row[0] else -1)
    return model, entries


def test_dp_winnow_charges_k_times_the_mechanisms_epsilon_per_piece():
    k = 4
    p = dp_winnow_practical_parameters(eps_hat=2.0, eta=0.4, m=20, K=3, L=2.0, delta=1e-6, max_contributions=k)
    assert (p.eps_hat, p.eta) == (2.0 / k, 0.4 / k)             # the mechanism runs at the person's / k
    _, entries = winnow_run(p)
    at = [e for e in entries if e.mechanism == "above_threshold"]
    draws = [e for e in entries if e.mechanism == "weight_draw"]
    assert draws, "the stream must make AboveThreshold fire"
    assert all(e.epsilon == k * p.eps_hat and e.rho == (k * p.eps_hat) ** 2 / 2 for e in at)
    assert all(e.epsilon == 4 * (k * p.eta) and e.count == p.m and e.rho == 2 * (k * p.eta) ** 2 for e in draws)
    # the guarantee is the person's, that of the given settings at k = 1
    one = dp_winnow_practical_parameters(eps_hat=2.0, eta=0.4, m=20, K=3, L=2.0, delta=1e-6)
    assert p.epsilon == pytest.approx(one.epsilon, rel=1e-12)
    assert p.epsilon == dp_winnow_guarantee(eps_hat=p.eps_hat, eta=p.eta, m=20, K=3, delta=1e-6,
                                            max_contributions=k).epsilon


def test_dp_winnow_with_one_example_charges_as_always():
    p = dp_winnow_practical_parameters(eps_hat=2.0, eta=0.4, m=20, K=3, L=2.0, delta=1e-6)
    _, entries = winnow_run(p)
    assert {e.epsilon for e in entries if e.mechanism == "above_threshold"} == {2.0}
    assert {(e.epsilon, e.rho) for e in entries if e.mechanism == "weight_draw"} == {(4 * 0.4, 2 * 0.4 * 0.4)}


def test_dp_winnow_theory_for_persons_solves_k_with_the_mechanisms_eta():
    """K depends on the learning rate that runs: Lemma 9 at the mechanism's eta; eps^ and
    eta are the theorem's person values divided by k; the guarantee is per person."""
    k = 4
    one = dp_winnow_theory_parameters(epsilon=0.9, delta=1e-6, rho=0.5, T=1000, beta=0.05, d=30)
    p = dp_winnow_theory_parameters(epsilon=0.9, delta=1e-6, rho=0.5, T=1000, beta=0.05, d=30,
                                    max_contributions=k)
    from dpstream.mechanisms.params import winnow_update_bound
    assert p.K == math.ceil(winnow_update_bound(30, p.eta, 0.5, p.c))
    assert p.K > one.K and p.eta < one.eta and p.L > one.L
    assert p.epsilon <= 0.9 and p.epsilon == dp_winnow_guarantee(
        eps_hat=p.eps_hat, eta=p.eta, m=p.m, K=p.K, delta=1e-6, max_contributions=k).epsilon


# ---------------------------------------------------------------- decision lists
@pytest.mark.parametrize("accounting", ["basic", "advanced"])
def test_decision_list_rounds_are_charged_k_times_the_mechanisms_epsilon(accounting):
    """A person's k rows move a score by at most k: the round at eps_r with sensitivity k
    (weights exp(eps_r s / 2k)) is eps_r-DP for them (every shift of at most k, computed
    exactly; the worst approaches eps_r), and the per-example mechanism epsilon is eps_r / k."""
    k, rounds = 4, 41
    plan = greedy_cover_person_round(accounting, 1.0, 1e-6, rounds, k)
    assert plan.sensitivity == k and plan.epsilon == pytest.approx(k * plan.mechanism_epsilon, rel=1e-15)
    if accounting == "basic":
        assert plan.epsilon * rounds == pytest.approx(1.0, rel=1e-12)
    scores = np.array([0, -3, -7, -1])
    for shift in itertools.product((-k, 0, k), repeat=scores.size):
        p = np.exp(plan.epsilon * scores / (2 * k))
        q = np.exp(plan.epsilon * (scores + np.array(shift)) / (2 * k))
        ratio = np.abs(np.log((p / p.sum()) / (q / q.sum())))
        assert ratio.max() <= plan.epsilon * (1 + 1e-12)
    # many candidates, one raised by k and the rest lowered: the ratio tends to eps_r
    many = np.zeros(2000)
    p, q = np.exp(plan.epsilon * many / (2 * k)), np.exp(plan.epsilon * (many - k) / (2 * k))
    q[0] = np.exp(plan.epsilon * k / (2 * k))
    assert math.log((q[0] / q.sum()) / (p[0] / p.sum())) > 0.99 * plan.epsilon


def test_decision_list_set_cover_for_persons_takes_the_better_valid_bound():
    d = 500
    rounds = 2 * d + 1
    plan = greedy_cover_person_round("set_cover", 1.0, 1e-6, rounds, 4)
    composed = max(greedy_cover_person_round(a, 1.0, 1e-6, rounds, 4).mechanism_epsilon
                   for a in ("basic", "advanced"))
    assert plan.analysis == "group privacy over the set-cover analysis" and plan.sensitivity == 1
    assert plan.mechanism_epsilon > composed
    small = greedy_cover_person_round("set_cover", 1.0, 1e-6, 21, 4)
    assert small.sensitivity == 4                 # few rules: plain composition is better


def test_the_decision_list_kind_runs_its_rounds_at_the_persons_sensitivity(monkeypatch):
    import dpstream.learners.greedy_cover as G
    seen = []
    real = G.exponential_mechanism

    def spy(stream, scores, epsilon, sensitivity=1, size=None):
        seen.append((epsilon, sensitivity))
        return real(stream, scores, epsilon, sensitivity, size)

    monkeypatch.setattr(G, "exponential_mechanism", spy)
    for k, want in ((None, 1), (3, 3)):
        seen.clear()
        cfg = config("decision_list", {"window": 20, "accounting": "basic"}, k=k, dimension=4, epsilon=1.0)
        handler = KINDS["decision_list"](cfg, RNG, {})
        out = Outputs()
        handler.create(out)
        s = RNG.stream("person-tests", "dl", 0)
        for row in s.bits(20 * 4).reshape(20, 4):
            handler.on_example({"x": [1 if b else -1 for b in row], "y": 1 if row[0] else -1, "unit": "a" * 32},
                               "t:0:0", out)
        [entry] = [v for topic, _, v in out.items if topic == "ledger"]
        assert entry["epsilon"] == 1.0
        rounds = len(FeatureFamily(4, 1, True)) + 1
        assert {s for _, s in seen} == {want}
        assert all(e == pytest.approx(1.0 / rounds, rel=1e-12) for e, _ in seen)


# ---------------------------------------------------------------- the predictor
def test_a_persons_rows_share_a_block_and_blocks_stay_balanced():
    """Groups dealt in the keyed permutation's order to the emptiest block: every person in
    one block, sizes within the largest group of each other, a function of the pattern
    and the key (the same units in the same places give the same blocks)."""
    n, k = 400, 20
    s = RNG.stream("person-tests", "units", 0)
    persons = s.below(90, size=n)
    units = [f"{int(p):032x}" for p in persons]
    units[7] = None                                        # a row of its own
    perm = keyed_permutation(RNG, "person-pred", 0, n)
    blocks = partition_units(perm, units, k)
    assert sorted(np.concatenate(blocks).tolist()) == list(range(n))
    where = {}
    for b, rows in enumerate(blocks):
        for r in rows:
            if units[r] is not None:
                assert where.setdefault(units[r], b) == b
    sizes = [len(b) for b in blocks]
    largest = max(np.bincount(persons))
    assert max(sizes) - min(sizes) <= largest
    assert all((np.diff(b) > 0).all() for b in blocks)
    again = partition_units(keyed_permutation(RNG, "person-pred", 0, n), list(units), k)
    assert all((a == b).all() for a, b in zip(blocks, again))


@pytest.mark.parametrize("seed", range(6))
def test_no_block_holds_more_than_m_plus_c_minus_1_rows(seed):
    """``largest_block``: a sample of at most k m rows, no person with more than c of them,
    in any pattern (one heavy person first or last, many people of c rows, rows of their
    own), is dealt to blocks of at most m + c - 1 rows; patterns built to fill one block
    reach it."""
    g = np.random.default_rng(seed)
    k, m, c = int(g.integers(2, 30)), int(g.integers(1, 12)), int(g.integers(1, 40))
    n = int(g.integers(0, k * m + 1))
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(min(g.integers(1, c + 1), n - sum(sizes))))
    units = [f"{p:032x}" for p, size in enumerate(sizes) for _ in range(size)]
    units = [units[i] for i in g.permutation(n)] if seed % 2 else units
    if seed == 0 and n:
        units[g.integers(n)] = None                        # a row of its own
    blocks = partition_units(keyed_permutation(RNG, "largest", seed, n), units, k)
    assert max(len(b) for b in blocks) <= largest_block(m, c)
    # k m rows, c <= k: k m - c rows of their own dealt first leave a block of m - 1,
    # which the one person of c rows, dealt last, fills to m + c - 1
    c = min(c, k)
    filled = partition_units(np.arange(k * m), [None] * (k * m - c) + ["f" * 32] * c, k)
    assert max(len(b) for b in filled) == largest_block(m, c)


def test_a_row_that_did_not_reach_the_learner_changes_no_other_rows_block():
    """A refused row is dealt as a row of its own and left out of its block: the blocks are
    those of the same sample with that row admitted under a unit of its own, without it
    (so whether an example was refused changes its block alone)."""
    n, k = 300, 20
    units = [f"{int(p):032x}" for p in RNG.stream("person-tests", "taught", 0).below(60, size=n)]
    perm = keyed_permutation(RNG, "taught", 0, n)
    taught = [i != 17 for i in range(n)]
    refused = partition_units(perm, units[:17] + [None] + units[18:], k, taught)
    alone = partition_units(perm, units[:17] + ["e" * 32] + units[18:], k)
    assert all(a.tolist() == [r for r in b.tolist() if r != 17] for a, b in zip(refused, alone))
    assert 17 not in np.concatenate(refused).tolist()


def test_an_intervals_predictor_whose_person_could_overfill_a_block_is_refused_with_the_largest_k():
    """m + v_max + c - 1 points past INTERVAL_POINTS: refused in one line naming the largest
    max_contributions that fits, which is accepted."""
    def problem(c):
        params = {"generator": "intervals", "k": 100, "m": 10, "v_max": 4}
        return KINDS["predictor"].config_problem(config("predictor", params, k=c, dimension=1, epsilon=20.0))
    assert problem(1000) is not None and "\n" not in problem(1000)
    assert "lower max_contributions to at most 243" in problem(1000)
    assert problem(243) is None and problem(244) is not None


def test_without_units_the_partition_is_the_one_of_old():
    X = np.arange(403, dtype=float).reshape(-1, 1)
    y = np.where(X[:, 0] > 50, 1, -1)
    model = PrivatePredictor(config=PredictorConfig(k=40, epsilon=8.0, delta=1e-6, v_max=2),
                             generator=Thresholds(), rng=RNG, model_id="old")
    blocks = model.partition(X, y, 3)
    perm = keyed_permutation(RNG, "old", 3, 403)[:400]
    for i, (Xb, yb) in enumerate(blocks):
        assert (Xb[:, 0] == X[perm[i * 10:(i + 1) * 10], 0]).all()


def test_changing_a_persons_rows_changes_one_blocks_hypothesis():
    """Neighbours under the person relation: the same arrival pattern, one person's rows
    with other contents. Exactly the block holding that person sees different data."""
    n, k = 600, 40
    s = RNG.stream("person-tests", "neighbours", 0)
    X = s.uniform(n).reshape(-1, 1)
    y = np.where(X[:, 0] > 0.4, 1, -1)
    units = [f"{int(p):032x}" for p in s.below(150, size=n)]
    model = PrivatePredictor(config=PredictorConfig(k=k, epsilon=8.0, delta=1e-6, v_max=2),
                             generator=NearestNeighbours(1), rng=RNG, model_id="nbr")
    target = units[5]
    X2, y2 = X.copy(), y.copy()
    mine = [i for i, u in enumerate(units) if u == target]
    X2[mine], y2[mine] = 0.99, -1
    a = model.partition(X, y, 0, units)
    b = model.partition(X2, y2, 0, units)
    differ = [i for i in range(k) if not (np.array_equal(a[i][0], b[i][0]) and np.array_equal(a[i][1], b[i][1]))]
    assert len(differ) == 1


def test_uneven_blocks_vote_with_the_nearest_neighbour_generator():
    gen = NearestNeighbours(1)
    blocks = [(np.array([[0.0], [1.0], [2.0]]), np.array([-1, 1, 1])), (np.array([[0.5]]), np.array([-1])),
              (np.zeros((0, 1)), np.zeros(0, dtype=int))]
    gen.bind(blocks, [], [])
    assert gen.votes(gen.stack([0, 0, 0]), [1.9]).tolist() == [1, -1, 1]


def person_events(n, persons, seed=0):
    s = RNG.stream("person-tests", "pred-events", seed)
    X = s.uniform(n)
    ids = s.below(persons, size=n)
    return [{"x": [float(x)], "y": 1 if x > 0.5 else -1, "unit": f"{int(p):032x}"} for x, p in zip(X, ids)]


def test_the_predictor_kind_keeps_units_beside_its_sample_and_a_restart_rebuilds_the_same_blocks():
    cfg = config("predictor", {"generator": "thresholds", "k": 40, "m": 10, "v_max": 2}, k=5,
                 dimension=1, epsilon=8.0)
    state: dict = {}
    handler = KINDS["predictor"](cfg, RNG, state)
    out = Outputs()
    handler.create(out)
    events = person_events(400, 100)
    for e in events:
        handler.on_example(e, "t:0:0", out)
    handler.save()
    assert handler.model.state.epoch == 0
    blocks = handler.model.blocks
    where = {}
    for b, (Xb, _) in enumerate(blocks):
        for x in Xb[:, 0]:
            unit = next(e["unit"] for e in events if e["x"][0] == x)
            assert where.setdefault(unit, b) == b
    again = KINDS["predictor"](cfg, RNG, state)
    again.load(state[again.key("head")])
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(blocks, again.model.blocks))
    assert any(key.startswith(again.key("rowunit")) for key in state)


def test_the_predictor_for_persons_charges_what_it_charges_for_examples():
    one = KINDS["predictor"].parameter_rows(config("predictor", {"examples": 5000}, k=None, epsilon=4.0))
    person = KINDS["predictor"].parameter_rows(config("predictor", {"examples": 5000}, k=8, epsilon=4.0))
    assert person[:len(one)] == one
    notes = KINDS["predictor"].registration_notes(config("predictor", {"examples": 5000}, k=8, epsilon=4.0))
    assert "epsilon 4 per person and epoch, 4 per example" in notes[0]


def test_unequal_nearest_neighbour_blocks_vote_as_each_block_alone_would():
    """The flat layout of unequal blocks gives each block the label its own nearest example
    gives (checked against one generator per block), hard queries included."""
    s = RNG.stream("person-tests", "nn-uneven", 0)
    sizes = [5, 1, 0, 9, 3]
    blocks = []
    for size in sizes:
        X = s.uniform(2 * size).reshape(size, 2)
        blocks.append((X, np.where(X[:, 0] > 0.5, 1, -1)))
    hard_x, hard_y = s.uniform(4).reshape(2, 2), [1, -1]
    gen = NearestNeighbours(2, hard_weight=1.0)
    gen.bind(blocks, hard_x, hard_y)
    H = gen.stack([2, 0, 1, 0, 2])
    for x in s.uniform(2 * 50).reshape(50, 2):
        votes = gen.votes(H, x)
        for i, (X, y) in enumerate(blocks):
            if not len(y):
                continue
            alone = NearestNeighbours(2, hard_weight=1.0)
            alone.bind([(X, y)], hard_x, hard_y)
            assert votes[i] == alone.votes(alone.stack([H[i]]), x)[0]
