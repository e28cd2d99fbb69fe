"""Kind ``predictor``: private prediction by subsample-and-aggregate with BetweenThresholds
and shrinkage on hard queries (seed 001 Algorithm 2, learners/predictor.py).

Records: ``head`` (counters, BetweenThresholds state, hard queries, the epoch ledger),
``buffer/<epoch>/<chunk>`` (the labelled sample an epoch is partitioned from, and the
next epoch's, filling), ``hyp/<epoch>/<version>/<chunk>`` (the blocks' hypotheses),
``kept/<epoch>/<chunk>`` and ``seen/<epoch>/<chunk>`` (with ``student``: the epoch's
released answers (x, label) the student is trained on, and its first SEEN_MAX queries
(x), label spreading's unlabelled points; the student's record sits in the head once
fitted), ``hard/<epoch>/<chunk>`` (the epoch's hard queries, [x, label] each). The hard
queries were in the head before: v_max rows of d values made it grow past a record's
budget (d = 1,000, v_max 64: 1.3 MB, over Kafka's 1 MiB; the changelog write failed and
the model could not load after a restart: an attacker's pass). A head written before
keeps them inline and still loads. With a person as the privacy unit,
``rowunit/<epoch>/<chunk>`` holds each buffered row's pseudonym, in the buffer's order: the
partition puts a person's rows in one block (learners/predictor.py). An epoch's sample is
k x m arriving examples: one that does not reach the learner (agents/units.py) takes its
place in the buffer as an empty row (its unit None), so when an epoch starts, and
``buffered_examples`` on /status, depend on the arrivals alone; it is dealt as a row of
its own and left out of its block (learners/predictor.py ``partition_units``).
"""
from __future__ import annotations

import math

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from dpstream.learners.decision_list import FeatureFamily
from dpstream.learners.generators import (DecisionLists, FiniteClass, Halfspaces, Intervals,
                                          LogisticRegressions, MonotoneConjunctions,
                                          NearestNeighbours, Thresholds)
from dpstream.learners.predictor import (EPOCH_MECHANISM, EXHAUSTED, HARD, NO_EPOCH, STUDENT,
                                         V_MAX_LADDER, PredictorConfig, PredictorState,
                                         PrivatePredictor, largest_block, lower_v_max, size_predictor,
                                         smallest_k, MAX_BLOCKS, MIN_BLOCK)
from dpstream.mechanisms.errors import DPStreamError, InfeasibleParameters, ThresholdsTooClose
from dpstream.schemas.config import KindParams

from .base import REAL, Handler, max_contributions
from .decision_list import rules_problem
from .storage import FLOAT_BYTES, RECORD_BYTES, rows_per_record

#: Hypothesis classes a predictor can be registered with (learners/generators.py): real x for
#: halfspaces (R^d), thresholds and intervals (d = 1); x in {-1, +1}^d for the monotone
#: conjunctions and disjunctions and the decision lists; a domain index x = [i] for a finite
#: class given as its prediction table (with declared features, i is the record's point of
#: the domain the fields span: ``Featuriser.point``, and the table has one column per point).
GENERATORS = ("halfspace", "thresholds", "intervals", "conjunctions", "disjunctions",
              "decision_lists", "finite", "logistic", "nearest")
#: ``logistic``: halfspaces in R^d fitted per block by regularised logistic regression (issue 45);
#: ``nearest``: each block answers with the label of its nearest example (issue 45, second round)
# hard_query_weight defaults. Logistic blocks did better at 0 (docs/models.md, seventh round),
# but a stored registration reads its default when it loads: changing one changes a running
# model's answers and the replay of its exports, so the docs recommend 0 to new registrations.
HARD_WEIGHT = {"halfspace": 10_000.0, "logistic": 1.0, "nearest": 0.0}
REAL_FEATURES = ("halfspace", "logistic", "nearest")      # generators a student can follow
NEWTON_MAX_DIMENSION = 256   # logistic blocks and the student: an epoch start of k blocks at
# d = 103 took ~10 s here (bench/predictor_real.py, yeast); the cost grows as d^3
BINARY_GENERATORS = ("conjunctions", "disjunctions", "decision_lists")
FINITE_TABLE_ENTRIES = 100_000   # a finite class travels inside its registration record
NEAREST_WORK = 1 << 24           # k m d of nearest blocks: a query reads every example of the
# epoch, about 5 ns a number here (90 ms and a 134 MB temporary at the cap; 10^8 examples
# in 100 dimensions would ask ~50 s and 80 GB per query)
INTERVAL_POINTS = 256            # points of an intervals block (m + v_max, and c - 1 more rows
# with a person as the unit: ``_intervals_problem``): its exact fit is O(points^3) (every
# pair of points against every point; at m = 10,000 it asked for ~500 GB: an attacker's
# pass). Thresholds and finite classes fit in O(m log m) and O(|class| x N).


