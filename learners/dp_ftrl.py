"""DP-FTRL online logistic regression (Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021,
"Practical and Private (Deep) Learning without Sampling or Shuffling", Algorithm 1 with
the linearised loss), with matrix-factorization noise (mechanisms/factorization.py):
dpstream's dense online learner. Not a seed algorithm.

Learner. Rows are dense x in R^d with entries in [-1, 1] (declared features give such
rows; other entries are clamped), extended by a bias feature 1 and scaled to unit norm
(a function of the row alone). Per example the gradient of the logistic loss
log(1 + exp(-y <w, x>)) (or the hinge loss max(0, 1 - y <w, x>)) at the *released* model
w is clipped to norm ``clip`` and added to the block's sum. When a block of ``block`` examples closes, the prefix sum of all block sums
so far is released through the factorization's mechanism, and the model becomes
w = -eta * (released prefix): FTRL with the l2 regulariser ||w||^2 / (2 eta) on
linearised losses. Every prediction and gradient reads only the released w.

Privacy (replace-one, single participation, per epoch): an example enters one block's
sum with one clipped gradient of norm <= clip; replacing it moves that block by at most
2 clip, plus the rounding below: sens = 2 clip + sqrt(d + 1) 2^-30 (each of the two
gradients is rounded by at most 2^-31 per coordinate). The factorization's
release is then rho-zCDP with rho = sens^2 ||C e_1||^2 / (2 sigma^2)
(mechanisms/factorization.py, adaptive increments included), and sigma is calibrated so
that rho meets the epoch's (epsilon, delta) (``dp_ftrl_parameters``). An epoch is
``horizon`` examples; the next starts from the released prefix (public) on fresh
examples, so the per-example guarantee is one epoch's (epsilon, delta), forever, as for
continual Winnow (mechanisms/continual.py, "Epochs on disjoint examples").

A person as the privacy unit (``max_contributions`` = k > 1): at most k of a person's
examples per epoch reach the learner, at most one per block (the agents' admission), so
neighbours differ in at most k blocks' vectors, each by at most sens, and the release is
sens^2 P_k / (2 sigma^2)-zCDP per person, P_k the factorization's participation norm
(mechanisms/participation.py: X = C^T C >= 0, the packed set for BLT's Toeplitz C, a
dynamic program for the tree). sigma is calibrated on P_k, so the epoch ledger is in
persons; ``epsilon_example`` is what one example costs under the same noise (P_1). The
guarantee is per person and epoch: a person in E epochs composes to E epochs' rho.
Blocks and epochs count arriving examples: one that does not reach the learner
(``pass_over``) takes its place in its block with a zero vector, so the release schedule
is a function of the number of examples alone. Then the examples a released prefix
holds are not releases x block, so the private prior's estimate divides the positives
count by a count of the examples that reached the learner, released in one more
coordinate at the same weight (``count_weight``): which examples reach the learner is a
function of the arrival pattern, the same in two neighbouring streams, so that
coordinate adds nothing to the sensitivity; its noise is the positives count's.

The intercept and the answer before the first release (issue 45). A unit row's bias
coordinate is 1/||(x, 1)||, so an intercept of a few log-odds (a stream with 4% positives
needs about -3.2) takes the bias weight many blocks of gradients to reach, and before the
first release the old learner answered +1 by a tie-break of sgn(0). Now the score is
s(x) = b0 + <w, r(x)>, with b0 = logit(pi) for the class prior pi:
* ``prior``: a declared *public* P(y = +1) (configuration, free): b0 = logit(prior) from
  the first example on;
* otherwise a private estimate: each example adds ``prior_weight`` x [y = +1] to one extra
  coordinate of its block's vector, released with the gradients by the same
  factorization (so the same zCDP proof covers it; the replace-one sensitivity becomes
  sqrt((2 clip)^2 + prior_weight^2), ``dp_ftrl_parameters``). After a release, n
  examples released so far (public: blocks x block), P^ the released count and s its
  noise's standard deviation (public: sigma ||B_t|| / prior_weight): pi = (P^ + a) /
  (n + 2a) with a = max(1, s), clamped to [1/(n + 2), 1 - 1/(n + 2)]: post-processing
  of the release. The pseudo-counts a match the noise, so an early, noisy count moves
  the intercept little (a Beta(a, a) prior as strong as the measurement's error);
  against add-one smoothing it lowered the cumulative error on 5 of the 9 bench sets at
  epsilon 4 (by 0.1 to 0.5 points) and raised it on 2 (by 0.1; bench/dp_ftrl.py).
Before anything is known (no declared prior, no release yet) the learner abstains:
predictions are None (a query's status stays ``learning``) and the probability is 1/2.
That is the principled answer with no information: any fixed class is a guess the
stream may punish (docs/models.md, "No answer before anything is known").
Probabilities: ``predict_proba_many`` = sigmoid(s(x)) (the logistic model's estimate of
P(y = +1 | x); for the hinge loss a monotone score only).

The decision (issue 45, second round; post-processing of the released model, free):
``decision="error"`` (the default) answers +1 iff s(x) >= 0, i.e. P(y = +1 | x) >= 1/2,
the rule with the fewest mistakes; ``decision="balanced"`` answers +1 iff
P(y = +1 | x) >= pi, the class prior, i.e. iff <w, r(x)> >= 0: the rule with the lowest
balanced error (the mean of the two classes' error rates, which any constant answer
puts at 1/2). On a rare class the first almost never names it unless the features
make it likely, so its balanced error stays near 1/2; the second names it wherever
the features make it likelier than its prior; before the first release (w = 0) every x
is exactly at its prior, a tie, so it abstains even with a declared prior. Measured (bench/dp_ftrl.py, epsilon 4, 3
keys): balanced error 0.507 -> 0.466 on solar_flare, 0.032 -> 0.020 on shuttle and
0.162 -> 0.081 on digits_zero, at the price of more mistakes (5.0% -> 5.9% and 4.8% ->
10.3%); not on yeast (0.504 -> 0.505), where its scores hardly rank (AUC 0.53).

Class weights (issue 45, third round): ``class_weight="balanced"`` learns the
class-balanced logistic loss, each class weighted as if it were half of the stream
(scikit-learn's ``class_weight="balanced"``; King and Zeng 2001 for rare events), so
the learned score <w, r(x)> is the log-odds under equal priors, and the prior shift
s(x) = logit(pi) + <w, r(x)> (Saerens, Latinne, Decaestecker 2002; Elkan 2001, "The
foundations of cost-sensitive learning") restores P(y = +1 | x): the same two decision
rules and probabilities read it. Why: the clip makes the unweighted loss lopsided on a
rare class. A positive's gradient at a model that rates it unlikely has |coef| near 1
and is cut to ``clip``, a negative's (|coef| near pi) is not, so the released bias
settles far below the prior's logit (-9 to -14 on yeast with negligible noise) and
the balanced rule, <w, r> >= 0, almost never names the rare class. Weighted, both
classes' gradients near the balanced boundary are cut alike. The weights multiply the
*clipped* gradient and are at most 1 (the rare class 1, the other pi / (1 - pi) for
pi < 1/2), so an example still moves its block by at most ``clip`` and no privacy
parameter changes; pi is the declared prior or the released estimate (a function of
earlier releases: post-processing), weights 1 while neither is known. The price is
the majority class's information, cut by pi / (1 - pi): so it is an option, not the
default. Measured (bench/dp_ftrl.py, epsilon 4, 3 keys, with the balanced decision):
balanced error on yeast 0.505 -> 0.485 (with negligible noise 0.493 -> 0.43, where
River's non-private online logistic regression with the same weights reaches 0.43),
solar_flare 0.466 -> 0.464, shuttle 0.020 -> 0.020, but digits_zero 0.081 -> 0.116.

Rows (``featurised_row``): declared numeric fields give one scaled value each
(``"values"``, the default), their one-hot bins (``"bins"``, the binary form's active
slots as 0/1) or both. A linear model over bins is an additive model of the numbers,
so it can learn a class that no halfspace of the values separates: on bananas (two
numbers, two interleaved moons) DP-FTRL made 46.2% mistakes on the values, 31.8% on
both, against the majority class's 45.0%; on segment (18 fields) both saved 1.5 points,
on the sets with 30 to 103 numeric fields they cost 2 to 6 (each bin coordinate takes
a share of the unit row). So ``"values"`` stays the default.

Exact arithmetic where outputs must not depend on batching: gradients are rounded to
multiples of 2^-30 and summed as int64 (exact, in any order), and inner products are
row sums of elementwise products (numpy's pairwise sum per row, the same alone or in a
batch). So a batch gives the state and outputs of one example at a time, bit for bit,
and replay reproduces every release.

Rules: ``clip`` = 1/4 (unit rows' logistic gradients are mostly far below 1 once the
model learns, so a smaller bound buys a 4x smaller noise for the few it cuts),
``prior_weight`` = clip / 2 (``PRIOR_SHARE``: the sensitivity, and so every coordinate's
noise, grows by sqrt(1 + 1/16) - 1 = 3%; the released count's noise is then
sigma ||B_t|| / prior_weight, 8 to 20 counts at epsilon 4 on the bench's streams: the
intercept is rough for the first few hundred examples and close after, and a weight of
clip (12% more noise) or 2 clip (41%) did not pay for itself on six sets at epsilon 4),
and ``eta`` and ``block`` follow from the noise and the stream (``default_eta``,
``default_block``). ``bench/dp_ftrl.py --grid`` sets them against the best of a grid
(clip 1, 1/2, 1/4, 1/10; eta x clip 0.03 to 1; block 10, 50) on six real sets at
epsilon 1 and 4: the rules' cumulative error was within 0 to 3.2 points of the grid's
best cell (itself the best of 32 noisy runs), e.g. 12.7% against 12.5% (phishing) and
19.7% against 20.1% (digits) at epsilon 4.

>>> from dpstream.mechanisms.randomness import KeyedRandomness
>>> params = dp_ftrl_parameters(epsilon=4.0, delta=1e-6, d=3, horizon=1000, block=10)
>>> model = DPFTRL(params=params, rng=KeyedRandomness(bytes(32)), model_id="doc")
>>> model.learn_one([0.5, -1.0, 0.2], +1).prediction is None    # nothing released yet
True
>>> steps = model.learn_many([[0.5, -1.0, 0.2]] * 9, [+1] * 9)   # the first release
>>> model.predict_one([0.5, -1.0, 0.2]) in (-1, 1), 0 < model.predict_proba_one([0.5, -1.0, 0.2]) < 1
(True, True)
>>> model.ledger.totals().epsilon <= 4.0
True
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from dpstream.mechanisms.accounting import (ZCDP_ORDERS, Ledger, LedgerState, zcdp_epsilon,
                                            zcdp_rho)
from dpstream.mechanisms.errors import InfeasibleParameters, ParameterError
from dpstream.mechanisms.factorization import (BLT, TABLE_MAX, TREE, BLTNoise, BLTParams,
                                               TreeNoiseF, factorization, optimal_blt)
from dpstream.mechanisms.participation import participation_norm2
from dpstream.mechanisms.randomness import KeyedRandomness

from .protocol import BlockReleases, Step

PURPOSE = "dp_ftrl/noise"
SCALE = float(1 << 30)             # gradients are summed as integers in units of 2^-30
LOSSES = ("logistic", "hinge")
DECISIONS = ("error", "balanced")  # answer +1 iff P(y = +1 | x) >= 1/2, or >= the prior
CLASS_WEIGHTS = ("none", "balanced")  # the logistic loss as is, or class-balanced (module docstring)
ROWS = ("values", "bins", "both")  # numeric fields as values, one-hot bins, or both


def row_dimension(featuriser, rows: str = "values") -> int:
    """The dense dimension of ``featurised_row`` rows."""
    if rows not in ROWS:
        raise ParameterError("rows", rows, f"one of {ROWS}")
    return {"values": featuriser.real_dimension, "bins": featuriser.binary_dimension,
            "both": featuriser.real_dimension + featuriser.binary_dimension}[rows]


def featurised_row(featuriser, record: dict, rows: str = "values") -> list[float]:
    """A record's dense row (module docstring, Rows): the declared real row (entries in
    [-1, 1]), the binary row's active slots as 1 over its zeros (one per field: a
    numeric field's bin, a category, a boolean's value), or the first then the second.
    Bounded as the featuriser bounds every record."""
    if rows == "values":
        return featuriser.dense(record)
    onehot = [0.0] * featuriser.binary_dimension
    for j in featuriser.active(record):
        onehot[j] = 1.0
    return onehot if rows == "bins" else featuriser.dense(record) + onehot


def mechanism_name(mechanism: str) -> str:
    return f"dp_ftrl[{mechanism}, gaussian]"


@dataclass(frozen=True)
class DPFTRLParameters:
    """DP-FTRL's settings and calibrated noise (``dp_ftrl_parameters``)."""
    d: int                     # features; the bias is feature d
    block: int                 # examples per release
    horizon: int               # examples per epoch (a multiple of block)
    eta: float                 # w = -eta * released prefix of gradient sums
    loss: str
    mechanism: str             # "blt" or "tree"
    sigma: float               # Gaussian noise std per coordinate and step
    sensitivity: float         # replace-one l2 sensitivity of a block sum
    strategy_norm2: float      # max_j ||C e_j||^2 of the factorization (P_1)
    rho: float                 # zCDP of one epoch per privacy unit
    epsilon: float             # the guarantee per privacy unit (one epoch), at delta
    delta: float
    blt: tuple | None = None   # (theta, omega) of the BLT
    clip: float = 0.25         # l2 bound on one example's gradient
    prior: float | None = None  # a declared public P(y = +1), or None
    prior_weight: float = 0.0  # weight of the released positives count (0: none released)
    decision: str = "error"    # DECISIONS: +1 iff P(y = +1 | x) >= 1/2, or >= the prior
    class_weight: str = "none"  # CLASS_WEIGHTS: the plain loss, or each class as half the stream
    max_contributions: int = 1  # k: a person's examples per epoch (1: the unit is one example)
    participation_norm2: float | None = None  # P_k the noise is calibrated on (None: P_1)
    count_weight: float = 0.0  # weight of the released count of examples that reached the
    # learner (a person as the unit, with the prior estimated; 0: every example reaches it)

    @property
    def blocks(self) -> int:
        return self.horizon // self.block

    @property
    def epsilon_example(self) -> float:
        """The epsilon one example costs under the same noise (P_1 for P_k; = ``epsilon``
        for k = 1)."""
        return zcdp_epsilon(release_rho(self.sensitivity, self.strategy_norm2, self.sigma), self.delta)

    @property
    def released_dim(self) -> int:
        """Coordinates of a block's vector: d weights, the bias, the positives count when
        the prior is estimated privately, and then, for a person as the unit, the count of
        examples that reached the learner."""
        return self.d + 1 + (self.prior_weight > 0) + (self.count_weight > 0)


