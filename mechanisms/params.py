"""The papers' privacy parameter formulas. Each parameter is computed in exactly
one function here, with its derivation; learners and agents ask these functions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting import (PrivacyCost, advanced_composition, solve_per_instance_epsilon,
                         zcdp_epsilon)
from .above_threshold import above_threshold_scales
from .errors import InfeasibleParameters, ParameterError
from .participation import group_member_budget


def _check_eps_delta(epsilon: float, delta: float, *, strict_unit: bool = False) -> None:
    if not (epsilon > 0 and math.isfinite(epsilon)) or (strict_unit and epsilon >= 1):
        raise ParameterError("epsilon", epsilon, "in (0, 1)" if strict_unit else "> 0")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")


# --------------------------------------------------------------------------- DP-Winnow
def winnow_update_bound(d: int, eta: float, rho: float, c: float) -> float:
    """Seed 000 Lemma 9: ConfidentWinnow makes at most ln d / ((1-c) eta rho - eta^2/2)
    updates on rho-margin data (c < 1/2); Lemma 14 carries it to DP-Winnow."""
    if d < 2:
        raise ParameterError("d", d, ">= 2")
    if not 0 < rho <= 1:
        raise ParameterError("rho", rho, "in (0, 1]")
    if not 0 <= c < 0.5:
        raise ParameterError("c", c, "in [0, 1/2) (Lemma 9)")
    if not eta > 0:
        raise ParameterError("eta", eta, "> 0")
    den = (1 - c) * eta * rho - eta * eta / 2
    if den <= 0:
        raise InfeasibleParameters(
            f"eta={eta:.6g} is too large for rho={rho}, c={c}: Lemma 9 needs "
            f"(1-c) eta rho - eta^2/2 > 0, i.e. eta < {2 * (1 - c) * rho:.6g}")
    return math.log(d) / den


def dp_winnow_sample_size(T: int, beta: float, c: float, rho: float) -> int:
    """m, the number of draws forming w~ (the seed leaves m open; docs/privacy.md, "DP-Winnow").

    For x in {-1,1}^d, <w~, x> is the mean of m i.i.d. draws x_{j_i} in {-1, 1} with
    mean <w, x>. Hoeffding: P(|<w~,x> - <w,x>| >= c rho) <= 2 exp(-m (c rho)^2 / 2).
    A union bound over T rounds at total failure beta gives
    m = ceil(2 ln(2T/beta) / (c rho)^2), so that w~ agrees with w on every confident
    prediction (Lemma 13's event)."""
    if T < 1:
        raise ParameterError("T", T, ">= 1")
    if not 0 < beta < 1:
        raise ParameterError("beta", beta, "in (0, 1)")
    if not 0 < c < 0.5:
        raise ParameterError("c", c, "in (0, 1/2)")
    if not 0 < rho <= 1:
        raise ParameterError("rho", rho, "in (0, 1]")
    try:
        log_term = math.log(2 * T / beta)
    except OverflowError:               # T past 10^300: the same logarithm, in two parts
        log_term = math.log(2 / beta) + math.log(T)
    m = 2 * log_term / (c * rho) ** 2 if (c * rho) ** 2 > 0 else math.inf
    if not math.isfinite(m):            # before: ZeroDivisionError or OverflowError
        raise ParameterError("rho", rho, f"large enough that m = 2 ln(2T/beta) / (c rho)^2 is finite "
                                         f"(c={c}, T={T}, beta={beta})")
    return math.ceil(m)


def dp_winnow_threshold(T: int, beta: float, eps_hat: float) -> float:
    """L = 8 ln(2T^2/beta) / eps^ (docs/privacy.md, "DP-Winnow"): AboveThreshold's accuracy
    alpha = 8(ln T + ln(2/(beta/T)))/eps^ with T queries per instance at failure
    beta/T (the seed's InitializeAboveThr(eps^, L, beta/T)), so with probability
    1 - beta no instance fires while its mistake count is 0: the cache is non-empty
    at every fire. Lemma 10's 16 ln(2T^2/beta)/eps^ mistakes per update is L + alpha."""
    try:
        log_term = math.log(2 * T * T / beta)
    except OverflowError:               # T past 10^154: the same logarithm, in parts
        log_term = math.log(2 / beta) + 2 * math.log(T)
    return 8 * log_term / eps_hat


def dp_winnow_draw_rho(eta: float) -> float:
    """zCDP of one weight draw: 2 eta^2. A draw picks j with probability proportional to
    exp(eta u_j); replacing one example moves every u_j by some d_j in [-2, 2], so every
    log-probability moves by eta d_j minus a common normaliser shift: the log-ratios lie
    in an interval of width 4 eta, i.e. the draw is 4 eta-bounded-range, which is
    (4 eta)^2 / 8-zCDP (Cesar and Rogers 2021, bounded-range composition)."""
    return 2.0 * eta * eta


@dataclass(frozen=True)
class DPWinnowCharges:
    """What one AboveThreshold instance and one weight draw cost a privacy unit
    (``dp_winnow_charges``)."""
    above_threshold: float      # epsilon of one instance (pure DP)
    draw: float                 # epsilon of one weight draw (pure DP)
    draw_rho: float             # zCDP of one weight draw (bounded range)


def dp_winnow_charges(eps_hat: float, eta: float, max_contributions: int = 1) -> DPWinnowCharges:
    """The charges of DP-Winnow's pieces run at the mechanism's eps^ and eta, for a unit of
    k = ``max_contributions`` examples (1: one example).

    * An AboveThreshold instance at eps^ is eps^-DP when its queries (mistake counts)
      have sensitivity 1. A person's k examples move each count by at most k, so the
      instance is k eps^-DP for the person (the privacy loss of the Laplace-noised
      threshold comparisons scales with the shift: group privacy for pure DP, exact).
    * A weight draw w_j ~ exp(eta u_j): one example is the cached update of at most one
      round, moving every u_j by at most 2; k examples move them by at most 2k, so the
      log-probabilities move by eta d_j with d_j in [-2k, 2k] minus a common shift: the
      draw is 4 k eta-DP and 4 k eta-bounded-range, (4 k eta)^2 / 8 = 2 (k eta)^2-zCDP
      (``dp_winnow_draw_rho`` at k eta).
    So the ledger charges k times the mechanism's epsilon, and the person-level parameters
    are eps^_person = k eps^ and eta_person = k eta: the kind runs the mechanism at the
    person's parameters divided by k. For k = 1 these are eps^, 4 eta and 2 eta^2, as always."""
    if not (isinstance(max_contributions, int) and max_contributions >= 1):
        raise ParameterError("max_contributions", max_contributions, "an integer >= 1")
    k = max_contributions
    return DPWinnowCharges(k * eps_hat, 4 * (k * eta), dp_winnow_draw_rho(k * eta))


def dp_winnow_guarantee(*, eps_hat: float, eta: float, m: int, K: int, delta: float,
                        max_contributions: int = 1) -> PrivacyCost:
    """The (eps, delta) that DP-Winnow settings guarantee per privacy unit (one example, or a
    person with k = ``max_contributions`` examples: ``dp_winnow_charges``, eps^ and eta the
    mechanism's): the better of two valid accountings of the same K AboveThreshold
    instances and m K weight draws, each charged as ``dp_winnow_charges`` says.

    1. Seed 000 Theorem 11's proof (its appendix is not in our copy of the seed; this
       reproduces its constants): K instances, each eps^-DP, by advanced composition at
       delta/2: sqrt(2K ln(2/delta)) eps^ + K eps^ tanh(eps^/2); m K draws, each 4 eta-DP
       (changing one example moves each u_j by at most 2: ratio <= e^{2 eta} e^{2 eta}), by
       advanced composition at delta/2. With the theorem's eps^ and eta the first-order
       terms are eps/4 + eps/2; the second-order terms fit in the remaining eps/4.
    2. zCDP: each instance eps^^2/2 (pure DP), each draw 2 eta^2 (bounded range,
       :func:`dp_winnow_draw_rho`), summed and converted at delta by dp-accounting. Its
       floor is 2 m K eta^2: no accountant makes many draws cheap (docs/privacy.md).
    The ledger charges the same amounts and composes them the same two ways ("best").
    Where one accounting's arithmetic leaves double range (K = 10^307 draws, delta/2
    below the smallest double) it counts as infinite and the other decides; where both
    do, InfeasibleParameters names the settings (before: "epsilon=inf" or
    "delta_prime=0.0", values the caller never gave, or an OverflowError)."""
    if K < 1 or m < 1:
        raise ParameterError("K, m", (K, m), ">= 1 each")
    _check_eps_delta(max(eps_hat, 1e-300), delta)
    charge = dp_winnow_charges(eps_hat, eta, max_contributions)
    at = charge.above_threshold

    def composed() -> float:
        return (advanced_composition(at, 0.0, K, delta / 2).epsilon
                + advanced_composition(charge.draw, 0.0, m * K, delta / 2).epsilon)

    def concentrated() -> float:
        return zcdp_epsilon(K * at * at / 2 + m * K * charge.draw_rho, delta)

    epsilon = min(_within_range(composed), _within_range(concentrated))
    if not math.isfinite(epsilon):
        raise InfeasibleParameters(
            "these settings (eps^, eta, m, K, delta) certify no finite privacy loss: lower "
            "eta, eps_hat, m or K, or raise delta")
    return PrivacyCost(epsilon, delta)


def _within_range(bound) -> float:
    """One accounting's epsilon, or inf where its arithmetic overflows or a derived value
    leaves the range its theorem allows (the caller's own values are checked before)."""
    try:
        value = bound()
    except (OverflowError, ParameterError):
        return math.inf
    return value if math.isfinite(value) else math.inf


@dataclass(frozen=True)
class DPWinnowParameters:
    """DP-Winnow's parameters (seed 000 Theorem 11) and the (epsilon, delta) they guarantee."""
    eps_hat: float
    eta: float
    m: int
    K: int
    L: float
    c: float
    rho: float
    T: int
    beta: float
    epsilon: float          # what the settings guarantee per privacy unit (dp_winnow_guarantee)
    delta: float
    source: str             # "theorem-11" or "practical"
    note: str = ""          # a plain warning when the settings cannot learn within T
    max_contributions: int = 1   # k: a person's examples (1: the unit is one example);
    # eps_hat and eta above are the mechanism's: a person's are k times them (dp_winnow_charges)

    def charges(self) -> DPWinnowCharges:
        """What one AboveThreshold instance and one weight draw are charged."""
        return dp_winnow_charges(self.eps_hat, self.eta, self.max_contributions)


def dp_winnow_theorem_settings(*, epsilon: float, delta: float, rho: float, T: int,
                               beta: float, d: int, c: float = 0.25,
                               max_contributions: int = 1) -> tuple[float, float, int, int]:
    """(eps^, eta, m, K) exactly as seed 000 Theorem 11 and Lemma 14 state them, solved jointly.

    eps^ = eps / (4 sqrt(2K ln(2/delta))), eta = eps / (8 sqrt(2 m K ln(2/delta))) and
    K = ln d / ((1-c) eta rho - eta^2/2) depend on each other. Write eta = a / sqrt(K)
    with a = eps / (8 sqrt(2 m ln(2/delta))); then g(K)/K = ln d / ((1-c) a rho sqrt(K)
    - a^2/2) is decreasing in K, so K = g(K) has one solution K*, found by bisection;
    K = ceil(K*) keeps "k < K never violated" (Lemma 14) since g(K)/K <= 1 there.

    For a person with k = ``max_contributions`` examples the theorem's eps^ and eta are
    the person's (each piece's charge, ``dp_winnow_charges``) and the mechanism runs at
    them divided by k; Lemma 9's K counts the updates of the learner that actually runs,
    so it is solved with the mechanism's eta = a / (k sqrt(K)): the same solve with a / k.
    Returned: the mechanism's eps^ and eta (k = 1: the theorem's, as always).
    """
    _check_eps_delta(epsilon, delta, strict_unit=True)
    m = dp_winnow_sample_size(T, beta, c, rho)
    if d < 2:
        raise ParameterError("d", d, ">= 2")
    if not (isinstance(max_contributions, int) and max_contributions >= 1):
        raise ParameterError("max_contributions", max_contributions, "an integer >= 1")
    a = epsilon / (8 * math.sqrt(2 * m * math.log(2 / delta)))
    if max_contributions > 1:
        a /= max_contributions

    def excess(K: float) -> float:          # g(K)/K - 1, decreasing in K
        den = (1 - c) * a * rho * math.sqrt(K) - a * a / 2
        return math.inf if den <= 0 else math.log(d) / den - 1

    lo, hi = 1.0, 2.0
    while excess(hi) > 0:
        hi *= 2
        if hi > 1e300:
            raise InfeasibleParameters("no K solves Theorem 11 / Lemma 14 jointly")
    for _ in range(200):
        product = lo * hi               # inf once K* passes 1e154: then the same root in two parts
        mid = math.sqrt(product) if product < math.inf else math.sqrt(lo) * math.sqrt(hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    K = math.ceil(hi)
    eta = a / math.sqrt(K)
    winnow_update_bound(d, eta, rho, c)          # re-checks the denominator
    eps_hat = epsilon / (4 * math.sqrt(2 * K * math.log(2 / delta)))
    if max_contributions > 1:
        eps_hat /= max_contributions
    return eps_hat, eta, m, K


def dp_winnow_theory_parameters(*, epsilon: float, delta: float, rho: float, T: int,
                                beta: float, d: int, c: float = 0.25,
                                max_contributions: int = 1) -> DPWinnowParameters:
    """Theorem 11's settings (:func:`dp_winnow_theorem_settings`) scaled to spend the whole
    budget. The theorem's constants are loose (asked for eps = 0.99 they compose to
    0.75), so eps^ and eta are multiplied by the largest common factor lam >= 1 whose
    settings, with K re-solved from Lemma 14 for the larger eta, still guarantee eps under
    :func:`dp_winnow_guarantee` (bisection on lam). ``note`` says so plainly when the
    AboveThreshold threshold L exceeds T: then the model cannot update even once.

    ``max_contributions`` = k > 1: epsilon is per person; eps^ and eta are the mechanism's
    (the person's divided by k), K is solved with the mechanism's eta, and L with its eps^
    (AboveThreshold's accuracy is the running instance's).
    """
    eps_hat, eta, m, K = dp_winnow_theorem_settings(epsilon=epsilon, delta=delta, rho=rho, T=T,
                                                    beta=beta, d=d, c=c,
                                                    max_contributions=max_contributions)

    def scaled(lam: float):
        e = eta * lam
        k = math.ceil(winnow_update_bound(d, e, rho, c))
        try:
            spent = dp_winnow_guarantee(eps_hat=eps_hat * lam, eta=e, m=m, K=k, delta=delta,
                                        max_contributions=max_contributions).epsilon
        except InfeasibleParameters:        # no finite bound: more than any budget
            spent = math.inf
        return eps_hat * lam, e, k, spent

    lam_lo, lam_hi = 1.0, min(1e6, 0.999 * 2 * (1 - c) * rho / eta)   # keep Lemma 9's denominator > 0
    if scaled(lam_lo)[3] > epsilon * (1 + 1e-9):
        raise InfeasibleParameters(
            f"Theorem 11 settings compose to eps={scaled(lam_lo)[3]:.6g} > requested {epsilon}"
            + (f" (K={K:.3g} updates and m={float(m):.3g} draws each: raise rho or c)"
               if not math.isfinite(scaled(lam_lo)[3]) else ""))
    if scaled(lam_hi)[3] <= epsilon:
        lam_lo = lam_hi
    for _ in range(100):
        mid = math.sqrt(lam_lo * lam_hi)
        lam_lo, lam_hi = (mid, lam_hi) if scaled(mid)[3] <= epsilon else (lam_lo, mid)
    eps_hat, eta, K, spent = scaled(lam_lo)
    L = dp_winnow_threshold(T, beta, eps_hat)
    note = "" if L <= T else (
        f"cannot update within T={T}: each update needs about L={L:.3g} mistakes "
        f"(AboveThreshold at eps^={eps_hat:.3g}) and there are only T rounds")
    return DPWinnowParameters(eps_hat, eta, m, K, L, c, rho, T, beta, spent, delta, "theorem-11", note,
                              max_contributions)


def dp_winnow_practical_parameters(*, eps_hat: float, eta: float, m: int, K: int, L: float,
                                   delta: float, rho: float = 0.1, c: float = 0.25, T: int = 10**6,
                                   beta: float = 0.01, max_contributions: int = 1) -> DPWinnowParameters:
    """User-chosen settings; the returned epsilon is what they actually guarantee.

    ``max_contributions`` = k > 1 (a person): the given eps_hat and eta are the person's
    (what one instance and one draw cost a person, ``dp_winnow_charges``), so the
    mechanism runs at eps_hat / k and eta / k (and learns at eta / k); the guarantee, per
    person, is that of the given values."""
    for name, v in (("eps_hat", eps_hat), ("eta", eta), ("L", L)):
        if not (v > 0 and math.isfinite(v)):
            raise ParameterError(name, v, "a finite number > 0")
    if m < 1 or K < 1:
        raise ParameterError("m, K", (m, K), ">= 1 each")
    if not (isinstance(max_contributions, int) and max_contributions >= 1):
        raise ParameterError("max_contributions", max_contributions, "an integer >= 1")
    if max_contributions > 1:
        eps_hat, eta = eps_hat / max_contributions, eta / max_contributions
    try:                                # AboveThreshold's noise must be one the samplers draw
        above_threshold_scales(eps_hat)
    except ParameterError as err:
        raise ParameterError("eps_hat" if max_contributions == 1 else "eps_hat / max_contributions",
                             eps_hat, err.allowed) from None
    g = dp_winnow_guarantee(eps_hat=eps_hat, eta=eta, m=m, K=K, delta=delta,
                            max_contributions=max_contributions)
    return DPWinnowParameters(eps_hat, eta, m, K, L, c, rho, T, beta, g.epsilon, delta, "practical",
                              "", max_contributions)


# ------------------------------------------------------------------ private predictor
def predictor_guarantee(eps_bt: float, delta_bt: float, v: int, delta_prime: float) -> PrivacyCost:
    """Seed 001 Claim 1 made concrete: Algorithm 2 is the v-fold composition of
    BetweenThresholds (Observation 1), composed by Theorem 3."""
    return advanced_composition(eps_bt, delta_bt, v, delta_prime)


@dataclass(frozen=True)
class PredictorBudget:
    """The per-instance split of the predictor's budget over v_max BetweenThresholds
    instances (seed 001 Theorem 3, or basic composition where smaller): see
    ``predictor_instance_budget``."""
    v_max: int
    eps_bt: float
    delta_bt: float
    delta_prime: float
    epsilon: float
    delta: float


def predictor_instance_budget(*, epsilon: float, delta: float, v_max: int) -> PredictorBudget:
    """Per-BetweenThresholds-instance (eps_BT, delta_BT) such that v_max instances
    compose to at most (eps, delta): delta_BT = delta / (2 v_max), and eps_BT the larger
    of the advanced-composition solution (Theorem 3, delta' = delta/2, bisection) and
    eps / v_max (basic composition, better for few instances or large eps). The
    ledger composes with the rule "best", which takes whichever bound is smaller."""
    _check_eps_delta(epsilon, delta)
    if v_max < 1:
        raise ParameterError("v_max", v_max, ">= 1")
    dp = delta / 2
    delta_bt = delta / (2 * v_max)
    eps_bt = max(solve_per_instance_epsilon(epsilon, v_max, dp), epsilon / v_max * (1 - 1e-12))
    adv = predictor_guarantee(eps_bt, delta_bt, v_max, dp)
    basic = PrivacyCost(v_max * eps_bt, min(1.0, v_max * delta_bt))
    g = min((c for c in (adv, basic) if c.delta <= delta * (1 + 1e-12)), key=lambda c: c.epsilon)
    return PredictorBudget(v_max, eps_bt, delta_bt, dp, g.epsilon, g.delta)


def predictor_paper_halfspace(*, epsilon: float, delta: float, alpha: float, beta: float,
                              T: int, d: int) -> dict:
    """Seed 001 Appendix A.3 (halfspaces, adaptive adversary), verbatim, v = d + 1."""
    lg = math.log(d) + math.log(math.log(T)) + math.log(math.log(1 / delta)) + math.log(1 / epsilon)
    return {
        "v": d + 1,
        "beta_bt": beta * epsilon / (d * math.log(T) * math.sqrt(d * math.log(d * math.log(T) / delta)) * lg),
        "eps_bt": epsilon / math.sqrt(d * math.log(d / delta)),
        "delta_bt": delta / d,
        "alpha_bt": alpha / d ** 2,
    }


# ------------------------------------------------------------------ DP-GreedyCover
def greedy_cover_round_epsilon(epsilon: float, delta: float) -> float:
    """Per-round exponential-mechanism epsilon of DP-GreedyCover (seed 000 Alg. 3.1)
    under the set-cover analysis its Theorem 7 invokes (Gupta, Ligett, McSherry, Roth,
    Talwar 2010, unweighted set cover: selecting with weights exp(eps' * score) over
    any number of rounds is (2 eps' ln(e/delta0), delta0)-DP for adding or removing
    one element). Our copy of the seed omits Theorem 7's statement; we apply the
    cited analysis conservatively:

    * The mechanism here weights by exp(eps_r * score / 2), i.e. eps' = eps_r / 2.
    * Neighbouring samples differ by replacing one example = remove + add, so
      group privacy gives (2 * eps_r ln(e/delta0), delta0 (1 + e^{eps/2})).
    * Solving for (eps, delta): delta0 = delta / (1 + e^{eps/2}) and
      eps_r = eps / (2 ln(e / delta0)).
    """
    _check_eps_delta(epsilon, delta)
    if epsilon < 1400:          # e^{eps/2} is a float64
        delta0 = delta / (1 + math.exp(epsilon / 2))
        if delta0 > 0:
            return epsilon / (2 * math.log(math.e / delta0))
    # the same value with ln(1/delta0) = ln(1/delta) + ln(1 + e^{eps/2}) in log space: above,
    # e^{eps/2} overflowed (eps >= 1420) or delta0 underflowed to 0 (eps = 600 at delta =
    # 1e-300), and the registration check raised instead of answering (issue 43)
    log_inv_delta0 = -math.log(delta) + epsilon / 2 + math.log1p(math.exp(-epsilon / 2))
    return epsilon / (2 * (1 + log_inv_delta0))


def greedy_cover_basic_round_epsilon(epsilon: float, rounds: int) -> float:
    """Plain (basic) composition over all rounds, reported beside the set-cover bound."""
    if rounds < 1:
        raise ParameterError("rounds", rounds, ">= 1")
    return epsilon / rounds


def greedy_cover_advanced_round_epsilon(epsilon: float, delta: float, rounds: int) -> float:
    """Advanced composition (Theorem 3 of seed 001) over all rounds, eps-DP each."""
    _check_eps_delta(epsilon, delta)
    return solve_per_instance_epsilon(epsilon, rounds, delta)


@dataclass(frozen=True)
class GreedyCoverRound:
    """How DP-GreedyCover's rounds run for a privacy unit (``greedy_cover_person_round``):
    the exponential mechanism picks with weights exp(epsilon score / (2 sensitivity))."""
    epsilon: float          # per round, at ``sensitivity``
    sensitivity: int        # the score's sensitivity the analysis assumes (k or 1)
    analysis: str           # which bound fixed it
    example_epsilon: float  # what the whole run costs one example (at the run's delta)

    @property
    def mechanism_epsilon(self) -> float:
        """The exponential mechanism's epsilon for a score of sensitivity 1 (per example)."""
        return self.epsilon / self.sensitivity


def greedy_cover_person_round(accounting: str, epsilon: float, delta: float, rounds: int,
                              max_contributions: int) -> GreedyCoverRound:
    """DP-GreedyCover's rounds for a person with k = ``max_contributions`` > 1 rows of the
    window, at (epsilon, delta) per person for the whole run.

    A round's score (minus a count of remaining rows) moves by at most k when a person's
    k rows change, so the exponential mechanism at eps_r with sensitivity k (weights
    exp(eps_r score / (2k)): its epsilon for one example is eps_r / k) is eps_r-DP for
    the person, and the ledger's charge for the round is eps_r, k times the mechanism's.
    The rounds then compose by the plain bounds at the person level ("basic": eps_r =
    eps / rounds; "advanced": Theorem 3 over the rounds at delta). Theorem 7's set-cover
    analysis is per example: for "set_cover" the kind takes the larger mechanism epsilon
    of the plain composition (the better of basic and advanced) and of group privacy
    over Theorem 7 (``participation.group_member_budget``: Theorem 7 at
    (eps / k, delta (e^{eps/k} - 1)/(e^eps - 1)) per example is (eps, delta) per person),
    both valid; the second is larger once |F| is more than a few dozen (d = 500, k = 4,
    eps 1: 0.0072 against 0.0015 per example)."""
    if not (isinstance(max_contributions, int) and max_contributions >= 2):
        raise ParameterError("max_contributions", max_contributions, "an integer >= 2 (a person)")
    k = max_contributions
    basic = GreedyCoverRound(greedy_cover_basic_round_epsilon(epsilon, rounds), k,
                             "basic composition", epsilon / k)
    if accounting == "basic":
        return basic
    eps_r = greedy_cover_advanced_round_epsilon(epsilon, delta, rounds)
    advanced = GreedyCoverRound(eps_r, k, "advanced composition",
                                min(epsilon, advanced_composition(eps_r / k, 0.0, rounds, delta).epsilon))
    if accounting == "advanced":
        return advanced
    if accounting != "set_cover":
        raise ParameterError("accounting", accounting, "'set_cover', 'advanced' or 'basic'")
    composed = max(basic, advanced, key=lambda r: r.mechanism_epsilon)
    member = group_member_budget(epsilon, delta, k)
    group = GreedyCoverRound(greedy_cover_round_epsilon(member.epsilon, member.delta), 1,
                             "group privacy over the set-cover analysis", member.epsilon)
    return group if group.mechanism_epsilon > composed.mechanism_epsilon else composed