class PredictorParams(KindParams):
    """The private predictor. Give ``examples`` (per epoch: k, m and v_max then follow from
    the budget) or both ``k`` and ``m``. ``v_max`` absent: the largest cap of
    learners.predictor.V_MAX_LADDER that the examples (or the given k) allow."""
    kind: Literal["predictor"] = "predictor"
    generator: Literal[GENERATORS] = "halfspace"
    adaptive: bool = False                    # halfspaces only: the seed's adaptive generator
    k: int | None = Field(default=None, ge=1, le=MAX_BLOCKS)  # blocks (learners.predictor.MAX_BLOCKS)
    m: int | None = Field(default=None, ge=1, le=100_000)     # examples per block; an epoch needs k * m
    examples: int | None = Field(default=None, ge=1, le=100_000_000)  # or: examples per epoch
    v_max: int | None = Field(default=None, ge=1, le=100_000)   # hard queries per epoch
    epochs: bool = True                       # start a new epoch on fresh data when exhausted
    accounting: Literal["epoch", "instance"] = "epoch"   # learners/predictor.py
    hard_query_weight: float | None = Field(default=None, ge=0, le=1e6)   # halfspace, logistic,
    # nearest: a hard query's weight against one example's (HARD_WEIGHT; 0: hard queries do not
    # reshape the blocks; nearest: any weight above 0 makes a hard query a point of the blocks)
    balanced: bool = False                    # logistic: weigh each block's classes equally
    student: bool = False                     # answer after exhaustion by a model trained on the
    # released answers (learners/student.py: then one querier's queries shape others' answers)
    max_conjunction: int = Field(default=1, ge=1, le=3)     # decision_lists: rule size
    negations: bool = True                                  # decision_lists: negated literals
    table: list[list[Literal[-1, 1]]] | None = None         # finite: table[h][i], labels of
    # hypothesis h on domain point i (the class is public, so it may sit in the config)

    @model_validator(mode="after")
    def _shape(self):
        if (self.k is None) != (self.m is None) or (self.k is None) == (self.examples is None):
            raise ValueError("give either k and m, or examples (k and m then follow from the budget)")
        if (self.generator == "finite") != (self.table is not None):
            raise ValueError("the finite generator needs 'table' (and only it takes one)")
        if self.table is not None:
            sizes = {len(row) for row in self.table}
            if not self.table or len(sizes) != 1 or 0 in sizes:
                raise ValueError("table must be a non-empty list of equally long, non-empty rows")
            if len(self.table) * sizes.pop() > FINITE_TABLE_ENTRIES:
                raise ValueError(f"table has more than {FINITE_TABLE_ENTRIES} entries")
        if self.adaptive and self.generator != "halfspace":
            raise ValueError("adaptive applies to the halfspace generator only")
        if self.hard_query_weight is not None and self.generator not in HARD_WEIGHT:
            raise ValueError(f"hard_query_weight={self.hard_query_weight} applies to the "
                             f"{', '.join(HARD_WEIGHT)} generators only, not generator={self.generator!r}")
        if self.balanced and self.generator != "logistic":
            raise ValueError(f"balanced=True applies to the logistic generator only, not "
                             f"generator={self.generator!r}")
        if self.student and self.generator not in REAL_FEATURES:
            raise ValueError(f"student=True needs real features (generator "
                             f"{', '.join(map(repr, REAL_FEATURES))}), not generator={self.generator!r}")
        return self

    def input_form(self) -> str:
        return "binary" if self.generator in BINARY_GENERATORS else "real"

    def declared_dimension(self, fields: list) -> int:
        """A finite class takes one entry, the record's point (``PredictorKind.featurise``)."""
        return 1 if self.generator == "finite" else super().declared_dimension(fields)


