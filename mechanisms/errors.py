"""Typed exceptions for the whole of dpstream.

Every message names the parameter, the value it had, and what was allowed, so a
user can fix the call without reading the source (diffprivlib / OpenDP style).
Messages never carry raw features, labels or keys.
"""


class DPStreamError(Exception):
    """Base class of every error this project raises on purpose."""


class ParameterError(DPStreamError, ValueError):
    """A parameter is outside the range its theorem or algorithm allows."""

    def __init__(self, name: str, value: object, allowed: str):
        self.name, self.value, self.allowed = name, value, allowed
        super().__init__(f"{name}={value!r} is not allowed: expected {allowed}")


class InfeasibleParameters(DPStreamError, ValueError):
    """The requested privacy/accuracy targets have no valid parameter setting."""


class ThresholdsTooClose(InfeasibleParameters):
    """BetweenThresholds: the gap between the thresholds is too small for the noise scale."""


class ScaleAboveLimit(InfeasibleParameters):
    """BetweenThresholds: the budget needs more noise than the caller's ``max_scale`` (a
    bound on the calibration's work, which grows with the scale)."""


class MissingKeyError(DPStreamError, RuntimeError):
    """No secret key is configured; privacy-relevant randomness refuses to fall back to the OS."""


class BudgetExhausted(DPStreamError):
    """A charge would exceed the ledger's budget; the release was not made (fail closed)."""

    def __init__(self, *, mechanism: str, requested: tuple[float, float],
                 spent: tuple[float, float], budget: tuple[float, float]):
        self.mechanism, self.requested, self.spent, self.budget = mechanism, requested, spent, budget
        super().__init__(
            f"privacy budget exhausted: {mechanism} asked for eps={requested[0]:.6g}, "
            f"delta={requested[1]:.3g}; spent eps={spent[0]:.6g}, delta={spent[1]:.3g} "
            f"of budget eps={budget[0]:.6g}, delta={budget[1]:.3g}; "
            f"remaining eps={max(budget[0] - spent[0], 0.0):.6g}, "
            f"delta={max(budget[1] - spent[1], 0.0):.3g}")


class MechanismHalted(DPStreamError, RuntimeError):
    """A sparse-vector instance was queried after it halted (its privacy proof ends there)."""
