"""Registering a model is bounded work for every kind (issue 43, attack item 4).

Before: the predictor registration
``{"budget": {"epsilon": 0.049, "delta": 1e-12}, "params": {"kind": "predictor",
"examples": 100000000, "v_max": 997}, "dimension": 3}`` made the registration check
(``config_problem``, which the worker runs on its event loop and ``dpstream models
register`` runs locally) calibrate BetweenThresholds at a noise scale of ~30,000 votes:
18 s and 2.5 GB, for anyone allowed to register a model. The calibration's work grows
with the noise scale b (lanes over 40 b around each threshold), and nothing bounded b.

Now a predictor has at most ``MAX_BLOCKS`` blocks, so b is at most MAX_BLOCKS / 8 votes
(a vote of k blocks holds no more: learners/predictor.py, ``PredictorConfig``), the
search for b takes O(log) steps (``_first_fitting``) and the psi search reads a band of
lanes that does not grow with b (mechanisms/bt_epoch.py, ``_grid``).

The measure is not a clock: the Python steps the check executes (line events in
dpstream's own code plus every function call anywhere) and the peak memory it
allocates (tracemalloc; numpy reports its arrays to it). Every numpy call works on
arrays no larger than that peak, so the two bound the work. The old code's predictor
check above peaks at ~2.5 GB. Measured now (the worst of each kind): predictor 174,000
steps and 77 MB (0.5 s of CPU here), dp_ftrl 363,000 steps (its zCDP bisection) and
0.1 MB, continual_winnow 49,000, winnow 7,400, decision_list 3,300; the bounds are ~2x
the largest.
"""
import sys
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import dp_accounting  # noqa: F401 - imported on first use by the zCDP accountant: not the check's work
import pytest

import dpstream.learners.predictor as predictor_learner
import dpstream.mechanisms.between_thresholds as bt
import dpstream.mechanisms.bt_epoch as bt_epoch
from dpstream.agents.kinds import KINDS, kind
from dpstream.learners.dp_winnow import MAX_DRAWS, DPWinnow
from dpstream.learners.predictor import MAX_BLOCKS
from dpstream.mechanisms.params import dp_winnow_practical_parameters
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig

ROOT = str(Path(bt.__file__).resolve().parents[1])      # dpstream's own sources
MAX_STEPS = 800_000               # Python line and call events of one registration check
MAX_PEAK_BYTES = 160 * 2 ** 20    # memory it allocates at its peak


def cfg(kind_params: dict, epsilon: float, delta: float, dimension: int = 3, **extra) -> dict:
    return {"model_id": "worst", "budget": {"epsilon": epsilon, "delta": delta},
            "dimension": dimension, "params": kind_params, **extra}