def _domain_problem(config) -> str | None:
    """Why a finite table does not fit the domain of the declared features (None: it does:
    every record then has a point among the table's columns, so none is out of domain)."""
    f = PredictorKind.featuriser(config)
    n = len(config.params.table[0])
    if n == f.domain_size:
        return None
    slots = ", ".join(f"{x.name} {x.binary_size}" for x in f.fields)
    return (f"the finite table has {n:,} columns, but the declared features span {f.domain_size:,} "
            f"points (slots per field: {slots}; a record's point is the row-major index of its "
            f"fields' slots, missing and unseen values included): give {f.domain_size:,} labels "
            "per hypothesis, or declare fields that span as many points as the table has columns")


def shape(config) -> tuple[int, int, int]:
    """(k, m, v_max) as registered, or sized from the budget and ``examples``
    (learners.predictor.size_predictor)."""
    p, b = config.params, config.budget
    if p.k is not None:
        return p.k, p.m, p.v_max if p.v_max is not None else _cap(config)
    return size_predictor(epsilon=b.epsilon, delta=b.delta, v_max=p.v_max, examples=p.examples,
                          accounting=p.accounting)


def _cap(config) -> int:
    """v_max for a registered k: the largest cap of the ladder whose fewest blocks fit k
    (the smallest cap when none does: the calibration then says what is missing)."""
    p, b = config.params, config.budget
    for v in V_MAX_LADDER:
        try:
            if smallest_k(epsilon=b.epsilon, delta=b.delta, v_max=v, accounting=p.accounting) <= p.k:
                return v
        except InfeasibleParameters:     # more than MAX_BLOCKS blocks: a smaller cap may do
            continue
    return V_MAX_LADDER[-1]


def _too_few_blocks(config) -> str:
    """For a registered k the budget's noise does not fit: the refusal naming MAX_BLOCKS
    when no k up to it would, else the blocks that would (``smallest_k``: the first k of
    its 2% steps that the calibration accepts, so within 2% of the fewest).
    The calibration's own message estimates that number from the noise a wide gap needs
    and overshoots (k = 600 at eps 1, v_max 64: "k >= about 1497", where 646 is accepted)."""
    p, b = config.params, config.budget
    v_max = shape(config)[2]
    try:
        need = smallest_k(epsilon=b.epsilon, delta=b.delta, v_max=v_max, accounting=p.accounting)
    except InfeasibleParameters as err:
        return str(err)
    return (f"k={p.k:,} blocks are too few for (eps={b.epsilon}, delta={b.delta}) with up to "
            f"v_max={v_max} hard queries: it needs k >= {need:,} blocks (the vote's thresholds 3k/8 "
            "and 5k/8 leave too little room for the noise below that): raise k (and the examples "
            f"per epoch with it), raise epsilon{lower_v_max(v_max)}")


def _intervals_problem(config) -> str | None:
    """Why an intervals block could hold more than INTERVAL_POINTS points (None: it cannot):
    m examples and up to v_max hard queries, and, with a person as the unit, up to c - 1
    rows more (c = max_contributions: a person's rows share a block, which then holds at
    most m + c - 1 rows, learners/predictor.py ``largest_block``). A registration that
    could exceed it is refused, rather than a person's rows cut to fit: then the
    admission's bound stays the only rule on which rows reach the learner."""
    k, m, v_max = shape(config)
    c = max_contributions(config)
    points = largest_block(m, c) + v_max
    if points <= INTERVAL_POINTS:
        return None
    if c > 1 and m + v_max <= INTERVAL_POINTS:
        return (f"an intervals block of m={m:,} examples, up to v_max={v_max:,} hard queries and, with a "
                f"person as the unit, up to max_contributions - 1 = {c - 1:,} more rows of one person "
                f"has up to {points:,} points; the exact fit tries every pair of them, so at most "
                f"{INTERVAL_POINTS} (docs/limits.md): lower max_contributions to at most "
                f"{INTERVAL_POINTS - m - v_max + 1:,}, or lower m (give k) or v_max")
    return (f"an intervals block of m={m:,} examples and up to v_max={v_max:,} hard queries "
            f"has {m + v_max:,} points; the exact fit tries every pair of them, so at most "
            f"{INTERVAL_POINTS} (docs/limits.md): lower m (give k), or lower v_max")


