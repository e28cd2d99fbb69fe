"""The registration check agrees with the worker at extreme budgets (issue 43; docs/limits.md
"What a registration may ask for").

Before: ``{"model_id": "f", "dimension": 10, "budget": {"epsilon": 1e-4, "delta": 1e-6},
"params": {"kind": "dp_ftrl", "horizon": 1000}}`` passed ``config_problem`` (so ``dpstream
models register`` said "sent" and ``models list`` showed it live), and the worker
dead-lettered it at its first event: the calibrated rho (9.5e-13) is one dp-accounting
certifies as epsilon 0 (its KL bound), and the epoch ledger refused a budget of epsilon 0
(``ParameterError at mechanisms/accounting.py:223``). The same grid found three more:
dp_ftrl over 10^9 blocks with delta 0.5 took 8 GB at its first example (the prior's
noise read an array of every block's prefix variance: MemoryError after 45 s); DP-Winnow
theory mode accepted an AboveThreshold epsilon (1e-13) its first event refuses; and
decision_list's check raised OverflowError / ZeroDivisionError (not a reason) at epsilon
600..1e6. Now each is refused by the check with a reason, or runs.

For every kind's costliest params (test_registration_work.WORST) and a grid of extreme
budgets: either ``config_problem`` refuses it, or the embedded runtime (the worker's
sequencer and processor) accepts the registration and answers one example and one query
with no dead letter. Predictor configs at epsilon >= 600 or delta 0.999 are in the grid
too: before, their calibration never ended (mechanisms/between_thresholds.py ``_common_u``
at noise far below one count).
"""
import asyncio
import copy

import pytest

from dpstream.agents.kinds import kind
from dpstream.mechanisms.randomness import KeyedRandomness
from dpstream.schemas import ModelConfig
from dpstream.streams.tools.embedded import EmbeddedRuntime

from .test_registration_work import WORST

RNG = KeyedRandomness(b"registration-agrees-test-key-000")
EPSILONS = (1e-300, 1e-4, 3e-3, 1.0, 600.0, 1e6)
DELTAS = (0.0, 1e-300, 1e-6, 0.5, 0.999)


def grid(kind_name: str) -> list[dict]:
    out, seen = [], set()
    for base in WORST[kind_name]:
        shape = repr((base["params"], base["dimension"]))
        if shape in seen:           # the budget is the grid's: one row per params
            continue
        seen.add(shape)
        for eps in EPSILONS:
            for delta in DELTAS:
                raw = copy.deepcopy(base)
                raw["budget"] = {"epsilon": eps, "delta": delta}
                out.append(raw)
    return out


def one_of_each(config: ModelConfig) -> dict:
    if config.params.input_form() == "binary":
        return {"active": [0]}
    return {"x": [0.5] * config.dimension}


async def verdict(raw: dict) -> tuple[str | None, dict]:
    config = ModelConfig.model_validate(raw)
    problem = kind(config.kind).config_problem(config)
    if problem:
        return problem, {}
    rt = EmbeddedRuntime(RNG)
    row = one_of_each(config)
    await rt.feed("models", raw)
    await rt.feed("examples", {"model_id": raw["model_id"], **row, "y": 1})
    await rt.feed("queries", {"model_id": raw["model_id"], **row, "query_id": "q"})
    return None, rt.outputs


@pytest.mark.parametrize("kind_name", sorted(WORST))
def test_every_extreme_budget_is_refused_by_the_check_or_runs(kind_name):
    failures = []
    for raw in grid(kind_name):
        problem, outputs = asyncio.run(verdict(raw))
        if problem:
            assert isinstance(problem, str) and problem.strip(), raw
            continue
        answered = [p["kind"] for p in outputs.get("predictions", [])]
        if outputs.get("rejected") or answered != ["example", "query"]:
            failures.append((raw["params"], raw["budget"], outputs.get("rejected"), answered))
    assert not failures, failures[:5]


def test_the_testers_dp_ftrl_registration_is_refused_naming_epsilon():
    """Before: config_problem returned None; the worker dead-lettered the registration
    "not applied: the model could not process this event"."""
    raw = {"model_id": "f", "dimension": 10, "budget": {"epsilon": 1e-4, "delta": 1e-6},
           "params": {"kind": "dp_ftrl", "horizon": 1000}}
    problem, _ = asyncio.run(verdict(raw))
    assert problem.startswith("epsilon=0.0001 at delta=1e-06 is infeasible for dp_ftrl"), problem
    assert "raise epsilon to at least 0.00575" in problem
    rt = EmbeddedRuntime(RNG)
    asyncio.run(rt.feed("models", raw))
    [rejected] = rt.outputs["rejected"]
    assert rejected["reason"] == f"infeasible model config: {problem}"[:500]
