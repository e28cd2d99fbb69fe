"""Private prediction of a query stream by subsample-and-aggregate with
BetweenThresholds gating and class shrinkage (seed 001 Sec. 3.3 Algorithm 2, with the
generators of Sec. 4 and 5, parameters of App. A.2 / A.3 made concrete).

Epoch start: partition the labelled sample into k disjoint blocks of m examples by a
keyed random permutation (surplus examples are dropped), and build one hypothesis
per block with the generator. Per query x:
  1. count the blocks voting +1;
  2. BetweenThresholds on the count with A = 3k/8, B = 5k/8 (the seed's accuracy
     proof, Claim 2): L -> -1, R -> +1;
  3. TOP -> a uniformly random label (keyed), the query and label join HardQuery, the
     hypotheses are regenerated under the new constraint, and a fresh BetweenThresholds
     instance starts.
Privacy, two accountings (``PredictorConfig.accounting``):
* "epoch" (default, our extension, mechanisms/bt_epoch.py): the instances of an epoch are
  rounds of one process; one supermartingale certifies the whole epoch, up to v_max hard
  queries, at (eps, delta), charged once when the epoch starts. About 5x less noise than
  per-instance composition at the same budget (k = 10^4, eps 1, v_max 8: scale 37 vs 200).
* "instance" (seed 001 Claim 1, Observation 1): the run is the composition of its
  BetweenThresholds instances; each is charged (eps_BT, delta_BT) when it starts, and
  v_max instances compose to the model's (eps, delta) by Theorem 3
  (``mechanisms.params.predictor_instance_budget``).
Either way, after the v_max-th hard query the model answers nothing more
(``budget_exhausted``) until a new epoch brings a fresh, disjoint sample; epochs on
disjoint data compose in parallel. With ``student=True`` (issue 45), the answers the
vote released this epoch train a student model (refitted at 8, 16, 32, ... answers, when
the budget runs out, and as the queries seen then reach 8, 16, ... 2,048: label
spreading over them), and the student answers from then on (status ``student``):
post-processing of the released transcript, no charge, with the caveat on queries in
learners/student.py.

The label of a hard query (our departure, with a student): the seed answers TOP with a
uniformly random label, the least informed public guess; once a student has been
fitted, a hard query gets the student's label instead. Privacy is unchanged (the
label is a function of the released transcript, as the coin is of the key alone); what
changes is the seed's count of hard queries (its Claim 5 needs the coin: with
probability 1/2 it halves the label sequences left), and that count never decides
privacy here: v_max caps the hard queries whatever their labels. Measured (the streams
of bench/predictor_real.py, 10 keys): hard queries answered right 65% (segment), 64%
(digits) and 53% (bananas, whose hard queries sit on its curved boundary) of the time,
where the coin gives 50%.

Rows of the real-feature generators (halfspace, logistic, nearest: ``dense``) have
their entries clamped to [-ROW_BOUND, ROW_BOUND] = [-10^6, 10^6]: a well-formed row is
bounded, not rejected. Before, one example of 1e300 made the halfspace LP fail at the
epoch's start, so the example completing the sample was dead-lettered and the model
never left ``learning``. Not [-1, 1] (DP-FTRL's bound, what declared features give):
the predictor's privacy does not depend on the rows' scale, and users send raw scores
(the demo's risk scores are standard normal): clamped to [-1, 1] the demo's answers
fell from 99.1% to 97.7% right, and scaled by 1/4 into it, the halfspace LP's unit
margin made them collapse after a coin-labelled hard query (54%). 10^6 keeps every
square and sum of squares exact enough for the LP, Newton's method and the distances.

Regeneration keeps a block's hypothesis when it already satisfies the new hard
query (oblivious generators): it was the least-error hypothesis over a larger set that
still contains it, so it is still optimal. The adaptive generator regenerates all.

A person as the privacy unit (``units``: each sample row's pseudonym, agents/units.py).
Neighbours differ in the contents of one person's rows, at the same positions, with the
same arrival pattern (which rows share a person is public under this relation). All of a
person's rows go to one block (``partition_units``), chosen from the pattern and the key
alone, so the person changes one block's hypothesis, one vote per query: BetweenThresholds
sees a count of sensitivity 1, and every charge is the per-example one, unchanged (per
person and epoch; a person in several epochs composes across them). The sample is the
rows that reached the learner out of the epoch's k x m arriving examples (the agents'
admission, a function of the arrival pattern too): the permutation is over all k x m, and
a row that did not reach the learner is dealt as a row of its own and then left out of its
block (``taught``), so whether it reached the learner changes its block alone, and the
blocks may hold fewer than m rows each. The bound c (``max_contributions``) on a
person's rows per epoch bounds their share of a block: utility, not privacy; and a
block's size, at most m + c - 1 rows (``largest_block``). Why the groups are dealt rather than sent to the block the keyed
permutation gives a person's first row (the simpler rule, equally private): that rule
leaves a block empty whenever none of its m positions holds a first row, (1 - 1/g)^m of
the blocks for persons of g rows (6% at g = 4, m = 10; half at g = 16). Dealt in the order
of their first rows' places in the same keyed permutation, each to the block with the
fewest rows so far, the blocks stay within the largest group of each other, and one is
empty only when there are fewer persons than blocks. Every generator takes blocks of any
size (an empty block's hypothesis is its generator's fit to no rows).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from dpstream.mechanisms.accounting import Ledger, LedgerState
from dpstream.mechanisms.between_thresholds import (L, MIN_GAP_IN_SCALES, R, TOP, BetweenThresholds,
                                                    BetweenThresholdsCalibration, BetweenThresholdsState,
                                                    calibrate_between_thresholds)
from dpstream.mechanisms.bt_epoch import EpochCalibration, calibrate_epoch
from dpstream.mechanisms.errors import (BudgetExhausted, InfeasibleParameters, ParameterError,
                                        ScaleAboveLimit, ThresholdsTooClose)
from dpstream.mechanisms.params import PredictorBudget, predictor_instance_budget
from dpstream.mechanisms.randomness import KeyedRandomness

from .protocol import Step
from .student import SEEN_MAX, STUDENT_MAX, StudentModel, fit_student, refit_due

EPOCH_MECHANISM = "between_thresholds_epoch"
BT_PURPOSE = "predictor/between_thresholds"
TOP_PURPOSE = "predictor/top_label"
PARTITION_PURPOSE = "predictor/partition"

ANSWERED, HARD, EXHAUSTED, NO_EPOCH = "answered", "hard_query", "budget_exhausted", "no_epoch"
STUDENT = "student"           # answered by the student after the epoch's budget ran out


GAP_SCALES = 2.0    # noise scales the vote's gap k/4 must hold ("epoch" accounting; ``size_predictor``)
ROW_BOUND = 1e6      # dense rows are clamped to [-ROW_BOUND, ROW_BOUND] (module docstring)
MAX_BLOCKS = 8_192   # the most blocks k a predictor has (docs/limits.md): see ``PredictorConfig``


def lower_v_max(v_max: int, sep: str = ", or") -> str:
    """An infeasible registration's advice to lower v_max, where there is a lower one
    (before, v_max = 1 was told to lower v_max)."""
    return f"{sep} lower v_max" if v_max > 1 else ""


@dataclass(frozen=True)
class PredictorConfig:
    """The private predictor's public shape (seed 001 Sec. 3.3): k blocks, the budget, the cap
    v_max on hard queries, the accounting, and ``gap``: the noise scales the thresholds'
    gap k/4 must hold (an accuracy floor, ``size_predictor``; the "instance"
    accounting keeps the single-instance calibration's 3).

    The noise scale b is at most MAX_BLOCKS / (4 gap) votes: a vote of at most MAX_BLOCKS
    blocks could not hold more (its gap k/4 must be ``gap`` b), so nothing a registration
    can use is lost, and it bounds the calibration's work, which grows with b
    (mechanisms.between_thresholds.neighbour_lanes: about 2 (k/4 + 160 b) lanes per
    evaluation; issue 43: a registration whose budget needed b ~ 30,000 held the
    worker's event loop for 18 s and 2.5 GB)."""
    k: int
    epsilon: float
    delta: float
    v_max: int
    accounting: str = "epoch"            # "epoch" (one charge per epoch) or "instance"
    gap: float = GAP_SCALES

    def budget(self) -> PredictorBudget:
        """Per-instance (eps_BT, delta_BT) of the "instance" accounting."""
        return predictor_instance_budget(epsilon=self.epsilon, delta=self.delta, v_max=self.v_max)

    @property
    def max_scale(self) -> float:
        """The largest noise scale a vote of MAX_BLOCKS blocks holds (class docstring)."""
        gap = self.gap if self.accounting == "epoch" else MIN_GAP_IN_SCALES
        return MAX_BLOCKS / (4 * gap)

    def calibration(self) -> BetweenThresholdsCalibration | EpochCalibration:
        """The noise scale (and thresholds 3k/8, 5k/8) under the chosen accounting."""
        if self.accounting == "epoch":
            return calibrate_epoch(epsilon=self.epsilon, delta=self.delta, lower=3 * self.k / 8,
                                   upper=5 * self.k / 8, v_max=self.v_max, min_gap=self.gap,
                                   max_scale=self.max_scale)
        if self.accounting != "instance":
            raise ParameterError("accounting", self.accounting, "'epoch' or 'instance'")
        b = self.budget()
        return calibrate_between_thresholds(epsilon=b.eps_bt, delta=b.delta_bt,
                                            lower=3 * self.k / 8, upper=5 * self.k / 8,
                                            max_scale=self.max_scale)

    def accuracy_margin(self, T: int, beta: float) -> float:
        """3k/8 - b ln(T/beta), in votes: when positive, with probability 1 - beta no noise
        value among T queries moves a unanimous vote across a threshold (the noise tail
        of ``BetweenThresholdsCalibration.accuracy``). When negative, k is too small for
        T queries: expect spurious hard queries and random labels on easy queries."""
        return 3 * self.k / 8 - self.calibration().accuracy(T, beta)


MIN_BLOCK = 10          # examples per block below which a block's hypothesis is noise


@lru_cache(maxsize=1024)
def smallest_k(*, epsilon: float, delta: float, v_max: int, accounting: str = "epoch",
               gap: float = GAP_SCALES) -> int:
    """The fewest blocks whose vote thresholds (3k/8, 5k/8) leave room for the noise the
    budget needs (gap k/4 >= ``gap`` b; 3 b under the "instance" accounting). b hardly
    depends on k once the gap is wide, so it is computed at a wide gap, then k is raised
    until the calibration accepts it. A narrower gap needs more noise (b psi grows as
    the gap shrinks: mechanisms/between_thresholds.py), so when the wide gap already needs
    more than the MAX_BLOCKS blocks can hold, no k can do: InfeasibleParameters then,
    after one calibration whose scales stay below ``PredictorConfig.max_scale``."""
    if accounting != "epoch":
        gap = MIN_GAP_IN_SCALES
    probe = 400_000
    config = PredictorConfig(k=probe, epsilon=epsilon, delta=delta, v_max=v_max,
                             accounting=accounting, gap=gap)
    try:
        b = float(config.calibration().scale)
    except ScaleAboveLimit:
        raise InfeasibleParameters(
            f"(eps={epsilon}, delta={delta}) with up to v_max={v_max} hard queries needs a noise "
            f"scale above {config.max_scale:g} votes: more blocks than the {MAX_BLOCKS:,} a "
            f"predictor may have (a structural limit, docs/limits.md): raise epsilon or delta{lower_v_max(v_max)}") from None
    k = math.ceil(4 * gap * b)
    while k <= MAX_BLOCKS:
        try:
            PredictorConfig(k=k, epsilon=epsilon, delta=delta, v_max=v_max,
                            accounting=accounting, gap=gap).calibration()
            return k
        except ThresholdsTooClose:
            if k == MAX_BLOCKS:
                break
            k = min(math.ceil(k * 1.02) + 1, MAX_BLOCKS)
    raise InfeasibleParameters(
        f"(eps={epsilon}, delta={delta}) with up to v_max={v_max} hard queries needs more "
        f"blocks than the {MAX_BLOCKS:,} a predictor may have (a structural limit, "
        f"docs/limits.md): raise epsilon or delta{lower_v_max(v_max)}")


V_MAX_LADDER = (64, 32, 16, 8, 4, 2, 1)     # the caps ``size_predictor`` chooses from
CLEAR = 2           # at most CLEAR x k_min blocks: larger blocks when the examples allow


@lru_cache(maxsize=1024)
def size_predictor(*, epsilon: float, delta: float, examples: int, v_max: int | None = None,
                   accounting: str = "epoch", gap: float = GAP_SCALES) -> tuple[int, int, int]:
    """(k, m, v_max) for an epoch of ``examples`` labelled examples (issue 45).

    k_min(v) is the fewest blocks whose vote gap k/4 holds ``gap`` noise scales
    (GAP_SCALES = 2 by default) for an epoch of up to v hard queries (``smallest_k``). ``v_max`` None (automatic):
    the largest cap in V_MAX_LADDER whose k_min(v) blocks of MIN_BLOCK examples fit;
    then k = min(CLEAR k_min(v), examples // MIN_BLOCK) (never below k_min), so blocks
    grow past MIN_BLOCK only once the cap is at the top of the ladder; m = examples // k.

    The trade (second round of issue 45). A cap v costs noise: b grows from 6.8 votes at
    v = 1 to 24 at v = 64 (epsilon 4), so for a fixed k a larger cap means a narrower
    gap in noise scales. What the gap buys is room for unanimous votes: a count of 0 or
    k is 1.5 gaps from the nearer threshold, so it comes out TOP with probability about
    e^{-1.5 G}/2 and on the wrong side with about e^{-2.5 G}/2, G the gap in noise
    scales (G = 3: 0.6% and 0.03%; G = 2: 2.5% and 0.3%). The first round asked for
    G = 3 and preferred the cap whose twice-k_min blocks fit (CLEAR), so with a few
    thousand examples the cap fell to 2 to 16. But on real data most hard queries do
    not come from unanimous votes: with blocks of ten examples the vote falls in the gap
    on 15-30% of the queries whatever the cap (bench/predictor_real.py's streams), so a
    cap of 2 was spent within the first ten queries and the student learned from about
    five labels. With G = 2 and the largest cap whose k_min fits, 1,079 examples get
    v_max 16 instead of 2 and 1,386 get 32 instead of 8; the vote's released answers
    (91% right) rise from about 5 to 40 on digits and from about 90 to 160 on segment.
    The price, on the one stream where nothing beats the majority class (yeast: no
    classifier we tried, private or not, beats "no"), is the 0.3% of unanimous votes
    answered on the wrong side: 0.4 points below its majority class. Below G = 2 the
    answers keep growing but get noisier (expected from digits' vote counts at v_max 64,
    G = 1.1: almost five times the answers, 80% right instead of 91%).

    ``gap``: the noise scales G (a ``PredictorConfig`` with the same ``gap`` uses the
    sizing); G = 2.5 and 3 were measured against 2 in the seventh round of issue 45
    (``bench/predictor_real.py --gap``, docs/models.md): no better overall.

    Raises InfeasibleParameters with the numbers needed when the examples are too few
    even for v_max = 1 (or the given cap)."""
    caps = V_MAX_LADDER if v_max is None else (v_max,)
    for v in caps:                    # from the largest cap: the first that fits is the answer
        try:
            k_min = smallest_k(epsilon=epsilon, delta=delta, v_max=v, accounting=accounting, gap=gap)
        except InfeasibleParameters:  # more blocks than MAX_BLOCKS: a smaller cap may do
            if v == caps[-1]:
                raise
            continue
        if k_min * MIN_BLOCK <= examples:
            k = max(k_min, min(CLEAR * k_min, examples // MIN_BLOCK, MAX_BLOCKS))
            return k, examples // k, v
    need = k_min * MIN_BLOCK
    raise InfeasibleParameters(
        f"(eps={epsilon}, delta={delta}) with up to v_max={v} hard queries needs k >= "
        f"{k_min:,} blocks of at least {MIN_BLOCK} examples, i.e. {need:,} examples per epoch; "
        f"you have {examples:,}: raise epsilon{lower_v_max(v, ',')}, or gather more examples")


@dataclass
class PredictorState:
    """The predictor's counters, hard queries and ledger as a plain record."""
    epoch: int = -1
    instances: int = 0                   # BetweenThresholds instances started this epoch
    tops: int = 0                        # hard queries this epoch
    queries: int = 0
    version: int = 0                     # regenerations of the hypotheses
    exhausted: bool = False
    bt: BetweenThresholdsState | None = None
    ledger: LedgerState | None = None
    hard_x: list = field(default_factory=list)
    hard_y: list = field(default_factory=list)
    kept: int = 0                        # released answers kept for the student this epoch
    seen: int = 0                        # queries kept for the student this epoch (<= SEEN_MAX)
    student: dict | None = None          # the student's record (learners/student.py), once fitted

    def to_record(self) -> dict:
        """A record that shares no mutable object with this state (the learner appends to
        its hard queries; a stored record must not change with them)."""
        r = dict(vars(self))
        r["bt"] = None if self.bt is None else dict(vars(self.bt))
        r["ledger"] = None if self.ledger is None else dict(vars(self.ledger))
        r["hard_x"], r["hard_y"] = _copied(self.hard_x), list(self.hard_y)
        r["student"] = None if self.student is None else _student_copy(self.student)
        return r

    @classmethod
    def from_record(cls, r: dict) -> "PredictorState":
        """The state of a record, sharing no mutable object with it."""
        r = dict(r)
        r["bt"] = None if r["bt"] is None else BetweenThresholdsState(**r["bt"])
        r["ledger"] = None if r["ledger"] is None else LedgerState(**r["ledger"])
        r["hard_x"], r["hard_y"] = _copied(r["hard_x"]), list(r["hard_y"])
        r.setdefault("kept", 0)
        r.setdefault("seen", 0)
        r["student"] = None if r.get("student") is None else _student_copy(r["student"])
        return cls(**r)


def _student_copy(student: dict) -> dict:
    r = dict(student)
    if "theta" in r:
        r["theta"] = list(r["theta"])
    return r


def _copied(points: list) -> list:
    """Hard-query points (lists of numbers, or numbers) copied."""
    return [list(x) if isinstance(x, list) else x for x in points]


@dataclass(frozen=True)
class Answer:
    """One query's answer: its label (None unless answered), status, hypothesis version and
    outcome."""
    label: int | None
    status: str
    version: int
    outcome: str | None = None           # L / R / TOP (never the count or the noise)


def keyed_permutation(rng: KeyedRandomness, model_id: str, epoch: int, n: int) -> np.ndarray:
    """Fisher-Yates with exact bounded integers from the keyed stream."""
    stream = rng.stream(model_id, PARTITION_PURPOSE, epoch)
    perm = np.arange(n)
    if n > 1:
        js = stream.below(np.arange(n, 1, -1))            # j_i uniform in [0, n - i)
        for i, j in enumerate(js):
            a, b = n - 1 - i, int(j)
            perm[a], perm[b] = perm[b], perm[a]
    return perm


def partition_units(perm: np.ndarray, units, k: int, taught=None) -> list[np.ndarray]:
    """The rows of each of k blocks when every person's rows share a block (module
    docstring, "A person as the privacy unit"): rows with the same unit form a group (a
    row whose unit is None is a group of its own); groups are taken in the order of their
    first row's place in ``perm`` (the epoch's keyed permutation), each to the block with
    the fewest rows so far (the lowest index among equals); a block's rows ascending.
    ``taught`` (a mask; None: all): a row that did not reach the learner is dealt as a
    row of its own (its unit None), then left out of its block, so it changes no other
    row's block. A function of the arrival pattern and the key alone."""
    n = len(units)
    if perm.shape[0] != n:
        raise ParameterError("units", f"<{n} units>", f"one per sample row ({perm.shape[0]})")
    first: dict = {}
    group = np.empty(n, dtype=np.int64)
    for i, u in enumerate(units):
        alone = u is None or (taught is not None and not taught[i])
        group[i] = i if alone else first.setdefault(u, i)
    place = np.empty(n, dtype=np.int64)
    place[perm] = np.arange(n)                         # row -> its place in the permutation
    leaders = np.flatnonzero(group == np.arange(n))
    order = leaders[np.argsort(place[leaders], kind="stable")]
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(int(group[i]), []).append(i)
    heap = [(0, b) for b in range(k)]                  # (rows so far, block): a valid heap
    blocks: list[list[int]] = [[] for _ in range(k)]
    for g in order:
        size, b = heapq.heappop(heap)
        rows = members[int(g)]
        blocks[b].extend(rows)
        heapq.heappush(heap, (size + len(rows), b))
    if taught is not None:
        blocks = [[r for r in rows if taught[r]] for rows in blocks]
    return [np.asarray(sorted(rows), dtype=np.int64) for rows in blocks]


def largest_block(m: int, contributions: int) -> int:
    """The most rows ``partition_units`` can deal to one of k blocks from a sample of at
    most k m rows in which no unit has more than ``contributions`` (c) rows: m + c - 1.
    Proof: a group of g rows (1 <= g <= c) goes to a block with the fewest rows so far,
    which then holds at most the mean of the rows dealt before it, at most
    (k m - g) / k < m, so at most m - 1 (whole rows); after, at most m - 1 + g <= m + c - 1.
    A block only grows by such steps. For c = 1 it is m, a block of the partition without
    units. (The intervals generator's registration check reads it: its fit is cubic in a
    block's points.)"""
    return m + contributions - 1


class PrivatePredictor:
    """Private prediction by subsample-and-aggregate, BetweenThresholds and shrinkage on hard
    queries (seed 001 Algorithm 2).

    >>> import numpy as np
    >>> from dpstream.learners.generators import Thresholds
    >>> config = PredictorConfig(k=100, epsilon=8.0, delta=1e-6, v_max=4)
    >>> model = PrivatePredictor(config=config, generator=Thresholds(), model_id="doc",
    ...                          rng=KeyedRandomness(bytes(32)), sample=1000)
    >>> xs = np.linspace(0, 1, 1000)
    >>> model.learn_many([[x] for x in xs], [1 if x >= 0.5 else -1 for x in xs])[-1].new_epoch
    True
    >>> model.predict_many([[0.1], [0.9]])
    [-1, 1]
    >>> model.ledger.totals().epsilon <= 8.0
    True
    """
    def __init__(self, *, config: PredictorConfig, generator, rng: KeyedRandomness, model_id: str,
                 state: PredictorState | None = None, on_charge=None, sample: int | None = None,
                 epochs: bool = True, student: bool = False):
        if config.k < 1:
            raise ParameterError("k", config.k, ">= 1")
        self.config, self.generator, self.rng, self.model_id = config, generator, rng, model_id
        self.calibration = config.calibration()     # raises ThresholdsTooClose if k too small
        self.state = state or PredictorState()
        self.blocks: list[tuple[np.ndarray, np.ndarray]] = []
        self.H = None
        self._bt: BetweenThresholds | None = None
        self.on_charge = on_charge          # called with each LedgerEntry as it is charged
        self.ledger = None if self.state.ledger is None else self._ledger(self.state.ledger)
        self.sample, self.epochs = sample, epochs   # ``learn_one``: examples per epoch, new epochs
        self._pending: list = []
        # the student (learners/student.py): released answers kept, in arrival order
        self.with_student = student
        self.kept_x: list = []
        self.kept_y: list = []
        self.seen_x: list = []             # the epoch's first SEEN_MAX queries (label spreading)
        self._student_model: StudentModel | None = None
        self._cv_scores: dict = {}          # the student's cross-validation, by answers (fit_student)

    def _ledger(self, state: LedgerState) -> Ledger:
        """The epoch's ledger (one per epoch: epochs see disjoint samples), publishing each
        entry through ``on_charge``; ``state.ledger`` is its record."""
        return Ledger(state, on_entry=[self.on_charge] if self.on_charge else [])

    # ------------------------------------------------------------ epochs
    def start_epoch(self, X, y, units=None, taught=None) -> None:
        """Partition a fresh sample (disjoint from earlier epochs) and generate hypotheses;
        ``units``: each row's privacy unit (a person's pseudonym, or None for a row of its
        own) when the privacy unit is a person, and ``taught``: which rows reached the
        learner (``partition``; the others' values are never read, and any number of rows
        may be taught, none included: every block is then its generator's fit to no rows)."""
        X, y = np.asarray(X), np.asarray(y)
        k = self.config.k
        if X.shape[0] != y.shape[0] or X.shape[0] < k:
            raise ParameterError("sample size", X.shape[0], f">= k = {k} examples with labels")
        if not np.isin(y if taught is None else y[np.asarray(taught, dtype=bool)], (-1, 1)).all():
            raise ParameterError("y", "<labels>", "values in {-1, +1}")
        self._checked_rows(X, X.shape[0] if X.ndim else 0, "X")
        s = self.state
        s.epoch += 1
        s.instances = s.tops = 0
        s.exhausted = False
        s.hard_x, s.hard_y = [], []
        s.kept, s.seen, s.student = 0, 0, None
        self.kept_x, self.kept_y, self.seen_x = [], [], []
        self._cv_scores = {}
        if self.config.accounting == "epoch":
            fresh = Ledger.create(epsilon=self.config.epsilon, delta=self.config.delta, rule="basic")
        else:
            fresh = Ledger.create(epsilon=self.config.epsilon, delta=self.config.delta,
                                  rule="best", delta_prime=self.config.budget().delta_prime)
        self.ledger = self._ledger(fresh.state)
        s.ledger = fresh.state
        self.blocks = self.partition(X, y, s.epoch, units, taught)
        self.generator.bind(self.blocks, s.hard_x, s.hard_y)
        self._regenerate(range(k))
        self._start_instance()

    def partition(self, X, y, epoch: int, units=None, taught=None) -> list[tuple[np.ndarray, np.ndarray]]:
        """The epoch's k disjoint blocks, rows as the generator takes them (``_rows``):
        without ``units``, k blocks of m = n // k examples (keyed permutation, the surplus
        dropped); with them, all of a person's rows in one block, and the rows not
        ``taught`` in none (``partition_units``)."""
        X, y = np.asarray(self._rows(X)), np.asarray(y)
        k = self.config.k
        perm = keyed_permutation(self.rng, self.model_id, epoch, X.shape[0])
        if units is not None:
            return [(X[rows], y[rows]) for rows in partition_units(perm, units, k, taught)]
        m = X.shape[0] // k
        perm = perm[: k * m]
        return [(X[perm[i * m:(i + 1) * m]], y[perm[i * m:(i + 1) * m]]) for i in range(k)]

    def restore(self, blocks, H, kept=None, seen=None) -> None:
        """Reattach stored blocks, hypotheses, the released answers kept for the student
        ((x, label) rows) and the queries it has seen (x rows) after loading ``state``."""
        self.blocks, self.H = blocks, self.generator.stack(H)
        self.generator.bind(blocks, self.state.hard_x, self.state.hard_y)
        kept = list(kept or [])[: self.state.kept]
        self.kept_x, self.kept_y = [r[:-1] for r in kept], [int(r[-1]) for r in kept]
        self.seen_x = [list(r) for r in list(seen or [])[: self.state.seen]]
        if self.state.bt is not None and not self.state.exhausted:
            self._bt = BetweenThresholds(calibration=self.calibration, rng=self.rng,
                                         model_id=self.model_id, state=self.state.bt,
                                         purpose=f"{BT_PURPOSE}/{self.state.epoch}")

    def _regenerate(self, which) -> None:
        hx, hy = self.state.hard_x, self.state.hard_y
        hyps = list(self.H) if self.H is not None and len(self.blocks) == len(self.H) else \
            [None] * len(self.blocks)
        for i in which:
            Xb, yb = self.blocks[i]
            hyps[i] = self.generator.fit(Xb, yb, hx, hy)
        self.H = self.generator.stack(hyps)
        self.state.version += 1

    def _start_instance(self) -> None:
        """A fresh BetweenThresholds instance, paid for first: per instance ("instance"
        accounting), or once for the whole epoch ("epoch", which then caps the epoch at
        v_max hard queries)."""
        s, ledger = self.state, self.ledger
        try:
            if self.config.accounting == "epoch":
                if s.tops >= self.config.v_max:
                    t = ledger.totals()
                    raise BudgetExhausted(mechanism=EPOCH_MECHANISM, requested=(0.0, 0.0),
                                          spent=(t.epsilon, t.delta),
                                          budget=(self.config.epsilon, self.config.delta))
                if s.instances == 0:
                    ledger.charge(EPOCH_MECHANISM, self.calibration.epsilon, self.calibration.delta)
            else:
                budget = self.config.budget()
                ledger.charge("between_thresholds", budget.eps_bt, budget.delta_bt)
        except BudgetExhausted:
            s.exhausted, self._bt = True, None
            if self.with_student and self.kept_y:      # spreading is offered from now on
                self._fit_student()
            return
        finally:
            s.ledger = ledger.state
        s.bt = BetweenThresholdsState(instance=s.instances)
        s.instances += 1
        self._bt = BetweenThresholds(calibration=self.calibration, rng=self.rng,
                                     model_id=self.model_id, state=s.bt,
                                     purpose=f"{BT_PURPOSE}/{s.epoch}")

    # ------------------------------------------------------------ the learner protocol
    def learn_one(self, x, y: int) -> Step:
        """Keep a labelled example for the next epoch; once k * m are kept (``sample``) and
        the model has no epoch or has exhausted one (``epochs``), start an epoch on them.
        Nothing about the example is released until then (its prediction is None)."""
        if self.sample is None:
            raise ParameterError("sample", None, "a sample size (k * m) to buffer examples for")
        self._checked_rows(x, None, "x")                # refused before it is kept
        if y not in (-1, 1):
            raise ParameterError("y", "<label>", "-1 or +1")
        if len(self._pending) < self.sample:           # a full buffer's surplus is dropped
            self._pending.append((np.asarray(x, dtype=float), int(y)))
        s = self.state
        started = len(self._pending) >= self.sample and (s.epoch < 0 or (s.exhausted and self.epochs))
        if started:
            X = np.stack([r for r, _ in self._pending])
            self.start_epoch(X, np.array([t for _, t in self._pending]))
            self._pending = []
        return Step(None, s.version, released=started, new_epoch=started)

    def learn_many(self, X, ys) -> list[Step]:
        return [self.learn_one(x, y) for x, y in zip(X, ys)]

    def predict_one(self, x) -> int | None:
        """The answer's label (None: not answered). A query is a private release: it may
        spend budget (a hard query), so this is not free as in the online learners."""
        return self.answer(x).label

    def predict_many(self, X) -> list[int | None]:
        return [self.predict_one(x) for x in X]

    # ------------------------------------------------------------ queries
    def _fit_student(self) -> None:
        s = self.state
        s.student = fit_student(self.kept_x, self.kept_y, self.seen_x if s.exhausted else (),
                                scores=self._cv_scores)

    def _student_label(self, x) -> int:
        """The student's label; the rows it reads, as arrays (and its graph), built once per fit."""
        student = self.state.student
        if self._student_model is None or self._student_model.student is not student:
            self._student_model = StudentModel(student, self.kept_x, self.kept_y, self.seen_x)
        return self._student_model.label(x)

    def _see(self, x) -> None:
        """Keep the epoch's first SEEN_MAX queries for the student; once the budget is spent,
        refit it as their number doubles (public times: a function of the query count)."""
        s = self.state
        if not self.with_student or s.epoch < 0 or s.seen >= SEEN_MAX:
            return
        self.seen_x.append(np.asarray(x, dtype=float).ravel().tolist())
        s.seen += 1
        if s.exhausted and s.student is not None and refit_due(s.seen):
            self._fit_student()

    def votes(self, x) -> np.ndarray:
        return self.generator.votes(self.H, x)

    def _rows(self, X) -> np.ndarray:
        """Points as the generator takes them: dense rows clamped to [-ROW_BOUND, ROW_BOUND]
        (module docstring)."""
        return np.clip(np.asarray(X, dtype=float), -ROW_BOUND, ROW_BOUND) if self.generator.dense else X

    def _checked_rows(self, X, rows: int | None, what: str) -> None:
        """A library caller's dense rows: the generator's width and finite (before, a query
        of the wrong width raised numpy's broadcast error and a NaN query was answered).
        The worker's rows pass its schema first, so this never refuses one of them."""
        if not self.generator.dense:
            return
        X = np.asarray(X)
        shape = (self.generator.d,) if rows is None else (rows, self.generator.d)
        if X.shape != shape or not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
            raise ParameterError(what, f"<array of shape {X.shape}>",
                                 f"real numbers of shape {shape}")
        if not np.isfinite(X).all():
            raise ParameterError(what, "<row>", "finite numbers (no NaN or infinity)")

    def answer(self, x) -> Answer:
        self._checked_rows(x, None, "x")
        x = self._rows(x)
        a = self._answer(x)
        self._see(x)
        return a

    def _answer(self, x) -> Answer:
        s = self.state
        if s.epoch < 0:
            return Answer(None, NO_EPOCH, s.version)
        if s.exhausted or self._bt is None:
            if self.with_student and s.student is not None:   # post-processing of released answers
                s.queries += 1
                return Answer(self._student_label(x), STUDENT, s.version)
            return Answer(None, EXHAUSTED, s.version)
        s.queries += 1
        count = int((self.votes(x) == 1).sum())
        out = self._bt.query(count)
        if out in (L, R):
            label = -1 if out == L else 1
            if self.with_student and s.kept < STUDENT_MAX:
                self.kept_x.append(np.asarray(x, dtype=float).ravel().tolist())
                self.kept_y.append(label)
                s.kept += 1
                if refit_due(s.kept):
                    self._fit_student()
            return Answer(label, ANSWERED, s.version, out)
        # TOP: the student's label (a keyed coin before there is one), record the hard
        # query, shrink, fresh instance.
        if self.with_student and s.student is not None:
            label = self._student_label(x)
        else:
            bit = self.rng.stream(self.model_id, TOP_PURPOSE, (s.epoch, s.tops)).bits(1)[0]
            label = 1 if bit else -1
        version = s.version
        s.tops += 1
        s.hard_x.append(np.asarray(x).tolist())
        s.hard_y.append(label)
        self.generator.bind(self.blocks, s.hard_x, s.hard_y)
        if self.generator.oblivious:
            stale = np.flatnonzero(self.votes(x) != label)
        else:
            stale = np.arange(len(self.blocks))
        self._regenerate(stale)
        self._start_instance()
        return Answer(label, HARD, version, TOP)