def _unit_rows(config) -> list[tuple[str, str, str]]:
    """A person as the privacy unit: one person, one block, one vote (no row for one example)."""
    if config.privacy_unit is None:
        return []
    k, m, _ = shape(config)
    return [("privacy unit", f"a person: at most {max_contributions(config)} examples per epoch's sample, "
             f"all in one block", "registration (learners/predictor.py partition_units)"),
            ("eps per person and epoch = per example", f"{config.budget.epsilon:g}",
             "a person changes one block's hypothesis: one vote per query, the same charges")]


def predictor_config(config) -> PredictorConfig:
    p, b = config.params, config.budget
    k, _, v_max = shape(config)
    return PredictorConfig(k=k, epsilon=b.epsilon, delta=b.delta, v_max=v_max, accounting=p.accounting)


def generator(config):
    """The registered hypothesis class as a generator of learners/generators.py."""
    p, d = config.params, config.dimension
    weight = p.hard_query_weight if p.hard_query_weight is not None else HARD_WEIGHT.get(p.generator)
    if p.generator == "halfspace":
        return Halfspaces(d, adaptive=p.adaptive, hard_weight=weight)
    if p.generator == "logistic":
        return LogisticRegressions(d, hard_weight=weight, balanced=p.balanced)
    if p.generator == "nearest":
        return NearestNeighbours(d, hard_weight=weight)
    if p.generator in ("conjunctions", "disjunctions"):
        return MonotoneConjunctions(d, disjunction=p.generator == "disjunctions")
    if p.generator == "decision_lists":
        return DecisionLists(FeatureFamily(d, p.max_conjunction, p.negations))
    if p.generator == "finite":
        return FiniteClass(p.table)
    return {"thresholds": Thresholds, "intervals": Intervals}[p.generator]()


