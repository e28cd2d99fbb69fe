"""Statistical audits: correct mechanisms stay at or below their claimed epsilon,
and each deliberately broken variant is flagged (the auditor's power check)."""
import pytest

from dpstream.mechanisms.audit import clopper_pearson, epsilon_lower_bound, run_scenario, standard_scenarios

SCENARIOS = standard_scenarios()


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_audit_flags_exactly_the_broken_mechanisms(rng, scenario):
    # BetweenThresholds at the quoted scale is ~2.8-DP against a claim of 1, but on its
    # event (>= 9) the 95% lower bound from 40,000 runs ranged 0.99-1.30 over five keys
    # (0.99 with the test key: not flagged); from 400,000 runs, 1.26-1.40 over four
    runs = (10_000 if "halves" in scenario.name or "reused" in scenario.name else
            400_000 if "BetweenThresholds" in scenario.name else 40_000)
    result = run_scenario(scenario, rng, runs)
    assert result.flags(scenario.claimed_epsilon) == scenario.broken, result


def test_suite_contains_at_least_three_broken_sparse_vector_variants():
    broken = [s for s in SCENARIOS if s.broken and "AboveThreshold" in s.name]
    assert len(broken) >= 3


def test_clopper_pearson_contains_the_estimate_and_bound_is_zero_for_equal_counts():
    lo, hi = clopper_pearson(30, 100, 0.05)
    assert lo < 0.3 < hi
    assert epsilon_lower_bound(500, 1000, 500, 1000).epsilon_lower_bound == 0.0