CLIP = 0.25
PRIOR_SHARE = 0.5       # the positives count's weight, in units of clip (module docstring)


MIN_BLOCK = 10


def default_block(horizon: int, d: int = 1) -> int:
    """Examples per release: MIN_BLOCK, or more where the epoch would need more blocks than
    the BLT table is optimised for (mechanisms/factorization.py, 2^17), or where a wide
    model's state written at each release (the prefix and the noise buffers, about
    (BUFFERS + 2)(d + 2) floats: agents/kinds/dp_ftrl.py's cold records) would cost more
    than about 1 KB of changelog per example: B >= (d + 2) / 16.

    Why the smallest block (module docstring, Rules; issue 45). With eta = 1/(sigma ||C e_1||)
    (``default_eta``) the noise a release puts on a margin is about ||B_t|| / ||C e_1||
    whatever the block, while the signal after t examples is eta t g: its ratio to the
    noise scales as t / (sens ||C e_1|| ||B_t||). For BLT (as for the square-root
    factorization it approximates) ||C e_1||^2 and ||B_t||^2 grow like ln(n) / pi in the
    number of blocks n = T/B, so a 5x smaller block costs a factor (ln n + ln 5)/ln n in
    noise (1.2 at n = 1,000), while the model lags B examples behind the stream, a cost
    linear in B and paid on every example. Hence the smallest block that keeps the
    per-release work bounded: 10 examples (a release costs O(buffers x d) and one
    state record). Measured (bench/dp_ftrl.py --blocks, epsilon 4, 3 keys): on the two
    streams over 4,000 examples block 10 beat the previous rule's horizon/100 (44 and
    50: shuttle 0.5 against 0.6%, bananas 46.2 against 46.6%), and on yeast; on three
    streams of 1,600 to 2,100 the previous rule's 16 to 21 was better by 0.4 to 0.9
    points (docs/models.md). The price is throughput: five times the releases of block
    50, and the kernel learned Shuttle 2.2x slower."""
    return max(MIN_BLOCK, -(-horizon // TABLE_MAX), -(-(d + 2) // 16))


def default_eta(sigma: float, strategy_norm2: float) -> float:
    """The learning rate: the l2 regulariser 1 / eta sized to the noise of a released
    prefix (per coordinate about sigma ||C e_1||, as ||B_t|| and ||C e_1|| grow alike), so
    that the noise alone moves a margin <w, x> of a unit row by about 1; at most 1
    (module docstring, Rules)."""
    return 1.0 / max(1.0, sigma * math.sqrt(strategy_norm2))


def release_rho(sensitivity: float, norm2: float, sigma: float) -> float:
    """zCDP of one epoch's release for a unit whose participation norm is ``norm2``:
    sens^2 norm2 / (2 sigma^2), with norm2 = P_1 = ||C e_1||^2 for one example and P_k for
    a person with k examples in distinct blocks (mechanisms/participation.py; Gaussian
    mechanism, Bun and Steinke 2016, Prop. 1.6)."""
    return sensitivity * sensitivity * norm2 / (2 * sigma * sigma)


def smallest_epsilon(delta: float) -> float:
    """The smallest epsilon > 0 dp-accounting certifies for a rho-zCDP release at ``delta``
    (``zcdp_epsilon`` just above the rho its KL bound certifies as epsilon 0: every smaller
    budget leaves DP-FTRL no rho with a positive epsilon)."""
    rho = -math.log1p(-delta * delta) / ZCDP_ORDERS[0]
    return zcdp_epsilon(max(rho, 1e-300) * (1 + 1e-9), delta)


def dp_ftrl_parameters(*, epsilon: float, delta: float, d: int, horizon: int, block: int | None = None,
                       eta: float | None = None, loss: str = "logistic", mechanism: str = BLT,
                       clip: float = CLIP, prior: float | None = None,
                       prior_weight: float | None = None, decision: str = "error",
                       class_weight: str = "none", max_contributions: int = 1,
                       admission: bool = False) -> DPFTRLParameters:
    """Parameters that spend (epsilon, delta) per privacy unit (one epoch): rho from
    dp-accounting (``zcdp_rho``), sigma = sens sqrt(P_k) / sqrt(2 rho), P_k the
    factorization's participation norm for k = ``max_contributions`` examples of a person
    per epoch in distinct blocks (so k is at most the epoch's blocks), P_1 = ||C e_1||^2
    for one example (module docstring). ``horizon`` (examples per epoch) is rounded up to
    a multiple of the block.

    The class prior: ``prior`` declares a public P(y = +1) in (0, 1) (nothing released
    about it); otherwise the positives count is released with weight ``prior_weight``
    (default PRIOR_SHARE x clip; 0 turns the estimate off), and the replace-one
    sensitivity of a block's vector is sqrt((2 clip + r)^2 + q^2), r the gradients'
    rounding (sqrt(d + 1) 2^-30) and q the weight as summed (a multiple of 2^-30).
    ``decision`` (DECISIONS) is post-processing and changes no privacy parameter;
    ``class_weight`` (CLASS_WEIGHTS) neither: its weights are at most 1 and multiply
    the clipped gradient (module docstring, Class weights). ``admission``: not every
    example reaches the learner (a person as the privacy unit); with the prior estimated,
    the count of those that do is released beside the positives count, at the same
    weight, adding nothing to the sensitivity (module docstring, "A person as the privacy
    unit")."""
    if d < 1:
        raise ParameterError("d", d, ">= 1")
    if not 0 < delta < 1:
        raise ParameterError("delta", delta, "in (0, 1)")
    if horizon < 1:
        raise ParameterError("horizon", horizon, ">= 1")
    block = default_block(horizon, d) if block is None else block
    if block < 1:
        raise ParameterError("block", block, ">= 1")
    horizon = -(-horizon // block) * block
    if loss not in LOSSES:
        raise ParameterError("loss", loss, f"one of {LOSSES}")
    if decision not in DECISIONS:
        raise ParameterError("decision", decision, f"one of {DECISIONS}")
    if class_weight not in CLASS_WEIGHTS:
        raise ParameterError("class_weight", class_weight, f"one of {CLASS_WEIGHTS}")
    if not (clip > 0 and math.isfinite(clip)):
        raise ParameterError("clip", clip, "a finite number > 0")
    n = horizon // block
    if not (isinstance(max_contributions, int) and 1 <= max_contributions <= n):
        raise ParameterError("max_contributions", max_contributions,
                             f"an integer in [1, {n}]: a person has at most one example per block "
                             f"and an epoch has {n} blocks (horizon {horizon} / block {block}): "
                             "raise the horizon, lower the block, or lower max_contributions")
    fac = factorization(mechanism, n)
    norm2 = fac.sensitivity_squared(n)
    if not math.isfinite(norm2):
        raise ParameterError("mechanism", mechanism, "a factorization with finite sensitivity")
    unit_norm2 = participation_norm2(fac, n, max_contributions)      # norm2 itself for k = 1
    if prior is not None and not (0 < prior < 1):
        raise ParameterError("prior", prior, "a public P(y = +1) in (0, 1), or None to estimate it privately")
    if prior_weight is None:
        prior_weight = 0.0 if prior is not None else PRIOR_SHARE * clip
    if not (prior_weight >= 0 and math.isfinite(prior_weight)):
        raise ParameterError("prior_weight", prior_weight, "a finite number >= 0")
    if prior is not None and prior_weight > 0:
        raise ParameterError("prior_weight", prior_weight, "0 when a public prior is declared")
    q = float(np.rint(prior_weight * SCALE)) / SCALE          # the count's step, as summed
    sens = math.hypot(2.0 * clip + math.sqrt(d + 1) / SCALE, q)
    rho = zcdp_rho(epsilon, delta)
    sigma = sens * math.sqrt(unit_norm2) / math.sqrt(2 * rho)
    eta = default_eta(sigma, norm2) if eta is None else eta
    if not (eta > 0 and math.isfinite(eta)):
        raise ParameterError("eta", eta, "a finite number > 0")
    blt = (fac.params.theta, fac.params.omega) if mechanism == BLT else None
    spent = zcdp_epsilon(release_rho(sens, unit_norm2, sigma), delta)
    if not spent > 0:
        # dp-accounting certifies a rho this small as (0, delta)-DP (its KL bound, delta^2 >
        # 1 - e^-rho): the epoch ledger takes a charge of epsilon > 0 only, and a model whose
        # noise is this large learns nothing (issue 43: a dead letter at the first event)
        raise InfeasibleParameters(
            f"epsilon={epsilon:g} at delta={delta:g} is infeasible for dp_ftrl: the largest zCDP rho "
            f"it allows ({rho:.3g}) is certified only as epsilon=0 by dp-accounting's KL bound, "
            f"noise sigma {sigma:.3g} per coordinate; raise epsilon"
            + (f" to at least {least:.3g} at this delta" if (least := smallest_epsilon(delta)) > 0 else ""))
    return DPFTRLParameters(d, block, horizon, float(eta), loss, mechanism, sigma, sens, norm2,
                            rho, spent, delta, blt, float(clip),
                            None if prior is None else float(prior), q, decision, class_weight,
                            max_contributions, unit_norm2, q if admission else 0.0)


@dataclass
class DPFTRLState:
    """Counters and the block's integer gradient sum (every event); the epoch's true prefix
    sum, the noise state and the ledger (on block closes)."""
    epoch: int = 0
    t: int = 0                          # examples this epoch
    b: int = 0                          # blocks closed this epoch
    inc: np.ndarray | None = None       # this block's gradient sum, int64 in units of 2^-30
    prefix: np.ndarray | None = None    # the epoch's true prefix sum (int64, same units)
    noise: tuple | None = None          # the factorization's noise state after block b (BLT)
    offset: np.ndarray | None = None    # released prefix at the end of earlier epochs (float)
    ledger: LedgerState | None = None
    mistakes: int = 0                   # private: in-process evaluation only


ARRAY_BLOCKS = 1 << 20     # up to this many blocks the prefix variances are one array (8 MB)


class _PrefixArray:
    """t -> v[t - 1]: a plain class, not a closure, so a model holding it pickles (River's
    cloning and saved models)."""

    def __init__(self, v: np.ndarray):
        self.v = v

    def __call__(self, t: int) -> float:
        return float(self.v[t - 1])


def _prefix_variances(mechanism: str, blocks: int):
    """t -> ||B_t||^2 for 1 <= t <= blocks. Up to ARRAY_BLOCKS the factorization's array, as
    models have always computed it (so a replay of an older export reproduces every float);
    beyond, its closed form in O(1) memory (the array took 8 GB at the 10^9 blocks a
    registration may ask for: issue 43), equal to the array to ~1e-12 relative."""
    f = factorization(mechanism, blocks)
    if blocks <= ARRAY_BLOCKS:
        return _PrefixArray(f.prefix_variance(blocks))
    return f.prefix_variance_at


class DPFTRL(BlockReleases):
    """DP-FTRL over explicit state; every decision reads only the released model."""

    def __init__(self, *, params: DPFTRLParameters, rng: KeyedRandomness, model_id: str,
                 state: DPFTRLState | None = None, on_charge=None):
        self.params, self.rng, self.model_id, self.on_charge = params, rng, model_id, on_charge
        self.dim = params.d + 1                 # a row: d features and the bias
        self.rdim = params.released_dim         # a block's vector: and the positives count
        s = self.state = state or DPFTRLState()
        for name in ("inc", "prefix"):
            if getattr(s, name) is None:
                setattr(s, name, np.zeros(self.rdim, dtype=np.int64))
        if s.offset is None:
            s.offset = np.zeros(self.rdim)
        if s.ledger is None:
            self._charge_epoch()
        self.ledger = Ledger(s.ledger, on_entry=[on_charge] if on_charge else [])
        self._noise = self._noise_for(s.epoch)
        self._prefix_variance = None
        self._refresh()

    # ------------------------------------------------------------ privacy
    def _charge_epoch(self) -> None:
        """A fresh epoch ledger, charged the epoch's (epsilon, delta) up front (the whole
        factorization release is one mechanism), rho stated for zCDP composition."""
        p = self.params
        ledger = Ledger.create(epsilon=p.epsilon, delta=p.delta, rule="basic")
        if self.on_charge:
            ledger.on_entry.append(self.on_charge)
        ledger.charge(mechanism_name(p.mechanism), p.epsilon, p.delta)
        self.state.ledger = ledger.state
        self.ledger = ledger

    def _noise_for(self, epoch: int):
        p = self.params
        if p.mechanism == TREE:
            return TreeNoiseF(self.rng, self.model_id, PURPOSE, epoch, p.sigma, self.rdim)
        return BLTNoise(self.rng, self.model_id, PURPOSE, epoch, p.sigma, self.rdim,
                        BLTParams(*p.blt))

    # ------------------------------------------------------------ the released model
    def _refresh(self, noise_total: np.ndarray | None = None) -> None:
        """w = -eta (offset + released prefix of this epoch), and the intercept."""
        s, p = self.state, self.params
        if s.b == 0:
            released = np.zeros(self.rdim)
        else:
            if noise_total is None:
                noise_total = self._noise_total()
            released = s.prefix / SCALE + noise_total
        self.released = s.offset + released
        self.w = -p.eta * self.released[:self.dim]
        known, self.intercept = self._prior()
        self.informed = known
        if p.decision == "balanced" and self.released_examples == 0:
            self.informed = False    # w = 0: P(y = +1 | x) is the prior everywhere, a tie
        self.class_weights = (1.0, 1.0)        # (positives, negatives)
        if p.class_weight == "balanced" and known:
            pi = 1.0 / (1.0 + math.exp(-self.intercept))
            self.class_weights = (min(1.0, (1 - pi) / pi), min(1.0, pi / (1 - pi)))

    @property
    def released_examples(self) -> int:
        """Examples that arrived in the blocks released so far (public: releases x block;
        with a person as the unit, some of them did not reach the learner)."""
        return self.state.epoch * self.params.horizon + self.state.b * self.params.block

    def _prior(self) -> tuple[bool, float]:
        """(whether anything is known, b0 = logit of the class prior): the declared prior,
        else the released positives count smoothed (module docstring), else (False, 0)."""
        p = self.params
        if p.prior is not None:
            return True, math.log(p.prior / (1 - p.prior))
        n = self.released_examples
        if n == 0:
            return False, 0.0
        if p.prior_weight == 0:
            return True, 0.0
        if p.count_weight:          # the examples that reached the learner: a noisy count
            n = max(0.0, float(self.released[self.dim + 1]) / p.count_weight)
        a = max(1.0, self._count_noise())
        positives = self.released[self.dim] / p.prior_weight
        pi = min(1 - 1 / (n + 2), max(1 / (n + 2), (positives + a) / (n + 2 * a)))
        return True, math.log(pi / (1 - pi))

    def _count_noise(self) -> float:
        """The standard deviation of the released positives count's noise (public: sigma
        ||B_t|| / prior_weight per epoch, the factorization's prefix variance, summed over
        the epochs the offset carries)."""
        p, s = self.params, self.state
        if self._prefix_variance is None:
            self._prefix_variance = _prefix_variances(p.mechanism, p.blocks)
        at = self._prefix_variance
        total = s.epoch * at(p.blocks) + (at(s.b) if s.b else 0.0)
        return p.sigma * math.sqrt(total) / p.prior_weight

    def _noise_total(self) -> np.ndarray:
        s = self.state
        if self.params.mechanism == TREE:
            return self._noise.prefix(s.b)[0]
        return s.noise[1]

    def rows(self, X) -> np.ndarray:
        """(n, d + 1) rows: x clamped to [-1, 1], the bias appended, scaled to unit norm.
        ParameterError on a row of another length or a non-finite entry."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X.reshape(1, -1)
        if X.ndim != 2 or X.shape[1] != self.params.d or not np.isfinite(X).all():
            raise ParameterError("x", "<features>", f"finite rows of {self.params.d} entries")
        R = np.empty((X.shape[0], self.dim))
        R[:, :-1] = np.clip(X, -1.0, 1.0)
        R[:, -1] = 1.0
        return R / np.sqrt(np.sum(R * R, axis=1))[:, None]         # >= 1: the bias

    def _margins(self, R: np.ndarray) -> np.ndarray:
        """Scores b0 + <w, r> (per row, independent of the batch)."""
        return self.intercept + np.sum(R * self.w, axis=1)

    def _labels(self, scores: np.ndarray) -> np.ndarray:
        """+1 / -1 by the decision rule (the score's sign, or its excess over the prior's
        b0), 0 (abstain) while nothing is known."""
        if not self.informed:
            return np.zeros(scores.shape, dtype=np.int64)
        threshold = self.intercept if self.params.decision == "balanced" else 0.0
        return np.where(scores >= threshold, 1, -1)

    def predict_one(self, x) -> int | None:
        """sgn(b0 + <w, x>) (``decision="balanced"``: sgn(<w, x>)), None before anything is
        known (module docstring): post-processing of the released model, free."""
        return self.predict_many([x])[0]

    def predict_many(self, X) -> list[int | None]:
        return [int(v) or None for v in self._labels(self._margins(self.rows(X)))]

    def predict_proba_one(self, x) -> float:
        """P(y = +1 | x) as the released logistic model estimates it (1/2 before anything
        is known); free."""
        return float(self.predict_proba_many([x])[0])

    def predict_proba_many(self, X) -> np.ndarray:
        """sigmoid(b0 + <w, x>) per row (1/2 before anything is known)."""
        if not self.informed:
            return np.full(self.rows(X).shape[0], 0.5)
        z = np.clip(self._margins(self.rows(X)), -700, 700)
        return 1.0 / (1.0 + np.exp(-z))

    # ------------------------------------------------------------ learning
    def learn_one(self, x, y: int) -> Step:
        return self.learn_many([x], [y])[0]

    def learn_many(self, X, ys) -> list[Step]:
        return self.learn_rows(*self.checked(X, ys))

    def checked(self, X, ys) -> tuple[np.ndarray, np.ndarray]:
        ys = np.asarray(ys, dtype=np.int64).reshape(-1)
        R = self.rows(X)
        if ys.size != R.shape[0] or not np.all((ys == 1) | (ys == -1)):
            raise ParameterError("y", "<labels>", "one label per row, each -1 or +1")
        return R, ys

    def _gradients(self, R: np.ndarray, ys: np.ndarray, margins: np.ndarray) -> np.ndarray:
        """Per example, its block vector as int64 multiples of 2^-30: the clipped gradient
        at the released model's score (class-balanced: at <w, r>, then weighted by its
        class's weight <= 1), then (private prior) prior_weight x [y = +1], then (a person as
        the unit, private prior) count_weight: the example reached the learner."""
        balanced = self.params.class_weight == "balanced"
        if balanced:
            margins = margins - self.intercept       # the score under equal priors
        z = ys * margins
        if self.params.loss == "logistic":
            coef = -ys / (1.0 + np.exp(np.clip(z, -700, 700)))     # -y sigmoid(-y <w, x>)
        else:
            coef = np.where(z < 1.0, -ys, 0.0).astype(np.float64)
        G = coef[:, None] * R
        norms = np.sqrt(np.sum(G * G, axis=1))
        with np.errstate(over="ignore"):             # a clip near 5e-324: inf, so G is 0, quietly
            G /= np.maximum(1.0, norms / self.params.clip)[:, None]
        if balanced:                                 # after the clip: norms stay <= clip
            G *= np.where(ys == 1, *self.class_weights)[:, None]
        out = np.rint(G * SCALE).astype(np.int64)
        if self.rdim > self.dim:
            step = int(np.rint(self.params.prior_weight * SCALE))
            out = np.concatenate([out, np.where(ys == 1, step, 0)[:, None].astype(np.int64)], axis=1)
        if self.params.count_weight:
            step = np.full((len(ys), 1), int(np.rint(self.params.count_weight * SCALE)), dtype=np.int64)
            out = np.concatenate([out, step], axis=1)
        return out

    def _learn_segment(self, rows: np.ndarray, ys: np.ndarray) -> np.ndarray:
        """Predictions, then the gradients at the same released w into the block's sum."""
        margins = self._margins(rows)
        pred = self._labels(margins)
        self.state.mistakes += int((pred != ys).sum())          # an abstention counts
        self.state.inc = self.state.inc + self._gradients(rows, ys, margins).sum(axis=0)
        return pred

    def _close_block(self) -> None:
        s = self.state
        s.b += 1
        s.prefix = s.prefix + s.inc
        s.inc = np.zeros(self.rdim, dtype=np.int64)
        total, s.noise = self._noise.prefix(s.b, s.noise)
        self._refresh(total)

    def _next_epoch(self) -> None:
        """The epoch's final release becomes the public offset; fresh noise on fresh data,
        paid for by a fresh epoch ledger."""
        s = self.state
        s.offset = self.released.copy()
        s.epoch += 1
        s.t = s.b = 0
        s.prefix = np.zeros(self.rdim, dtype=np.int64)
        s.noise = None
        self._charge_epoch()
        self._noise = self._noise_for(s.epoch)
        self._refresh()

    # ------------------------------------------------------------ state as records
    def hot_record(self) -> dict:
        s = self.state
        return {"epoch": s.epoch, "t": s.t, "b": s.b, "inc": _ints(s.inc), "mistakes": s.mistakes,
                "ledger": dict(vars(s.ledger))}

    def cold_record(self) -> dict:
        """What changes when a block closes: the epoch's prefix, the noise state, the offset."""
        s = self.state
        noise = None if s.noise is None else [_floats(s.noise[0].ravel()), _floats(s.noise[1])]
        return {"prefix": _ints(s.prefix), "noise": noise, "offset": _floats(s.offset)}

    @classmethod
    def state_from(cls, hot: dict, cold: dict | None, dim: int, buffers: int) -> DPFTRLState:
        """The state of records; ``dim``: the parameters' ``released_dim``."""
        s = DPFTRLState(epoch=hot["epoch"], t=hot["t"], b=hot["b"], inc=_unints(hot["inc"]),
                        mistakes=hot["mistakes"], ledger=LedgerState(**hot["ledger"]))
        cold = cold or {}
        if cold.get("prefix") is not None:
            s.prefix = _unints(cold["prefix"])
        if cold.get("offset") is not None:
            s.offset = _unfloats(cold["offset"])
        if cold.get("noise") is not None:
            s.noise = (_unfloats(cold["noise"][0]).reshape(buffers, dim), _unfloats(cold["noise"][1]))
        return s


def _ints(a: np.ndarray) -> str:
    from .winnow import encode_array
    return encode_array(a)


def _unints(s: str) -> np.ndarray:
    from .winnow import decode_array
    return decode_array(s)


def _floats(a: np.ndarray) -> str:
    import base64
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode()


def _unfloats(s: str) -> np.ndarray:
    import base64
    return np.frombuffer(base64.b64decode(s), dtype="<f8").astype(np.float64)


def parameters_record(p: DPFTRLParameters) -> dict:
    return asdict(p)