class PredictorKind(Handler):
    name = "predictor"
    Params = PredictorParams
    heavy = True            # an epoch start partitions and fits k blocks; a hard query refits
    mechanisms = (EPOCH_MECHANISM, "between_thresholds")
    epochs_on_fresh_examples = True
    after_stop = {"frozen": "its hard queries are spent; later answers come from its student, a model "
                            "trained on the answers it released (post-processing, free), until a new "
                            "epoch starts on fresh examples (if its registration lets it: \"epochs\": "
                            "true, the default)",
                  "budget_exhausted": "its hard queries are spent; later queries get no label until a "
                                      "new epoch starts on fresh examples (if its registration lets it: "
                                      "\"epochs\": true, the default)"}

    # ------------------------------------------------------------ the kind
    @classmethod
    def buffer_chunk(cls, config) -> int:
        return rows_per_record(config.dimension + 1, FLOAT_BYTES, 256)

    @classmethod
    def learning_note(cls, config) -> str | None:
        k, m, _ = shape(config)
        return (f"its first epoch starts once {k * m:,} labelled examples have arrived ({k:,} "
                f"blocks of {m:,}, from its registration), and these queries came before that")

    @classmethod
    def registration_notes(cls, config) -> list[str]:
        """The privacy unit's line (a person: one vote, so epsilon per person is the
        per-example one), then ``_advice``."""
        notes = cls.unit_note(config, config.budget.epsilon, config.budget.epsilon)
        if config.privacy_unit is not None:
            try:
                k, m, _ = shape(config)
            except DPStreamError:
                return notes + cls._advice(config)
            if max_contributions(config) > m:
                notes.append(f"a person may have {max_contributions(config)} examples in an epoch's sample, "
                             f"more than a block's {m}: one person can make a block's hypothesis alone "
                             "(and with fewer persons than blocks, a block is empty): lower "
                             "max_contributions or give more examples per epoch")
        return notes + cls._advice(config)

    @classmethod
    def _advice(cls, config) -> list[str]:
        """Advice on defaults a registration left as they are (fields it did not give; a
        stored registration gives them all, so a worker's restart says nothing). The
        defaults stay the seed's and what running models were registered with: a worker
        reads a default when it loads a model, so changing one would change a running
        model's answers. Measurements: docs/models.md (bench/predictor_real.py, real
        sets; nearest blocks with a student over 10 keys, halfspaces over 3)."""
        p = config.params
        given = p.model_fields_set
        if "generator" not in given:
            return ["generator 'halfspace' (the default: the seed's LP per block) answered below "
                    "the majority class on 5 of 8 real data sets, where \"generator\": \"nearest\" "
                    "answered above it on 7 (both with \"student\": true; docs/models.md; a "
                    "student learns from the queries, so one querier's queries shape the answers "
                    "others get)"]
        if p.generator in REAL_FEATURES and not p.student:
            then = ("then nothing until a new epoch starts on fresh examples" if p.epochs
                    else "then nothing more (\"epochs\": false)")
            return [f"without \"student\": true it answers until its v_max hard queries are spent, "
                    f"{then} (nearest blocks on the real sets of docs/models.md with 1,000 "
                    "examples or more: 10% to 100% of the queries answered; a student answers the "
                    "rest, learning from the queries)"]
        if p.generator == "logistic" and "hard_query_weight" not in given:
            return ["logistic blocks take each hard query as one example (hard_query_weight 1, "
                    "the default); with a student, 0 answered better on every real data set it "
                    "changed (docs/models.md): set \"hard_query_weight\": 0"]
        return []

    @classmethod
    def featurise(cls, config, features: dict) -> dict:
        """A finite class's row is x = [the record's point of the fields' domain], which the
        registration matched to the table's columns (``_domain_problem``)."""
        if config.params.generator == "finite":
            return {"x": [float(cls.featuriser(config).point(features))]}
        return super().featurise(config, features)

    @classmethod
    def config_problem(cls, config) -> str | None:
        p, d = config.params, config.dimension
        problem = _domain_problem(config) if p.generator == "finite" and config.features else None
        if problem:
            return problem
        if rows_per_record(d + 1, FLOAT_BYTES, 256) == 0:
            return (f"predictor rows of dimension {d} do not fit one {RECORD_BYTES:,}-byte record: "
                    f"at most {RECORD_BYTES // FLOAT_BYTES - 1:,} dimensions")
        if d > NEWTON_MAX_DIMENSION and (p.generator == "logistic" or p.student):
            return (f"dimension {d} is above the {NEWTON_MAX_DIMENSION} that logistic blocks and the "
                    "student fit by Newton's method in bounded time (O(d^3) per step, k blocks): "
                    "declare fewer features or use generator 'halfspace' without a student")
        if p.generator == "decision_lists" and rules_problem(d, p):
            return rules_problem(d, p)
        if p.generator in ("thresholds", "intervals", "finite") and d != 1:
            return f"the {p.generator} generator needs dimension 1"
        if rows_per_record(generator(config).width, FLOAT_BYTES, 1) == 0:
            return (f"one {p.generator} hypothesis of dimension {d} does not fit one "
                    f"{RECORD_BYTES:,}-byte record")
        if p.m is not None and p.m < MIN_BLOCK:
            return (f"m={p.m} examples per block is below the {MIN_BLOCK} a block needs to give "
                    "its hypothesis a chance; give 'examples' instead and let the budget size k and m")
        try:
            predictor_config(config).calibration()
        except DPStreamError as err:
            if p.k is not None and isinstance(err, ThresholdsTooClose):
                return _too_few_blocks(config)
            return str(err)
        if p.generator == "nearest" and math.prod(shape(config)[:2]) * d > NEAREST_WORK:
            k, m, _ = shape(config)
            return (f"nearest-neighbour blocks compare each query with every example of the epoch: "
                    f"{k:,} blocks of {m:,} in {d:,} dimensions are {k * m * d:,} numbers a query, "
                    f"above the {NEAREST_WORK:,} a worker reads per query (docs/limits.md): give "
                    "fewer examples per epoch, or \"generator\": \"logistic\" (with "
                    "\"hard_query_weight\": 0)")
        if p.generator == "intervals":
            return _intervals_problem(config)
        return None

    @classmethod
    def input_problem(cls, config, features) -> str | None:
        if features.active is not None and cls.input_form(config) == REAL:
            return "this predictor takes dense x"
        p = config.params
        if p.generator == "finite":
            n = len(p.table[0])
            v = features.x[0] if features.x is not None else None
            if v is None or not (float(v).is_integer() and 0 <= v < n):
                return f"out of domain: this model needs x = [i] with i an integer in [0, {n})"
        return None

    @classmethod
    def status(cls, config, head):
        s = head["predictor"]
        return {"epoch": s["epoch"], "rounds": s["queries"], "hard_queries": s["tops"],
                "hypothesis_version": s["version"], "exhausted": s["exhausted"],
                "student": s.get("student") is not None,
                "buffered_examples": head["buffer_n"]}, s["ledger"]

    @classmethod
    def parameter_rows(cls, config):
        p = config.params
        pc = predictor_config(config)
        cal = pc.calibration()
        k, m, v_max = shape(config)
        rows = [("k blocks x m", f"{k} x {m}", "registration" if p.k else
                 "sized from the budget (learners.predictor.size_predictor)"),
                ("v_max hard queries per epoch", str(v_max), "registration" if p.v_max else
                 "the largest the budget allows (learners.predictor.size_predictor)"),
                ("student", "yes: trained on the released answers, labels hard queries and answers "
                 "after exhaustion" if p.student else "no", "registration (learners/student.py)")]
        if p.accounting == "epoch":
            rows += [("epoch guarantee (eps, delta)", f"{cal.epsilon:.4g}, {cal.delta:.3g}",
                      "one supermartingale per epoch (mechanisms.bt_epoch), charged once"),
                     ("psi, c_top per hard query", f"{cal.psi:.4g}, {cal.c_top:.4g}",
                      "eps = psi ln(1/delta) + v_max c_top")]
        else:
            budget = pc.budget()
            rows += [("eps_BT, delta_BT", f"{budget.eps_bt:.4g}, {budget.delta_bt:.3g}",
                      "seed 001 Thm 3 over v_max (mechanisms.params.predictor_instance_budget)")]
        return rows + [("thresholds A, B", f"{cal.lower:g}, {cal.upper:g}", "3k/8, 5k/8 (seed 001 Claim 2)"),
                       ("noise scale b", f"{float(cal.scale):.4g}", f"{p.accounting} calibration"),
                       ("gap k/4 in noise scales", f"{(k / 4) / float(cal.scale):.3g}",
                        f">= {pc.gap:g} (learners.predictor.size_predictor)" if p.accounting == "epoch"
                        else ">= 3 (single-instance calibration)")] + _unit_rows(config)

    # ------------------------------------------------------------ one model
    @property
    def hyp_chunk(self) -> int:
        """Hypotheses per record: 1000, fewer for wide hypotheses (halfspaces in many
        dimensions, long decision lists)."""
        return max(1, rows_per_record(self.model.generator.width, FLOAT_BYTES, 1000))

    def create(self, outputs) -> None:
        self._begin(outputs)
        self._build(PredictorState())
        self.buffer_n = 0            # examples buffered for the next epoch
        self.epoch_n = 0             # examples the current epoch was partitioned from
        self._saved_version = None
        self._hard_chunked = True    # hard queries in hard/<epoch>/<chunk> records (``save``)

    def _build(self, pstate: PredictorState) -> None:
        self.model = PrivatePredictor(config=predictor_config(self.config),
                                      generator=generator(self.config), rng=self.rng,
                                      model_id=self.model_id, state=pstate, on_charge=self._charged,
                                      student=self.config.params.student)

    def load(self, head: dict) -> None:
        self._load_head(head)
        pstate = PredictorState.from_record(head["predictor"])
        # a head written before held its hard queries inline (loaded so); ``save`` moves them
        self._hard_chunked = bool(head.get("hard_in_chunks"))
        if self._hard_chunked:
            rows = self._kept("hard", pstate.epoch, pstate.tops)
            pstate.hard_x, pstate.hard_y = [r[0] for r in rows], [int(r[1]) for r in rows]
        self._build(pstate)
        self.buffer_n, self.epoch_n = head["buffer_n"], head["epoch_n"]
        s = self.model.state
        self.epoch = s.epoch
        self._saved_version = (s.epoch, s.version)
        if s.epoch >= 0:
            X, y, units, taught = self._sample(s.epoch, self.epoch_n)
            H = []
            per = self.hyp_chunk
            for j in range((shape(self.config)[0] + per - 1) // per):
                H.extend(self.state[self.key("hyp", s.epoch, s.version, j)])
            self.model.restore(self.model.partition(X, y, s.epoch, units, taught), H,
                               self._kept("kept", s.epoch, s.kept), self._kept("seen", s.epoch, s.seen))

    def _keep(self, name: str, epoch: int, n: int, row: list) -> None:
        """Store the n-th row kept for the student (``kept``: a released answer (x, label);
        ``seen``: a query's x), in chunks as the buffered examples are (a row rewritten after
        a crash is truncated, not doubled)."""
        key = self.key(name, epoch, n // self.chunk)
        rows = list(self.state.get(key, []))[:n % self.chunk]
        rows.append(row)
        self._put(key, rows)

    def _kept(self, name: str, epoch: int, n: int) -> list:
        rows = []
        for chunk in range((n + self.chunk - 1) // self.chunk):
            rows.extend(self.state[self.key(name, epoch, chunk)])
        return rows[:n]

    def _sample(self, epoch: int, n: int):
        """(X, y, units, taught) of the epoch's sample of n arrivals, for
        learners/predictor.py ``partition``: the buffered rows; with a person as the unit,
        each row's pseudonym, and which rows reached the learner (an empty place, its unit
        None, stands for one that did not: its X and y here are zeros and +1, never read);
        units and taught None when the unit is one example."""
        rows = self._load_rows(epoch, n)
        units = taught = None
        if self.config.privacy_unit is not None:
            units = self._kept("rowunit", epoch, n)
            taught = [bool(r) for r in rows]
            rows = [r or [0.0] * self.config.dimension + [1] for r in rows]
        rows = np.asarray(rows, dtype=float)
        return rows[:, :-1], rows[:, -1].astype(int), units, taught

    def save(self) -> None:
        s = self.model.state
        if s.epoch >= 0 and self._saved_version != (s.epoch, s.version):
            H = self.model.generator.dump(self.model.H)
            per = self.hyp_chunk
            for j in range(0, len(H), per):
                self._put(self.key("hyp", s.epoch, s.version, j // per), H[j:j + per])
            self._saved_version = (s.epoch, s.version)
        if not self._hard_chunked:
            # a head of before held the hard queries inline: every row to its chunk, in order
            # (one ``on_query`` kept since the load is rewritten in its place)
            for i, (x, label) in enumerate(zip(s.hard_x, s.hard_y)):
                self._keep("hard", s.epoch, i, [x, label])
            self._hard_chunked = True
        record = s.to_record()
        record["hard_x"], record["hard_y"] = [], []        # in hard/<epoch>/<chunk> (``on_query``)
        self._write_head({"predictor": record, "buffer_n": self.buffer_n,
                          "epoch_n": self.epoch_n, "hard_in_chunks": True})

    def live(self) -> set[str]:
        """The epoch's sample and hypotheses, and the next epoch's buffer (``load``)."""
        s = self.model.state
        keys = self._chunks("buffer", s.epoch + 1, n=self.buffer_n, per=self.chunk)
        if self.config.privacy_unit is not None:
            keys |= self._chunks("rowunit", s.epoch + 1, n=self.buffer_n, per=self.chunk)
            if s.epoch >= 0:
                keys |= self._chunks("rowunit", s.epoch, n=self.epoch_n, per=self.chunk)
        if s.epoch >= 0:
            keys |= self._chunks("buffer", s.epoch, n=self.epoch_n, per=self.chunk)
            keys |= self._chunks("hyp", s.epoch, s.version, n=shape(self.config)[0],
                                 per=self.hyp_chunk)
            keys |= self._chunks("kept", s.epoch, n=s.kept, per=self.chunk)
            keys |= self._chunks("seen", s.epoch, n=s.seen, per=self.chunk)
            keys |= self._chunks("hard", s.epoch, n=s.tops, per=self.chunk)
        return keys

    def ledger_record(self):
        return self.model.state.ledger

    def unit_slot(self) -> tuple[int, None]:
        """The epoch whose sample the next example joins: the one after the current
        (``on_example`` buffers for ``state.epoch + 1``)."""
        return self.model.state.epoch + 1, None

    def charge_epoch(self) -> int:
        """The learner charges an epoch as it starts it (``start_epoch``): the new epoch."""
        return self.model.state.epoch if hasattr(self, "model") else 0

    def _need(self) -> int:
        k, m, _ = shape(self.config)
        return k * m

    def _maybe_start_epoch(self) -> None:
        s = self.model.state
        ready = self.buffer_n >= self._need()
        if ready and (s.epoch < 0 or (s.exhausted and self.config.params.epochs)):
            self.epoch = s.epoch + 1                  # the epoch's charge carries its number
            X, y, units, taught = self._sample(self.epoch, self.buffer_n)
            self.epoch_n = self.buffer_n
            self.model.start_epoch(X, y, units, taught)
            self.buffer_n = 0

    def on_example(self, event, source, outputs) -> None:
        self._take(event, source, outputs, True)

    def pass_over(self, items, outputs) -> None:
        """Each takes its place in the next epoch's sample as an empty row (module
        docstring): it counts toward the k x m, and no block holds it."""
        for event, source in items:
            self._take(event, source, outputs, False)

    def _take(self, event, source, outputs, admitted: bool) -> None:
        """An example's place in the next epoch's sample (its row, or an empty one), the
        epoch started once the sample is full, and the example's record."""
        self._begin(outputs)
        self.epoch = self.model.state.epoch
        if self.buffer_n < self._need():          # surplus examples of a full buffer are dropped
            if self.config.privacy_unit is not None:  # the person's pseudonym beside the row
                self._keep("rowunit", self.model.state.epoch + 1, self.buffer_n,
                           event.get("unit") if admitted else None)
            self.buffer_n = self._append_row(self.model.state.epoch + 1, self.buffer_n,
                                             [*self._x(event), event["y"]] if admitted else [])
        self._maybe_start_epoch()
        self._predict("example", source, event, None, "learning", self.model.state.version)

    def _x(self, event) -> list:
        """The dense x (binary classes may come as active indices)."""
        if "x" in event:
            return event["x"]
        x = [-1.0] * self.config.dimension
        for j in event["active"]:
            x[j] = 1.0
        return x

    def on_query(self, event, source, outputs) -> None:
        self._begin(outputs)
        self.epoch = self.model.state.epoch
        self._maybe_start_epoch()
        self.epoch = self.model.state.epoch
        s = self.model.state
        kept, seen, tops = s.kept, s.seen, s.tops
        a = self.model.answer(np.asarray(self._x(event), dtype=float))
        if s.tops > tops:                         # a hard query: [x, label] (a row of d + 1 values)
            self._keep("hard", s.epoch, tops, [s.hard_x[-1], s.hard_y[-1]])
        if s.kept > kept:                         # a released answer kept for the student
            self._keep("kept", s.epoch, kept, [*self.model.kept_x[-1], self.model.kept_y[-1]])
        if s.seen > seen:                         # a query kept for the student
            self._keep("seen", s.epoch, seen, self.model.seen_x[-1])
        status = {NO_EPOCH: "learning", EXHAUSTED: "budget_exhausted", HARD: "hard_query",
                  STUDENT: "frozen"}.get(a.status, "answered")
        self._predict("query", source, event, a.label, status, a.version)
