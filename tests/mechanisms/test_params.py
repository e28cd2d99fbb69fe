import math

import numpy as np
import pytest

from dpstream.mechanisms.errors import InfeasibleParameters, ParameterError
from dpstream.mechanisms.params import (dp_winnow_guarantee, dp_winnow_practical_parameters,
                                        dp_winnow_theorem_settings,
                                        dp_winnow_sample_size, dp_winnow_theory_parameters,
                                        greedy_cover_round_epsilon, predictor_guarantee,
                                        predictor_instance_budget, predictor_paper_halfspace,
                                        winnow_update_bound)


@pytest.mark.parametrize("rho,d", [(0.5, 1000), (0.2, 100_000), (0.9, 10)])
def test_theory_K_is_the_smallest_integer_that_covers_lemma_14(rho, d):
    eps_hat, eta, m, K = dp_winnow_theorem_settings(epsilon=0.5, delta=1e-6, rho=rho, T=10**5,
                                                    beta=0.05, d=d)
    assert winnow_update_bound(d, eta, rho, 0.25) <= K                # k < K never violated
    a = eta * math.sqrt(K)                                            # eta = a / sqrt(K)
    assert winnow_update_bound(d, a / math.sqrt(K - 1), rho, 0.25) > K - 1
    assert eps_hat == pytest.approx(0.5 / (4 * math.sqrt(2 * K * math.log(2 / 1e-6))))
    assert eta == pytest.approx(0.5 / (8 * math.sqrt(2 * m * K * math.log(2 / 1e-6))))
    # scaled to the budget: same eps^/eta ratio, K re-solved for the larger eta, eps spent
    p = dp_winnow_theory_parameters(epsilon=0.5, delta=1e-6, rho=rho, T=10**5, beta=0.05, d=d)
    assert p.eps_hat / p.eta == pytest.approx(eps_hat / eta) and p.eta >= eta
    assert winnow_update_bound(d, p.eta, rho, p.c) <= p.K < winnow_update_bound(d, p.eta, rho, p.c) + 1
    assert 0.49 <= p.epsilon <= 0.5


def test_practical_parameters_report_what_they_guarantee():
    p = dp_winnow_practical_parameters(eps_hat=0.1, eta=0.05, m=200, K=30, L=50.0, delta=1e-6)
    assert p.epsilon == dp_winnow_guarantee(eps_hat=0.1, eta=0.05, m=200, K=30, delta=1e-6).epsilon
    assert p.epsilon > 1.0        # honest: these settings are not eps = 1


def test_sample_size_formula_and_its_hoeffding_guarantee():
    m = dp_winnow_sample_size(T=1000, beta=0.05, c=0.25, rho=0.5)
    assert m == math.ceil(2 * math.log(2 * 1000 / 0.05) / 0.125 ** 2)
    # an m-sample empirical mean of +-1 values deviates by >= c rho rarely
    gen = np.random.default_rng(0)      # test-only statistics, not a mechanism
    x = np.where(gen.random(1000) < 0.5, 1.0, -1.0)
    w = gen.dirichlet(np.ones(1000))
    draws = gen.choice(1000, size=(2000, m), p=w)
    dev = np.abs(x[draws].mean(axis=1) - w @ x)
    assert (dev >= 0.125).mean() <= 2 * math.exp(-m * 0.125 ** 2 / 2) + 1e-3


@pytest.mark.parametrize("kwargs,exc", [
    (dict(epsilon=0.0), ParameterError), (dict(epsilon=1.5), ParameterError),
    (dict(rho=0.0), ParameterError), (dict(rho=1.5), ParameterError),
    (dict(d=1), ParameterError), (dict(delta=0.0), ParameterError)])
def test_bad_theory_parameters_raise_typed_errors(kwargs, exc):
    args = dict(epsilon=0.5, delta=1e-6, rho=0.5, T=1000, beta=0.05, d=100) | kwargs
    with pytest.raises(exc):
        dp_winnow_theory_parameters(**args)


def test_eta_too_large_for_the_margin_is_infeasible():
    with pytest.raises(InfeasibleParameters, match="eta"):
        winnow_update_bound(100, eta=2.0, rho=0.5, c=0.25)


def test_predictor_budget_composes_to_at_most_the_total():
    b = predictor_instance_budget(epsilon=1.0, delta=1e-6, v_max=40)
    g = predictor_guarantee(b.eps_bt, b.delta_bt, 40, b.delta_prime)
    assert g.epsilon <= 1.0 and g.delta <= 1e-6 * (1 + 1e-12)


def test_seed_appendix_a3_values():
    p = predictor_paper_halfspace(epsilon=1.0, delta=1e-6, alpha=0.1, beta=0.01, T=10**6, d=10)
    assert p["eps_bt"] == pytest.approx(1 / math.sqrt(10 * math.log(10 / 1e-6)))
    assert p["delta_bt"] == pytest.approx(1e-7) and p["alpha_bt"] == pytest.approx(1e-3)


def test_greedy_cover_round_epsilon_is_below_the_naive_per_round_share():
    r = greedy_cover_round_epsilon(1.0, 1e-6)
    assert r == pytest.approx(1 / (2 * math.log(math.e * (1 + math.exp(0.5)) / 1e-6)))
    assert r > 1.0 / 1000      # far better than basic composition over 1000 rounds


