"""Privacy accounting: composition theorems and the per-model ledger.

* Basic composition: (sum eps_i, sum delta_i).
* Advanced composition, seed 001 Theorem 3 (Dwork, Rothblum, Vadhan 2010): k
  mechanisms, each (eps, delta)-DP, compose to (eps', k delta + delta') with
  eps' = sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1)/(e^eps + 1).
* Its heterogeneous form (Kairouz, Oh, Viswanath 2015 / Dwork-Roth Thm 3.20 proof):
  eps' = sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1)/(e^eps_i + 1),
  equal to Theorem 3 when all eps_i are equal. (e^x - 1)/(e^x + 1) = tanh(x/2).

The ledger charges each mechanism invocation before its release and refuses a
charge that would exceed the budget (fail closed). Validity of composing with a
data-dependent number of invocations: every model charges a *fixed* schedule of
amounts fixed by its config (for example eps^ per AboveThreshold instance), so the
index at which the budget runs out is data-independent; stopping earlier equals
running no-op mechanisms, which the fixed-horizon theorem covers. Data-dependent
charge *amounts* would need a privacy filter (Rogers et al. 2016) and are not used.

* zCDP (Bun and Steinke 2016): rho_i add up under adaptive composition; a pure eps-DP
  charge is eps^2/2-zCDP (their Proposition 1.4) and a charge may state a tighter rho
  (e.g. an exponential-mechanism draw that is eps-bounded-range is eps^2/8-zCDP, Cesar and
  Rogers 2021). The total converts to (eps, delta) with Google's ``dp-accounting`` RDP
  accountant (:func:`zcdp_epsilon`). Used only while every charge so far has a rho.

The ledger state is a few running sums (no per-entry list), so it fits in a table
record and the changelog traffic per charge is constant.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Literal

from .errors import BudgetExhausted, InfeasibleParameters, ParameterError

Rule = Literal["basic", "advanced", "best"]


@dataclass(frozen=True)
class PrivacyCost:
    """An (epsilon, delta) pair."""
    epsilon: float
    delta: float = 0.0

    def __post_init__(self):
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)):
            raise ParameterError("epsilon", self.epsilon, "a finite number >= 0")
        if not 0 <= self.delta <= 1:
            raise ParameterError("delta", self.delta, "in [0, 1]")


ZCDP_ORDERS = tuple([1 + x / 20 for x in range(1, 100)] + [6 + 0.5 * x for x in range(117)]
                    + [80, 128, 256, 512, 1024])


@lru_cache(maxsize=1024)
def _totals(rule, charges, sum_eps, sum_delta, sum_eps_sq, sum_eps_tanh, delta_prime,
            rho_complete, sum_rho, budget_delta) -> "PrivacyCost":
    """Ledger.totals as a pure function of the sums (memoised: every published record
    quotes the spent budget, which changes only when a charge is made)."""
    basic = PrivacyCost(sum_eps, min(1.0, sum_delta))
    if rule == "basic" or charges == 0:
        return basic
    adv = advanced_composition_sums(sum_eps_sq, sum_eps_tanh, sum_delta, delta_prime)
    if rule == "advanced":
        return adv
    options = [basic, adv]
    if rho_complete and sum_delta == 0 and budget_delta > 0:
        options.append(PrivacyCost(zcdp_epsilon(sum_rho, budget_delta), budget_delta))
    fits = [c for c in options if c.delta <= budget_delta]
    return min(fits or options, key=lambda c: c.epsilon)


def preload() -> None:
    """Import dp-accounting now rather than at the first calibration. A long-running
    process calls this at start: the import took 0.8-1.0 s here, and the worker's first
    registration (feasibility calibrates on the event loop) held every partition's
    events that long (bench/trace_worker.py: one 1,006 ms stall, seconds of backlog)."""
    import dp_accounting.rdp.rdp_privacy_accountant  # noqa: F401


@lru_cache(maxsize=4096)
def zcdp_epsilon(rho: float, delta: float) -> float:
    """(epsilon at delta) of a rho-zCDP mechanism: its RDP curve is rho * alpha at every
    order alpha (what dp-accounting's RdpAccountant composes for a ``ZCDpEvent``), converted
    by dp-accounting's ``compute_epsilon`` (CKS 2020 Proposition 12) over a fixed grid of
    orders. Calling the conversion directly keeps a calibration's bisection in milliseconds."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    if rho == 0:
        return 0.0
    eps, _ = compute_epsilon(ZCDP_ORDERS, [rho * a for a in ZCDP_ORDERS], delta)
    return float(eps)


@lru_cache(maxsize=1024)
def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest rho whose (epsilon at delta) by ``zcdp_epsilon`` is at most ``epsilon``
    (bisection: zcdp_epsilon is increasing in rho), rounded down by 1e-12 relative."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError("epsilon", epsilon, "a finite number > 0")
    lo, hi = 0.0, max(1.0, epsilon)
    while zcdp_epsilon(hi, delta) <= epsilon:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if zcdp_epsilon(mid, delta) <= epsilon else (lo, mid)
    if lo <= 0:         # before: rho 0, then a division by zero wherever sigma was derived
        raise InfeasibleParameters(f"epsilon={epsilon} at delta={delta} allows no zCDP rho above "
                                   f"{hi:.3g}: raise epsilon or delta")
    return lo * (1 - 1e-12)


def basic_composition(costs) -> PrivacyCost:
    """Basic composition (Dwork and Roth Thm 3.16): epsilons and deltas add."""
    costs = list(costs)
    return PrivacyCost(sum(c.epsilon for c in costs), min(1.0, sum(c.delta for c in costs)))


def advanced_composition(epsilon: float, delta: float, k: int, delta_prime: float) -> PrivacyCost:
    """Seed 001 Theorem 3, exactly as stated."""
    if k < 0:
        raise ParameterError("k", k, ">= 0")
    if not 0 < delta_prime < 1:
        raise ParameterError("delta_prime", delta_prime, "in (0, 1)")
    # (e^eps - 1)/(e^eps + 1) is tanh(eps/2); written as the theorem has it where e^eps is
    # finite, and as 1.0 (its value to double precision) beyond: e^eps overflowed there
    ratio = (math.exp(epsilon) - 1) / (math.exp(epsilon) + 1) if epsilon < 700 else 1.0
    eps = math.sqrt(2 * k * math.log(1 / delta_prime)) * epsilon + k * epsilon * ratio
    return PrivacyCost(eps, min(1.0, k * delta + delta_prime))


def advanced_composition_sums(sum_eps_sq: float, sum_eps_tanh: float, sum_delta: float,
                              delta_prime: float) -> PrivacyCost:
    """Heterogeneous advanced composition from running sums."""
    eps = math.sqrt(2 * math.log(1 / delta_prime) * sum_eps_sq) + sum_eps_tanh
    return PrivacyCost(eps, min(1.0, sum_delta + delta_prime))


def solve_per_instance_epsilon(total_epsilon: float, k: int, delta_prime: float) -> float:
    """The largest eps with advanced_composition(eps, ., k, delta') <= total_epsilon
    (bisection; the left side is increasing in eps)."""
    if k < 1:
        raise ParameterError("k", k, ">= 1")
    lo, hi = 0.0, total_epsilon
    for _ in range(200):
        mid = (lo + hi) / 2
        if advanced_composition(mid, 0.0, k, delta_prime).epsilon <= total_epsilon:
            lo = mid
        else:
            hi = mid
    return lo * (1 - 1e-12)


@dataclass
class LedgerState:
    """Running sums of one model's charges (a table record)."""
    budget_epsilon: float
    budget_delta: float
    rule: Rule = "best"
    delta_prime: float = 0.0            # slack of advanced composition (part of budget_delta)
    charges: int = 0
    sum_eps: float = 0.0
    sum_delta: float = 0.0
    sum_eps_sq: float = 0.0
    sum_eps_tanh: float = 0.0
    exhausted: bool = False
    sum_rho: float = 0.0                # zCDP of the charges so far, while every one has a rho
    rho_complete: bool = True


@dataclass(frozen=True)
class LedgerEntry:
    """One charge as the ledger records it, with the running totals after it."""
    mechanism: str
    epsilon: float
    delta: float
    count: int
    charges: int                 # number of charges so far, this one included
    spent_epsilon: float
    spent_delta: float
    rule: str
    rho: float | None = None     # zCDP of one invocation, when known

    def as_dict(self) -> dict:
        return asdict(self)


def spent(record: "LedgerState | dict | None") -> PrivacyCost:
    """What a ledger record has spent under its declared rule ((0, 0) before any charge).
    The one place "spent" is computed: handlers, predictions, the status view and replay
    all ask it."""
    if record is None:
        return PrivacyCost(0.0, 0.0)
    s = record if isinstance(record, LedgerState) else LedgerState(**record)
    return _totals(s.rule, s.charges, s.sum_eps, s.sum_delta, s.sum_eps_sq, s.sum_eps_tanh,
                   s.delta_prime, s.rho_complete, s.sum_rho, s.budget_delta)


@dataclass
class Ledger:
    """Per-model privacy ledger with a hard cap: the one way a charge is made (a learner
    holds one for its epoch; ``on_entry`` callbacks publish each entry).

    >>> led = Ledger.create(epsilon=1.0, delta=1e-6, rule="basic")
    >>> led.charge("laplace", 0.4).spent_epsilon
    0.4
    >>> led.charge("laplace", 0.7)
    Traceback (most recent call last):
    ...
    dpstream.mechanisms.errors.BudgetExhausted: privacy budget exhausted: laplace asked for eps=0.7, ...
    """
    state: LedgerState
    on_entry: list = field(default_factory=list, repr=False)

    @classmethod
    def create(cls, *, epsilon: float, delta: float, rule: Rule = "best",
               delta_prime: float | None = None) -> "Ledger":
        if not epsilon > 0:
            raise ParameterError("epsilon", epsilon, "> 0")
        if not 0 <= delta < 1:
            raise ParameterError("delta", delta, "in [0, 1)")
        if rule not in ("basic", "advanced", "best"):
            raise ParameterError("rule", rule, "'basic', 'advanced' or 'best'")
        if delta_prime is None:
            delta_prime = delta / 2 if rule != "basic" else 0.0
        if rule != "basic" and not 0 < delta_prime <= delta:
            raise ParameterError("delta_prime", delta_prime, f"in (0, delta={delta}] for rule {rule!r}")
        return cls(LedgerState(epsilon, delta, rule, delta_prime))

    def totals(self, s: LedgerState | None = None) -> PrivacyCost:
        """Spent (eps, delta) under the declared rule ('best': the smaller valid eps)."""
        return spent(self.state if s is None else s)

    def remaining(self) -> PrivacyCost:
        t = self.totals()
        return PrivacyCost(max(0.0, self.state.budget_epsilon - t.epsilon),
                           max(0.0, self.state.budget_delta - t.delta))

    def can_charge(self, epsilon: float, delta: float = 0.0, count: int = 1,
                   rho: float | None = None) -> bool:
        trial = self._after(epsilon, delta, count,
                            epsilon * epsilon / 2 if rho is None and delta == 0 else rho)
        t = self.totals(trial)
        return t.epsilon <= self.state.budget_epsilon and t.delta <= self.state.budget_delta

    def charge(self, mechanism: str, epsilon: float, delta: float = 0.0, count: int = 1,
               rho: float | None = None) -> LedgerEntry:
        """Record ``count`` invocations of an (eps, delta)-DP mechanism, each rho-zCDP when
        ``rho`` is given (a pure-DP charge defaults to eps^2/2), or raise
        :class:`BudgetExhausted` and leave the ledger unchanged but marked exhausted."""
        PrivacyCost(epsilon, delta)
        # plain floats: the sums are state (JSON records; a numpy scalar is not JSON)
        epsilon, delta = float(epsilon), float(delta)
        rho = None if rho is None else float(rho)
        if count < 1:
            raise ParameterError("count", count, ">= 1")
        if rho is None and delta == 0:
            rho = epsilon * epsilon / 2
        if rho is not None and not (rho >= 0 and math.isfinite(rho)):
            raise ParameterError("rho", rho, "a finite number >= 0")
        trial = self._after(epsilon, delta, count, rho)
        t = self.totals(trial)
        if t.epsilon > self.state.budget_epsilon or t.delta > self.state.budget_delta:
            spent = self.totals()
            self.state.exhausted = True
            raise BudgetExhausted(mechanism=mechanism, requested=(epsilon * count, delta * count),
                                  spent=(spent.epsilon, spent.delta),
                                  budget=(self.state.budget_epsilon, self.state.budget_delta))
        self.state = trial
        entry = LedgerEntry(mechanism, epsilon, delta, count, trial.charges, t.epsilon, t.delta,
                            trial.rule, rho)
        for callback in self.on_entry:
            callback(entry)
        return entry

    def _after(self, epsilon: float, delta: float, count: int, rho: float | None) -> LedgerState:
        s = self.state
        return LedgerState(
            s.budget_epsilon, s.budget_delta, s.rule, s.delta_prime, s.charges + 1,
            s.sum_eps + count * epsilon, s.sum_delta + count * delta,
            s.sum_eps_sq + count * epsilon * epsilon,
            s.sum_eps_tanh + count * epsilon * math.tanh(epsilon / 2), s.exhausted,
            s.sum_rho + count * (rho or 0.0), s.rho_complete and rho is not None)