# The costliest registrations we know of, per kind: what makes each kind's check work
# hardest within the schema's limits (the sizing search at its largest noise scale, the
# largest factorizations and rule families). Every kind of the registry must appear.
WORST = {
    "predictor": [
        cfg({"kind": "predictor", "examples": 100_000_000, "v_max": 997}, 0.049, 1e-12),  # the attack
        cfg({"kind": "predictor", "examples": 100_000_000}, 0.0294, 1e-6),    # large b, v_max ladder
        cfg({"kind": "predictor", "examples": 100_000_000, "v_max": 1}, 0.0249, 1e-6),  # k = MAX_BLOCKS
        cfg({"kind": "predictor", "examples": 100_000_000}, 0.0636, 1e-12),
        cfg({"kind": "predictor", "k": MAX_BLOCKS, "m": 10}, 0.0636, 1e-12),  # v_max from the ladder
        cfg({"kind": "predictor", "examples": 100_000_000, "v_max": 100_000}, 2.04, 1e-12),
        cfg({"kind": "predictor", "examples": 100_000_000, "accounting": "instance"}, 0.3, 1e-9),
        cfg({"kind": "predictor", "examples": 100_000_000}, 1e-9, 1e-300),   # refused at once
        cfg({"kind": "predictor", "k": 100, "m": 10, "v_max": 1}, 1000.0, 1e-6),   # looped forever
        cfg({"kind": "predictor", "k": 100, "m": 10, "v_max": 1, "accounting": "instance"}, 1e6, 1e-6),
        cfg({"kind": "predictor", "k": 100, "m": 10}, 1e6, 0.99),
    ],
    "winnow": [
        cfg({"kind": "winnow", "mode": "theory", "rho": 1e-3, "T": 10 ** 18}, 0.99, 1e-300, 16_000),
        cfg({"kind": "winnow", "mode": "theory", "rho": 0.5, "T": 10 ** 18, "c": 0.49}, 1e-9, 1e-300),
        cfg({"kind": "winnow", "mode": "theory", "rho": 1e-300, "T": 10 ** 21}, 1e-9, 1e-300),
        cfg({"kind": "winnow", "eps_hat": 1e-9, "eta": 1e-9, "m": MAX_DRAWS, "K": 10 ** 12,
             "L": 1.0}, 10.0, 1e-6, 16_000),
    ],
    "continual_winnow": [
        cfg({"kind": "continual_winnow", "horizon": 10 ** 9, "block": 1, "max_active": 3}, 1e-6, 1e-300),
        cfg({"kind": "continual_winnow", "horizon": 10 ** 9, "block": 1, "max_active": 3}, 1e6, 0.99),
        cfg({"kind": "continual_winnow", "horizon": 10 ** 9, "block": 1, "max_active": 3}, 1e-3, 1e-12),
    ],
    "decision_list": [
        cfg({"kind": "decision_list", "window": 10 ** 7, "max_conjunction": 3}, 1e-9, 0.5, 50),
        cfg({"kind": "decision_list", "window": 10 ** 7, "max_conjunction": 3,
             "accounting": "advanced"}, 1e6, 1e-300, 50),
        cfg({"kind": "decision_list", "window": 10 ** 7, "max_conjunction": 3,
             "accounting": "basic"}, 1.0, 1e-6, 50),
    ],
    "dp_ftrl": [
        cfg({"kind": "dp_ftrl", "horizon": 10 ** 9, "block": 1}, 1e6, 0.99),
        cfg({"kind": "dp_ftrl", "horizon": 10 ** 9, "block": 1, "mechanism": "tree"}, 1e-6, 1e-300),
        cfg({"kind": "dp_ftrl", "horizon": 10 ** 9, "block": 1}, 1e-3, 1e-12),
    ],
}


@dataclass
class Work:
    steps: int          # line events in dpstream's code + calls anywhere
    peak_bytes: int     # tracemalloc's peak over the check
    problem: str | None