def test_weight_draws_are_two_eta_squared_zcdp_exactly_on_every_small_neighbour():
    """The bounded-range claim behind dp_winnow_draw_rho: for w ~ exp(eta u) and every
    neighbour u' = u + d with d in {-2..2}^4, the exact Renyi divergence of one draw is at
    most alpha * 2 eta^2 at every order alpha (zCDP)."""
    import itertools

    from dpstream.mechanisms.params import dp_winnow_draw_rho
    eta = 0.3
    u = np.array([0, 3, -1, 5], dtype=float)
    p = np.exp(eta * u) / np.exp(eta * u).sum()
    worst = 0.0
    for d in itertools.product(range(-2, 3), repeat=4):
        q = np.exp(eta * (u + d))
        q /= q.sum()
        for alpha in (1.5, 2, 4, 8, 16, 64):
            div = np.log(np.sum(p ** alpha * q ** (1 - alpha))) / (alpha - 1)
            worst = max(worst, div / alpha)
    assert worst <= dp_winnow_draw_rho(eta) * (1 + 1e-12)
    assert worst > 0.5 * dp_winnow_draw_rho(eta)        # and the bound is not loose by much


def test_theory_mode_spends_its_whole_budget_and_says_when_it_cannot_update():
    p = dp_winnow_theory_parameters(epsilon=0.99, delta=1e-6, rho=0.05, T=10**6, beta=0.01, d=1000)
    assert 0.98 <= p.epsilon <= 0.99
    assert p.L > p.T and "cannot update" in p.note
    easy = dp_winnow_theory_parameters(epsilon=0.9, delta=1e-3, rho=1.0, T=10**12, beta=0.5, d=4)
    assert easy.note == "" and easy.L <= easy.T


def test_the_guarantee_is_the_better_of_advanced_composition_and_zcdp():
    from dpstream.mechanisms.accounting import advanced_composition, zcdp_epsilon
    from dpstream.mechanisms.params import dp_winnow_draw_rho
    g = dp_winnow_guarantee(eps_hat=1.0, eta=0.05, m=5000, K=2000, delta=1e-6)
    adv = advanced_composition(1.0, 0, 2000, 5e-7).epsilon + \
        advanced_composition(0.2, 0, 5000 * 2000, 5e-7).epsilon
    zc = zcdp_epsilon(2000 * 0.5 + 5000 * 2000 * dp_winnow_draw_rho(0.05), 1e-6)
    assert g.epsilon == pytest.approx(min(adv, zc)) and zc < adv


def test_practical_winnow_settings_whose_loss_overflows_are_infeasible_not_a_bad_epsilon():
    """eps^ = eta = 1e308 overflow the certified loss; the error names the settings, as a
    typed InfeasibleParameters, not "epsilon=inf", a parameter the caller never gave."""
    with pytest.raises(InfeasibleParameters, match="certify no finite privacy loss: lower eta"):
        dp_winnow_practical_parameters(eps_hat=1e308, eta=1e308, m=1, K=1, L=10, delta=1e-6)


def test_winnow_guarantee_where_one_accounting_leaves_double_range_takes_the_other():
    """delta = 1e-308: delta/2 is a subnormal and 1/(delta/2) overflows, so advanced
    composition has no finite bound; the zCDP bound still does, and is the guarantee
    (before: "certify a privacy loss that is no finite number")."""
    from dpstream.mechanisms.accounting import zcdp_epsilon
    from dpstream.mechanisms.params import dp_winnow_draw_rho
    g = dp_winnow_guarantee(eps_hat=1e-3, eta=1e-3, m=10, K=100, delta=1e-308)
    rho = 100 * 1e-3 ** 2 / 2 + 10 * 100 * dp_winnow_draw_rho(1e-3)
    assert math.isfinite(g.epsilon) and g.epsilon == zcdp_epsilon(rho, 1e-308)


def test_theory_winnow_settings_past_double_range_are_refused_by_name_not_by_overflow():
    """rho = 1e-40 made the bisection's lo * hi overflow (OverflowError from ceil(inf));
    T = 10^400 made 2T/beta overflow. Now: settings that say they cannot learn, a typed
    refusal further out, and the sample size of T = 10^400."""
    far = dp_winnow_theory_parameters(epsilon=0.5, delta=1e-6, rho=1e-40, T=10**6, beta=0.01, d=40)
    assert far.note.startswith("cannot update within T=1000000")
    with pytest.raises(InfeasibleParameters, match=r"compose to eps=inf > requested 0.5 \(K=.* raise rho or c"):
        dp_winnow_theory_parameters(epsilon=0.5, delta=1e-6, rho=1e-60, T=10**6, beta=0.01, d=40)
    with pytest.raises(InfeasibleParameters, match="no K solves Theorem 11"):
        dp_winnow_theory_parameters(epsilon=0.5, delta=1e-6, rho=1e-80, T=10**6, beta=0.01, d=40)
    big = dp_winnow_sample_size(10**400, 0.01, 0.25, 0.1)
    assert big == math.ceil(2 * (math.log(2 / 0.01) + math.log(10**400)) / 0.025 ** 2)
    huge_T = dp_winnow_theory_parameters(epsilon=0.5, delta=1e-6, rho=0.1, T=10**400, beta=0.01, d=40)
    assert huge_T.m == big and huge_T.L == pytest.approx(
        8 * (math.log(2 / 0.01) + 2 * math.log(10**400)) / huge_T.eps_hat)     # 2T^2/beta overflowed
