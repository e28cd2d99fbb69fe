import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.mechanisms.accounting import (Ledger, PrivacyCost, advanced_composition,
                                            advanced_composition_sums, basic_composition,
                                            solve_per_instance_epsilon)
from dpstream.mechanisms.errors import BudgetExhausted, ParameterError

charges = st.lists(st.tuples(st.floats(0.0, 0.5), st.sampled_from([0.0, 1e-9, 1e-7]),
                             st.integers(1, 50)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(seq=charges, rule=st.sampled_from(["basic", "advanced", "best"]),
       eps=st.floats(0.1, 10), delta=st.sampled_from([1e-6, 1e-5]))
def test_no_sequence_of_charges_ever_exceeds_the_budget(seq, rule, eps, delta):
    led = Ledger.create(epsilon=eps, delta=delta, rule=rule)
    accepted = 0
    for e, d, n in seq:
        before = led.state
        try:
            entry = led.charge("m", e, d, n)
        except BudgetExhausted as err:
            assert led.state.charges == before.charges          # nothing recorded
            assert led.state.exhausted and "remaining" in str(err)
            continue
        accepted += 1
        assert entry.spent_epsilon <= eps and entry.spent_delta <= delta
        spent = led.totals()
        assert spent.epsilon <= eps and spent.delta <= delta
    assert led.state.charges == accepted


def test_advanced_composition_matches_seed_001_theorem_3_on_a_worked_example():
    # k = 10, eps = 0.1, delta = 1e-8, delta' = 1e-6, by hand:
    # sqrt(2 * 10 * ln(1e6)) * 0.1 = sqrt(276.31) * 0.1 = 1.66226
    # 10 * 0.1 * (e^0.1 - 1)/(e^0.1 + 1) = 1 * 0.049958 = 0.049958
    c = advanced_composition(0.1, 1e-8, 10, 1e-6)
    assert c.epsilon == pytest.approx(1.662262 + 0.049958, abs=1e-5)
    assert c.delta == pytest.approx(10 * 1e-8 + 1e-6)


@settings(max_examples=100, deadline=None)
@given(eps=st.floats(1e-4, 2.0), k=st.integers(1, 10_000))
def test_heterogeneous_form_equals_theorem_3_for_equal_charges(eps, k):
    a = advanced_composition(eps, 0.0, k, 1e-6)
    b = advanced_composition_sums(k * eps * eps, k * eps * math.tanh(eps / 2), 0.0, 1e-6)
    assert a.epsilon == pytest.approx(b.epsilon, rel=1e-9)


def test_best_rule_is_never_worse_than_basic_or_advanced_for_many_small_charges():
    from dpstream.mechanisms.accounting import zcdp_epsilon
    led = Ledger.create(epsilon=100.0, delta=1e-5, rule="best")
    for _ in range(1000):
        led.charge("bt", 0.01)
    adv = advanced_composition(0.01, 0.0, 1000, 5e-6).epsilon
    assert adv < basic_composition([PrivacyCost(0.01)] * 1000).epsilon
    assert led.totals().epsilon == pytest.approx(min(adv, zcdp_epsilon(1000 * 0.01 ** 2 / 2, 1e-5)))
    assert led.totals().epsilon <= adv


def test_per_instance_solver_fits_exactly_into_the_total():
    e = solve_per_instance_epsilon(1.0, 400, 1e-6)
    assert advanced_composition(e, 0, 400, 1e-6).epsilon <= 1.0
    assert advanced_composition(e * 1.001, 0, 400, 1e-6).epsilon > 1.0


def test_exhaustion_message_names_requested_spent_and_budget():
    led = Ledger.create(epsilon=1.0, delta=0.0, rule="basic")
    led.charge("a", 0.75)
    with pytest.raises(BudgetExhausted) as err:
        led.charge("above_threshold", 0.5)
    msg = str(err.value)
    assert "above_threshold" in msg and "0.5" in msg and "0.75" in msg and "remaining eps=0.25" in msg


@pytest.mark.parametrize("kwargs", [dict(epsilon=0, delta=1e-6), dict(epsilon=1, delta=1.0),
                                    dict(epsilon=1, delta=1e-6, rule="renyi")])
def test_bad_budgets_raise(kwargs):
    with pytest.raises(ParameterError):
        Ledger.create(**kwargs)


def test_zcdp_path_composes_pure_charges_and_turns_off_with_an_approximate_one():
    from dpstream.mechanisms.accounting import zcdp_epsilon
    led = Ledger.create(epsilon=100.0, delta=1e-6, rule="best")
    for _ in range(400):
        led.charge("pure", 0.1)                         # rho = 0.005 each
    assert led.state.sum_rho == pytest.approx(2.0) and led.state.rho_complete
    zc = zcdp_epsilon(2.0, 1e-6)
    assert led.totals().epsilon == pytest.approx(min(zc, 40.0, led.totals().epsilon))
    assert led.totals().epsilon <= zc + 1e-12
    entry = led.charge("approx", 0.1, 1e-9)
    assert entry.rho is None and not led.state.rho_complete
    assert led.totals().epsilon > zc                    # back to basic / advanced


def test_a_stated_rho_is_used_and_recorded():
    led = Ledger.create(epsilon=1e6, delta=1e-6, rule="best")
    e = led.charge("weight_draw", 0.2, 0.0, 1000, rho=0.005)
    assert e.rho == 0.005 and led.state.sum_rho == pytest.approx(5.0)
    with pytest.raises(ParameterError):
        led.charge("bad", 0.1, 0.0, 1, rho=-1.0)


@pytest.mark.parametrize("rho", [1e-4, 0.0195, 0.5, 3.0, 40.0])
def test_zcdp_conversion_is_dp_accountings_own_for_a_zcdp_event(rho):
    import dp_accounting
    from dp_accounting import rdp

    from dpstream.mechanisms.accounting import ZCDP_ORDERS, zcdp_epsilon
    acc = rdp.RdpAccountant(orders=list(ZCDP_ORDERS))
    acc.compose(dp_accounting.ZCDpEvent(rho=rho))
    for delta in (1e-6, 1e-9):
        assert zcdp_epsilon(rho, delta) == pytest.approx(acc.get_epsilon(delta), rel=1e-12)


def test_after_preload_a_registration_imports_nothing_more():
    """The worker preloads dp-accounting at start (streams/cli/commands.py): its import took ~1 s,
    and the first registration paid it on the event loop. In a fresh interpreter, a
    continual-Winnow registration after ``preload`` imports no module at all."""
    import subprocess
    import sys
    script = """
import asyncio, json, sys
from dpstream.agents.records import RawRecord
from dpstream.agents.sequencer import sequence_batch
from dpstream.mechanisms.accounting import preload
preload()
before = set(sys.modules)
cfg = {"model_id": "m", "dimension": 1000, "budget": {"epsilon": 2.0, "delta": 1e-6},
       "params": {"kind": "continual_winnow", "max_active": 20}}
async def emit(*args):
    return None
asyncio.run(sequence_batch([RawRecord("models", 0, 0, b"m", json.dumps(cfg).encode())], {}, emit))
print(sorted(set(sys.modules) - before))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