def registration_work(raw: dict) -> Work:
    """The registration check of ``raw`` (as the worker and ``models register`` run it),
    measured in steps and peak bytes, from cold caches."""
    for cached in (bt.neighbour_lanes, bt._privacy_profile, bt_epoch._grid, bt_epoch.epoch_epsilon,
                   bt_epoch.calibrate_epoch, predictor_learner.smallest_k,
                   predictor_learner.size_predictor):
        cached.cache_clear()
    config = ModelConfig.model_validate(raw)
    steps = 0

    def local(frame, event, arg):
        nonlocal steps
        steps += 1
        return local

    def tracer(frame, event, arg):
        nonlocal steps
        steps += 1
        return local if frame.f_code.co_filename.startswith(ROOT) else None

    tracemalloc.start()
    sys.settrace(tracer)
    try:
        problem = kind(config.kind).config_problem(config)
    finally:
        sys.settrace(None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return Work(steps, peak, problem)


def test_every_kind_of_the_registry_has_its_worst_registrations_listed():
    assert set(WORST) == set(KINDS)


@pytest.mark.parametrize("raw", [r for rows in WORST.values() for r in rows],
                         ids=lambda r: f"{r['params']['kind']}-{r['budget']['epsilon']:g}")
def test_the_costliest_registration_of_every_kind_is_bounded_work(raw):
    work = registration_work(raw)
    assert work.steps <= MAX_STEPS, work
    assert work.peak_bytes <= MAX_PEAK_BYTES, work


def test_the_attackers_predictor_is_refused_at_once_naming_the_limit():
    """Before: accepted after 18 s (and 2.5 GB) of calibration."""
    work = registration_work(WORST["predictor"][0])
    assert f"more blocks than the {MAX_BLOCKS:,} a predictor may have" in work.problem
    assert "docs/limits.md" in work.problem
    assert work.steps <= 20_000, work


def test_a_registered_k_whose_budget_needs_more_than_the_limit_is_told_the_limit():
    """Without the limit named, the calibration's own refusal asked for "k >= about
    29940", which the schema no longer takes."""
    work = registration_work(cfg({"kind": "predictor", "k": MAX_BLOCKS, "m": 10, "v_max": 64}, 0.05, 1e-6))
    assert f"more blocks than the {MAX_BLOCKS:,} a predictor may have" in work.problem
    assert work.steps <= MAX_STEPS and work.peak_bytes <= MAX_PEAK_BYTES, work


def test_winnow_draws_are_a_public_limit_in_both_modes():
    """Before: practical mode took any m (10^12 registered, and the first update asked
    numpy for 8 TB of draws: a dead letter for a valid example, or the host's memory at
    m ~ 10^9); theory mode's m grows with log(1/rho) (8e14 at rho = 1e-6)."""
    with pytest.raises(ValueError, match="less than or equal to 1048576"):
        ModelConfig.model_validate(cfg({"kind": "winnow", "eps_hat": 1e-9, "eta": 1e-9, "m": MAX_DRAWS + 1,
                                        "K": 10, "L": 1.0}, 10.0, 1e-6))
    work = registration_work(cfg({"kind": "winnow", "mode": "theory", "rho": 0.01, "T": 10 ** 18},
                                 0.5, 1e-12, 1000))       # Theorem 11's m: 14,958,352
    assert f"more than the {MAX_DRAWS:,} DP-Winnow may draw" in work.problem, work
    assert registration_work(cfg({"kind": "winnow", "mode": "theory", "rho": 0.1, "T": 10 ** 18},
                                 0.5, 1e-12, 1000)).problem is None


def test_an_update_at_the_draw_limit_takes_bounded_memory():
    """One re-sample of MAX_DRAWS draws: about a dozen m-long 8-byte arrays at its peak
    (~100 MB, docs/limits.md); the limit is what keeps that bounded."""
    params = dp_winnow_practical_parameters(eps_hat=1.0, eta=0.01, m=MAX_DRAWS, K=3, L=1.0,
                                            delta=1e-6, rho=0.1, c=0.25, T=1000, beta=0.01)
    model = DPWinnow(params=params, d=1000, rng=KeyedRandomness(b"draw-limit-key-0123456789abcdef!"),
                     model_id="draws", budget=(1e9, 1e-6))
    tracemalloc.start()
    try:
        model._resample()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert int(model.state.tilde_cnt.sum()) == MAX_DRAWS
    assert peak <= 16 * 8 * MAX_DRAWS, peak


def test_a_registered_k_too_small_is_told_a_k_that_is_accepted():
    """The calibration's own message estimated the blocks needed from a wide gap's noise
    and overshot: k = 600 at eps 1, v_max 64 was told "k >= about 1497", and 646 is
    accepted. The refusal now names a k that the same registration takes."""
    import re
    work = registration_work(cfg({"kind": "predictor", "k": 600, "m": 56, "v_max": 64}, 1.0, 1e-6))
    found = re.search(r"needs k >= ([\d,]+) blocks", work.problem or "")
    assert found, work.problem
    k = int(found.group(1).replace(",", ""))
    assert 600 < k < 1000
    assert registration_work(cfg({"kind": "predictor", "k": k, "m": 56, "v_max": 64}, 1.0, 1e-6)).problem is None
    assert registration_work(cfg({"kind": "predictor", "k": k - 20, "m": 56, "v_max": 64}, 1.0, 1e-6)).problem


def test_an_intervals_block_beyond_its_points_limit_is_refused_before_any_fit():
    """An attacker's pass: k = 32 intervals blocks of 10,000 examples were accepted, and the
    epoch start asked numpy for ~500 GB (every pair of points against every point); the
    model stayed ``learning`` for good."""
    from dpstream.agents.kinds.predictor import INTERVAL_POINTS
    problem = registration_work(cfg({"kind": "predictor", "generator": "intervals", "k": 32, "m": 10_000,
                                     "v_max": 1}, 8.0, 1e-6, dimension=1)).problem
    assert f"so at most {INTERVAL_POINTS}" in problem and "10,001 points" in problem
    assert registration_work(cfg({"kind": "predictor", "generator": "intervals", "k": 40, "m": 200,
                                  "v_max": 4}, 8.0, 1e-6, dimension=1)).problem is None
