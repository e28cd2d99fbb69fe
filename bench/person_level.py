"""The utility cost of person-level privacy: the same real streams and budgets with the
privacy unit one example (today's default) and one person with k = 1, 4, 16 examples per
epoch, beside the non-private baselines, side by side in one run.

    python bench/person_level.py [--seeds 3] [--eps 4 1] [--ftrl-sets phishing ...]
                                 [--predictor-sets segment ...] [--shuttle-rows N]
                                 [--pattern-seed 0] [--check-rows 300] [--no-epochs]

Data: the sets of bench/datasets.py (River and scikit-learn, offline, in that module's
fixed shuffled order; declarations from each set's public 10%, dense rows as
bench/dp_ftrl.py and bench/predictor_real.py build them), whole: nothing is subsampled
by default (``--shuttle-rows N``: dp_ftrl on shuttle's first N rows only). ``dp_ftrl``:
the six sets of bench/dp_ftrl.py's first table (phishing, segment, shuttle, bananas,
breast_cancer, digits), at epsilon 4 and 1. The predictor (nearest-neighbour blocks with
the student, bench/predictor_real.py's learner): segment, digits, bananas, shuttle, at
bench/predictor_real.py's epsilon 4 and split (the last third of the stream, at most
3,000, are queries; the rest labelled). delta = 1e-6 everywhere.

People (test data, not a mechanism, so a seeded numpy Generator): ``persons(n, seed)``
takes ``numpy.random.default_rng(seed)`` (``--pattern-seed``, default 0) and draws
people's numbers of rows as a discretised log-normal, max(1, round(exp(Z))) with
Z ~ N(ln 5 - 1.2^2 / 2, 1.2^2) (mean 5.1 rows, median 2; 0.6% of people have 50 rows or
more, and hold 9% of the rows), n // 4 people at a time (at least 64) until they cover
the n rows; the people past the n-th row are dropped and the last one is cut to fit.
Rows go to people in stream order by sampling arrivals: each position's person is drawn
with probability proportional to the rows that person has left, i.e. the same
Generator's ``permutation`` of the IDs repeated by their counts (a uniformly random
arrangement: a person's rows are spread over the stream, not in a run). The IDs are
assigned independently of the rows' contents, so what is measured is the cost of the
bound (examples that never reach the learner) and of the noise calibrated for k; a
person's rows being alike would cost more diversity than this shows. One pattern per
set (the predictor's labelled examples take its first positions), the same for every
key and configuration; the header prints its shape.

Configurations, per set and budget (the kinds' own calibration: ``agents.kinds``'
``parameters``, ``predictor_config``, ``lifetime``, from a ``ModelConfig``):

* (a) unit one example: every example reaches the learner (dp_ftrl: ``horizon`` = the
  stream; the predictor: ``examples`` = the labelled examples);
* person, k in {1, 4, 16} (``privacy_unit`` {"max_contributions": k, "max_epochs": 1}):
  the first k of a person's examples in log order, at most one per block for dp_ftrl
  (``agents.units.decide``, the agents' rule). Each stream is one epoch, so max_epochs 1
  cuts nobody off. ``horizon`` (dp_ftrl) and ``examples`` (the predictor) are the
  stream's (labelled) examples, as for (a): blocks, epochs and an epoch's sample count
  arriving examples, admitted or not (docs/privacy.md, "The privacy unit"), so an example
  that does not reach the learner still takes its place (a zero gradient in its block; a
  place in the sample that no block holds);
* (c) non-private: bench/dp_ftrl.py's River LogisticRegression (and the majority label
  so far); for the predictor, bench/predictor_real.py's majority class of the labelled
  examples, and a 1-nearest-neighbour classifier over them (scikit-learn).

Reported (median over ``--seeds`` keys; the sigma and epsilons do not depend on the key):
dp_ftrl's prequential online error over the whole stream (every example is predicted by
the released model before it is, or is not, learned; an abstention is wrong), its
balanced error, the share of examples that reached the learner, the noise sigma per
coordinate, epsilon per example under that noise, per person and epoch, and per person
over the model's life (the kind's ``lifetime``). The predictor: the share of queries
answered, the accuracy on those and on all of them (no answer counts wrong), the share
of the labelled examples that reached the epoch's sample (of its k x m arrivals), and
its k x m. "vs (a)": the error (all queries for the
predictor) over (a)'s. (a) bounds no person: its per-person figure (marked +) is what its
noise gives the heaviest person of this pattern (dp_ftrl: all their rows, counted per
block, sens^2 ||C~ c||^2 / (2 sigma^2) as zCDP, C~ the factorization's monotone envelope
as in mechanisms/participation.py; the predictor: group privacy over their rows in the
sample). Then, unless ``--no-epochs``: shuttle at epsilon 4 in epochs of 5,000 arriving
examples, with the default max_epochs 1 and with max_epochs 10 (enough for every epoch
the stream spans).

The learners run as the kinds run them, with the agents' admission rule, from the same
key and model id, outside the runtime (a query before every example would take the
runtime 20 to 45 minutes here: 2.6 million events at 1,000-2,000 a second).
``--check-rows N`` first feeds the embedded runtime (``EmbeddedRuntime``) the
registration and N rows of the first dp_ftrl set, a query before each example, and 4N
labelled rows (at least 1,200) and N queries of the first predictor set, for one example
and for a person, and checks every answer (and every admission) is the bench's
(tests/bench/test_person_level.py does the same on synthetic streams). Utility numbers
are deterministic per key; the seconds printed are not (a shared 2-core machine).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets as D  # noqa: E402  (bench/datasets.py)
import dp_ftrl as bench_ftrl  # noqa: E402  (bench/dp_ftrl.py: River LR as that bench runs it)
from common import balanced_error  # noqa: E402

from dpstream.agents.kinds import dp_ftrl as ftrl_kind  # noqa: E402
from dpstream.agents.kinds import predictor as predictor_kind  # noqa: E402
from dpstream.agents.units import decide  # noqa: E402
from dpstream.learners.dp_ftrl import DPFTRL  # noqa: E402
from dpstream.learners.features import Featuriser, suggest_fields  # noqa: E402
from dpstream.learners.predictor import PrivatePredictor  # noqa: E402
from dpstream.mechanisms.accounting import zcdp_epsilon  # noqa: E402
from dpstream.mechanisms.errors import DPStreamError  # noqa: E402
from dpstream.mechanisms.factorization import factorization  # noqa: E402
from dpstream.mechanisms.participation import group_privacy, monotone_envelope  # noqa: E402
from dpstream.mechanisms.randomness import KeyedRandomness  # noqa: E402
from dpstream.schemas import ModelConfig  # noqa: E402

DELTA = 1e-6
KS = (1, 4, 16)
MODEL = "bench"
FTRL_SETS = ("phishing", "segment", "shuttle", "bananas", "breast_cancer", "digits")
PREDICTOR_SETS = ("segment", "digits", "bananas", "shuttle")
PREDICTOR_EPS = 4.0                 # bench/predictor_real.py's budget
MAX_QUERIES = 3_000                 # bench/predictor_real.py's split
LOG_SIGMA = 1.2                     # rows per person: discretised log-normal (module docstring)
MEAN_ROWS = 5.0
EPOCH_HORIZON = 5_000               # the multi-epoch run: arriving examples per epoch
EPOCH_CAP = 10                      # and its max_epochs


# ------------------------------------------------------------------ people
def rows_per_person(n: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of each person, drawn until they cover n rows (the last cut to fit)."""
    mu = math.log(MEAN_ROWS) - LOG_SIGMA ** 2 / 2
    counts: list[np.ndarray] = []
    total = 0
    while total < n:
        c = np.maximum(1, np.rint(np.exp(rng.normal(mu, LOG_SIGMA, size=max(64, n // 4))))).astype(np.int64)
        counts.append(c)
        total += int(c.sum())
    c = np.concatenate(counts)
    cum = np.cumsum(c)
    last = int(np.searchsorted(cum, n))           # the person whose rows reach n
    c = c[:last + 1].copy()
    c[last] -= int(cum[last] - n)
    return c


def persons(n: int, seed: int = 0) -> np.ndarray:
    """The person (0, 1, ...) of each of n stream positions (module docstring)."""
    rng = np.random.default_rng(seed)
    counts = rows_per_person(n, rng)
    return rng.permutation(np.repeat(np.arange(counts.size), counts))


def pattern_summary(ids: np.ndarray) -> str:
    c = np.bincount(ids)
    c = c[c > 0]
    heavy = c >= 50
    return (f"{c.size:,} people, rows per person mean {c.mean():.2f} / median {np.median(c):g} / "
            f"max {c.max()}, {int(heavy.sum())} with 50+ rows ({c[heavy].sum() / c.sum():.1%} of "
            f"the rows), {(c >= 16).mean():.1%} with 16+")


# ------------------------------------------------------------------ registrations
def unit(k: int | None, max_epochs: int = 1) -> dict:
    return {} if k is None else {"privacy_unit": {"max_contributions": k, "max_epochs": max_epochs}}


def ftrl_config(d: int, eps: float, horizon: int, k: int | None, max_epochs: int = 1) -> ModelConfig:
    return ModelConfig.model_validate({
        "model_id": MODEL, "dimension": d, "budget": {"epsilon": eps, "delta": DELTA},
        "params": {"kind": "dp_ftrl", "horizon": int(horizon)}, **unit(k, max_epochs)})


def predictor_config(d: int, examples: int, k: int | None, eps: float = PREDICTOR_EPS) -> ModelConfig:
    return ModelConfig.model_validate({
        "model_id": MODEL, "dimension": d, "budget": {"epsilon": eps, "delta": DELTA},
        "params": {"kind": "predictor", "generator": "nearest", "examples": int(examples),
                   "student": True}, **unit(k)})


def key(seed: int) -> KeyedRandomness:
    return KeyedRandomness(bytes([seed + 1]) * 32)


# ------------------------------------------------------------------ dp_ftrl
def ftrl_admitted(ids: np.ndarray, k: int | None, block: int, horizon: int, max_epochs: int = 1) -> np.ndarray:
    """Which positions reach the learner: the agents' rule (``agents.units.decide``) with
    the slots a block kind gives (``BlockReleaseKind.unit_slots``: blocks of ``block``
    arriving examples, admitted or not, a new epoch every ``horizon``)."""
    if k is None:
        return np.ones(ids.size, dtype=bool)
    records: dict[int, dict] = {}
    out = np.zeros(ids.size, dtype=bool)
    for i, p in enumerate(ids.tolist()):
        epoch = i // horizon
        ok, record = decide(records.get(p), seq=i, epoch=epoch, block=(i % horizon) // block, k=k,
                            floor=epoch, epochs=max_epochs)
        if ok:
            records[p], out[i] = record, True
    return out


def ftrl_plan(ids, d: int, eps: float, k: int | None, max_epochs: int = 1, horizon: int | None = None):
    """(config, admitted): ``horizon`` None: the stream's length, one epoch (the schedule
    counts arriving examples, admitted or not)."""
    config = ftrl_config(d, eps, ids.size if horizon is None else horizon, k, max_epochs)
    p = ftrl_kind.parameters(config)
    return config, ftrl_admitted(ids, k, p.block, p.horizon, max_epochs)


def ftrl_labels(config: ModelConfig, X: np.ndarray, y: np.ndarray, admitted: np.ndarray, seed: int) -> list:
    """The released model's answer for every position before it is (or is not) learned,
    as a query just before each example gets it in the runtime: the model changes only
    when a block of arriving examples closes, so each block is predicted at once, then its
    admitted rows learned (``learn_many``) and the others passed over (``pass_over``:
    their places, nothing learned; the order within a block changes nothing)."""
    model = DPFTRL(params=ftrl_kind.parameters(config), rng=key(seed), model_id=MODEL)
    labels: list = []
    a = 0
    while a < y.size:
        b = min(y.size, a + model.blocks_left())
        labels += model.predict_many(X[a:b])
        rows = a + np.flatnonzero(admitted[a:b])
        if rows.size:
            model.learn_many(X[rows], y[rows])
        if rows.size < b - a:
            model.pass_over(b - a - rows.size)
        a = b
    return labels


@dataclass
class FtrlRun:
    error: float
    balanced: float
    reached: float
    sigma: float
    eps_example: float
    eps_person: float | None
    eps_life: float | None
    epochs: int


def ftrl_run(X, y, ids, eps, seed, k=None, max_epochs=1, horizon=None) -> FtrlRun:
    config, admitted = ftrl_plan(ids, X.shape[1], eps, k, max_epochs, horizon)
    p = ftrl_kind.parameters(config)
    labels = ftrl_labels(config, X, y, admitted, seed)
    pred = np.array([0 if v is None else v for v in labels])
    person = config.privacy_unit is not None
    return FtrlRun(float(np.mean(pred != y)), balanced_error(pred, y), float(admitted.mean()), p.sigma,
                   p.epsilon_example, p.epsilon if person else None,
                   ftrl_kind.DPFTRLKind.lifetime(config).epsilon if person else None,
                   -(-ids.size // p.horizon))


def ftrl_heaviest(config: ModelConfig, ids: np.ndarray, top: int = 10) -> tuple[float, int]:
    """(epsilon, rows) for the worst of the ``top`` heaviest people under a model whose unit
    is one example (every row learned, block j = rows j B .. (j + 1) B - 1): person's block
    counts c, zCDP rho = sens^2 ||C~ c||^2 / (2 sigma^2) with C~ the lower-triangular
    Toeplitz matrix of the monotone envelope of the strategy's coefficients (a bound on
    sum_ij |X_ij| c_i c_j; mechanisms/participation.py, (a))."""
    p = ftrl_kind.parameters(config)
    n = p.blocks
    env = monotone_envelope(factorization(p.mechanism, n).strategy_coefficients(n))
    counts = np.bincount(ids)
    worst = (0.0, 0)
    for person in np.argsort(counts)[::-1][:top]:
        c = np.bincount(np.flatnonzero(ids == person) // p.block, minlength=n)[:n].astype(float)
        norm2 = float(np.sum(np.convolve(env, c)[:n] ** 2))
        e = zcdp_epsilon(p.sensitivity ** 2 * norm2 / (2 * p.sigma ** 2), DELTA)
        worst = max(worst, (e, int(counts[person])))
    return worst


# ------------------------------------------------------------------ the predictor
def predictor_sample(ids: np.ndarray, k: int | None) -> np.ndarray:
    """Positions of the labelled examples that reach the learner: the first k of each
    person (the first epoch: nobody is cut off by epochs)."""
    if k is None:
        return np.arange(ids.size)
    seen: dict[int, int] = {}
    keep = []
    for i, p in enumerate(ids.tolist()):
        if seen.get(p, 0) < k:
            seen[p] = seen.get(p, 0) + 1
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)


def predictor_plan(X, ids, k, eps: float = PREDICTOR_EPS):
    """(config, sample positions): the epoch's sample is the first k x m arriving examples
    (the epoch starts as they fill the buffer: agents/kinds/predictor.py), of which those
    that reach the learner (the positions returned) are dealt to the blocks, the others
    dealt as rows of their own and left out; ``examples`` is the labelled examples.
    Raises InfeasibleParameters when the examples are too few for the budget."""
    config = predictor_config(X.shape[1], ids.size, k, eps)
    kb, m, _ = predictor_kind.shape(config)
    reach = predictor_sample(ids, k)
    return config, reach[reach < kb * m]


def predictor_answers(config: ModelConfig, X, y, Q, sample: np.ndarray, ids, seed: int) -> list:
    """The queries' answers (learners.predictor.Answer) after an epoch on ``sample`` of the
    first k x m arrivals (the kind's ``_sample``: each row's unit, None for one that did not
    reach the learner)."""
    model = PrivatePredictor(config=predictor_kind.predictor_config(config),
                             generator=predictor_kind.generator(config), rng=key(seed), model_id=MODEL,
                             student=config.params.student)
    if config.privacy_unit is None:
        model.start_epoch(X[sample], y[sample])
    else:
        kb, m, _ = predictor_kind.shape(config)
        taught = np.zeros(kb * m, dtype=bool)
        taught[sample] = True
        units = [int(p) if t else None for p, t in zip(ids[:kb * m], taught)]
        model.start_epoch(X[:kb * m], y[:kb * m], units, taught)
    return [model.answer(q) for q in Q]


@dataclass
class PredictorRun:
    answered: float
    accuracy: float          # on answered queries
    overall: float           # on all queries, no answer wrong
    reached: float
    shape: str
    eps_example: float
    eps_person: float | None
    eps_life: float | None
    note: str = ""


def predictor_run(X, y, Q, qy, ids, seed, k=None) -> PredictorRun:
    try:
        config, sample = predictor_plan(X, ids, k)
    except DPStreamError as err:
        reached = predictor_sample(ids, k).size / y.size
        return PredictorRun(math.nan, math.nan, math.nan, reached, "infeasible", math.nan, None, None,
                            note=str(err))
    answers = predictor_answers(config, X, y, Q, sample, ids, seed)
    labels = np.array([0 if a.label is None else a.label for a in answers])
    given = labels != 0
    kb, m, v_max = predictor_kind.shape(config)
    eps = config.budget.epsilon            # per example = per person and epoch (the kind's notes)
    person = config.privacy_unit is not None
    return PredictorRun(float(given.mean()), float(np.mean(labels[given] == qy[given])) if given.any() else math.nan,
                        float(np.mean(labels == qy)), sample.size / y.size, f"{kb} x {m}, v_max {v_max}",
                        eps, eps if person else None,
                        predictor_kind.PredictorKind.lifetime(config).epsilon if person else None)


def predictor_heaviest(X, ids) -> tuple[float, int]:
    """(epsilon, rows) for the heaviest person of the sample under unit one example: their
    rows sit in at most that many blocks, so group privacy over them."""
    config, sample = predictor_plan(X, ids, None)
    rows = int(np.bincount(ids[sample]).max())
    return group_privacy(config.budget.epsilon, config.budget.delta, rows).epsilon, rows


# ------------------------------------------------------------------ the runtime, for the check
def runtime_ftrl(config: ModelConfig, X, y, ids, seed: int) -> tuple[list, np.ndarray]:
    """(answers of a query before each example, which examples were admitted) from the
    embedded runtime."""
    from dpstream.streams.tools.embedded import EmbeddedRuntime
    items = [("models", config.model_dump(mode="json", exclude_none=True))]
    for i in range(y.size):
        x = [float(v) for v in X[i]]
        items.append(("queries", {"model_id": MODEL, "x": x, "query_id": str(i)}))
        items.append(("examples", {"model_id": MODEL, "x": x, "y": int(y[i]), "privacy_id": int(ids[i])}))
    rt = EmbeddedRuntime(key(seed))
    rt.processor.unit_trace = {}
    asyncio.run(rt.feed_all(items))
    labels = [p["label"] for p in rt.outputs["predictions"] if p["kind"] == "query"]
    decisions = sorted(rt.processor.unit_trace.values(), key=lambda d: d.seq)
    admitted = np.array([d.admitted for d in decisions]) if decisions else np.ones(y.size, dtype=bool)
    return labels, admitted


def runtime_predictor(config: ModelConfig, X, y, Q, ids, seed: int) -> list:
    """The queries' labels from the embedded runtime: the examples, then the queries."""
    from dpstream.streams.tools.embedded import EmbeddedRuntime
    items = [("models", config.model_dump(mode="json", exclude_none=True))]
    items += [("examples", {"model_id": MODEL, "x": [float(v) for v in X[i]], "y": int(y[i]),
                            "privacy_id": int(ids[i])}) for i in range(y.size)]
    items += [("queries", {"model_id": MODEL, "x": [float(v) for v in q], "query_id": f"q{j}"})
              for j, q in enumerate(Q)]
    rt = EmbeddedRuntime(key(seed))
    asyncio.run(rt.feed_all(items))
    return [p["label"] for p in rt.outputs["predictions"] if p["kind"] == "query"]


def check_ftrl(X, y, ids, eps: float, k: int | None, seed: int = 0) -> bool:
    """The bench's dp_ftrl run equals the embedded runtime's, answer for answer."""
    config, admitted = ftrl_plan(ids, X.shape[1], eps, k)
    labels, rt_admitted = runtime_ftrl(config, X, y, ids, seed)
    return (labels == ftrl_labels(config, X, y, admitted, seed) and bool(np.all(rt_admitted == admitted))
            and any(v is not None for v in labels))        # a model that never answered checks nothing


def check_predictor(X, y, Q, ids, k: int | None, seed: int = 0, eps: float = PREDICTOR_EPS) -> bool:
    """The bench's predictor run equals the embedded runtime's, answer for answer."""
    config, sample = predictor_plan(X, ids, k, eps)
    mine = [a.label for a in predictor_answers(config, X, y, Q, sample, ids, seed)]
    return runtime_predictor(config, X, y, Q, ids, seed) == mine and any(v is not None for v in mine)


# ------------------------------------------------------------------ data
def dense(s: D.Stream) -> np.ndarray:
    f = Featuriser(suggest_fields(s.public))
    return np.array([f.dense(r) for r in s.records])


def predictor_split(X: np.ndarray, y: np.ndarray):
    q = min(MAX_QUERIES, y.size // 3)
    return X[:-q], y[:-q], X[-q:], y[-q:]


# ------------------------------------------------------------------ tables
def fmt(v, spec=".3g", mark="") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}{mark}"


def spread(runs: list, field: str, spec: str = ".1%") -> str:
    """The median over keys, with the range when there are several."""
    vals = [getattr(r, field) for r in runs]
    mid = f"{float(np.median(vals)):{spec}}"
    return mid if len(vals) == 1 else f"{mid} ({min(vals):{spec}}-{max(vals):{spec}})"


def median(runs: list, field: str):
    vals = [getattr(r, field) for r in runs]
    if any(v is None for v in vals):
        return None
    return float(np.median(vals))


def ftrl_tables(args, streams: dict) -> None:
    seeds = range(args.seeds)
    rows: dict = {}
    for name, (s, X, ids) in streams.items():
        t0 = time.perf_counter()
        y = s.labels
        lr = bench_ftrl.river_lr(s)
        base = {"River LR (non-private)": lr[:2],
                "majority so far (non-private)": (float(s.majority_online.mean()), 0.5)}
        for eps in args.eps:
            runs = {None: [ftrl_run(X, y, ids, eps, seed) for seed in seeds]}
            for k in KS:
                runs[k] = [ftrl_run(X, y, ids, eps, seed, k=k) for seed in seeds]
            heavy = ftrl_heaviest(ftrl_plan(ids, X.shape[1], eps, None)[0], ids)
            rows[(name, eps)] = (runs, base, heavy)
        print(f"  dp_ftrl {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    for eps in args.eps:
        print(f"\n### dp_ftrl, epsilon {eps:g}, delta 1e-6 (BLT; median of {args.seeds} keys)\n")
        print("| set | unit | reach the learner | sigma | eps / example | eps / person, epoch | "
              "eps / person, life | online error | balanced error | error vs (a) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, (s, X, ids) in streams.items():
            runs, base, heavy = rows[(name, eps)]
            ref = median(runs[None], "error")
            label = f"{name} ({s.labels.size:,})"
            for k, rs in runs.items():
                who = "(a) one example" if k is None else f"person, k = {k}"
                per = fmt(heavy[0], ".3g", f"+ ({heavy[1]} rows)") if k is None else fmt(median(rs, "eps_person"))
                life = fmt(heavy[0], ".3g", "+") if k is None else fmt(median(rs, "eps_life"))
                err = median(rs, "error")
                print(f"| {label} | {who} | {median(rs, 'reached'):.1%} | {median(rs, 'sigma'):.3g} | "
                      f"{median(rs, 'eps_example'):.3g} | {per} | {life} | {spread(rs, 'error')} | "
                      f"{median(rs, 'balanced'):.3f} | {err / ref:.2f}x |")
                label = ""
            for who, (err, bal) in base.items():
                print(f"| | {who} | 100% | - | - | - | - | {err:.1%} | {bal:.3f} | {err / ref:.2f}x |")


def epochs_table(args, name: str, s, X, ids) -> None:
    """dp_ftrl in epochs of EPOCH_HORIZON arriving examples: max_epochs 1 (the default)
    against EPOCH_CAP."""
    t0 = time.perf_counter()
    eps, seeds = 4.0, range(args.seeds)
    y = s.labels
    a = [ftrl_run(X, y, ids, eps, seed, horizon=EPOCH_HORIZON) for seed in seeds]
    ref = median(a, "error")
    print(f"\n### dp_ftrl over several epochs: {name} ({y.size:,}), epochs of {EPOCH_HORIZON:,} arriving "
          f"examples, epsilon 4, delta 1e-6 (median of {args.seeds} keys)\n")
    print("| unit | max_epochs | epochs | reach the learner | eps / person, epoch | eps / person, life | "
          "online error | error vs (a) |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| (a) one example | - | {a[0].epochs} | {median(a, 'reached'):.1%} | - | - | {spread(a, 'error')} | 1.00x |")
    for k in KS:
        for cap in (1, EPOCH_CAP):
            rs = [ftrl_run(X, y, ids, eps, seed, k=k, max_epochs=cap, horizon=EPOCH_HORIZON) for seed in seeds]
            err = median(rs, "error")
            print(f"| person, k = {k} | {cap} | {rs[0].epochs} | {median(rs, 'reached'):.1%} | "
                  f"{median(rs, 'eps_person'):.3g} | {median(rs, 'eps_life'):.3g} | {spread(rs, 'error')} | "
                  f"{err / ref:.2f}x |",
                  flush=True)
    print(f"\n  epochs: {time.perf_counter() - t0:.1f} s")


def predictor_tables(args, streams: dict) -> None:
    seeds = range(args.seeds)
    out = []
    for name, (s, Xall, ids_all) in streams.items():
        t0 = time.perf_counter()
        X, y, Q, qy = predictor_split(Xall, s.labels)
        ids = ids_all[:y.size]
        runs = {None: [predictor_run(X, y, Q, qy, ids, seed) for seed in seeds]}
        for k in KS:
            runs[k] = [predictor_run(X, y, Q, qy, ids, seed, k=k) for seed in seeds]
        majority = float(np.mean(qy == (1 if (y == 1).mean() > 0.5 else -1)))
        from sklearn.neighbors import KNeighborsClassifier
        nn = float(np.mean(KNeighborsClassifier(1).fit(X, y).predict(Q) == qy))
        out.append((name, y.size, qy.size, runs, majority, nn, predictor_heaviest(X, ids)))
        print(f"  predictor {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"\n### the predictor, epsilon {PREDICTOR_EPS:g}, delta 1e-6 (nearest blocks with the student; "
          f"median of {args.seeds} keys)\n")
    print("| set | unit | in the sample | k x m | eps / example | eps / person, epoch | eps / person, life | "
          "answered | accuracy, answered | accuracy, all | error vs (a) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n, nq, runs, majority, nn, heavy in out:
        ref = 1 - median(runs[None], "overall")
        label = f"{name} ({n:,} / {nq:,})"
        for k, rs in runs.items():
            who = "(a) one example" if k is None else f"person, k = {k}"
            if rs[0].shape == "infeasible":
                print(f"| {label} | {who} | {rs[0].reached:.1%} | infeasible (too few examples for "
                      f"epsilon {PREDICTOR_EPS:g}) | | | | | | | |")
                label = ""
                continue
            per = fmt(heavy[0], ".3g", f"+ ({heavy[1]} rows)") if k is None else fmt(median(rs, "eps_person"))
            life = fmt(heavy[0], ".3g", "+") if k is None else fmt(median(rs, "eps_life"))
            acc = median(rs, "overall")
            print(f"| {label} | {who} | {median(rs, 'reached'):.1%} | {rs[0].shape} | "
                  f"{median(rs, 'eps_example'):.3g} | {per} | {life} | {median(rs, 'answered'):.1%} | "
                  f"{fmt(median(rs, 'accuracy'), '.1%')} | {spread(rs, 'overall')} | {(1 - acc) / ref:.2f}x |")
            label = ""
        for who, acc in (("majority class (non-private)", majority), ("1-nearest neighbour (non-private)", nn)):
            print(f"| | {who} | 100% | - | - | - | - | 100% | {acc:.1%} | {acc:.1%} | {(1 - acc) / ref:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--seeds", type=int, default=3, help="keys per configuration (the median is printed)")
    ap.add_argument("--eps", type=float, nargs="+", default=[4.0, 1.0], help="dp_ftrl's budgets")
    ap.add_argument("--ftrl-sets", nargs="*", default=list(FTRL_SETS))
    ap.add_argument("--predictor-sets", nargs="*", default=list(PREDICTOR_SETS))
    ap.add_argument("--shuttle-rows", type=int, default=None,
                    help="dp_ftrl on shuttle's first N rows only (default: all; the predictor takes all)")
    ap.add_argument("--pattern-seed", type=int, default=0, help="the people's numpy Generator seed")
    ap.add_argument("--check-rows", type=int, default=300,
                    help="first check the bench against the embedded runtime: dp_ftrl on N rows, "
                         "the predictor on 4N labelled (at least 1,200) and N queries (0: skip)")
    ap.add_argument("--no-epochs", action="store_true", help="leave out the multi-epoch table")
    args = ap.parse_args()
    t_all = time.perf_counter()
    print(f"People: rows per person max(1, round(exp(Z))), Z ~ N(ln {MEAN_ROWS:g} - {LOG_SIGMA:g}^2/2, "
          f"{LOG_SIGMA:g}^2), from numpy.random.default_rng({args.pattern_seed}), n // 4 people at a "
          "time until they cover the n rows (the last cut to fit); each position's person drawn with "
          "probability proportional to the rows that person has left (the Generator's permutation of "
          "the IDs repeated by their counts). IDs independent of the rows' contents; one pattern per "
          "set, the same for every key.")
    loaded: dict = {}

    def load(name, rows=None):
        if (name, rows) not in loaded:
            s = D.load(name)
            if rows is not None and rows < s.labels.size:
                s = D.Stream(s.name, s.public, s.records[:rows], s.labels[:rows], s.public_labels)
            loaded[(name, rows)] = (s, dense(s), persons(s.labels.size, args.pattern_seed))
        return loaded[(name, rows)]

    ftrl = {n: load(n, args.shuttle_rows if n == "shuttle" else None) for n in args.ftrl_sets}
    pred = {n: load(n) for n in args.predictor_sets}
    for name, (s, X, ids) in {**ftrl, **pred}.items():
        sub = " (subsample: the first rows)" if name == "shuttle" and s.labels.size < 44_188 else ""
        print(f"  {name}: {s.labels.size:,} rows{sub}, d = {X.shape[1]}: {pattern_summary(ids)}")
    if args.check_rows:
        t0 = time.perf_counter()
        n = args.check_rows
        said, ok = [], True
        if ftrl:
            s, X, ids = next(iter(ftrl.values()))
            m = min(n, s.labels.size)
            same = all(check_ftrl(X[:m], s.labels[:m], ids[:m], 4.0, k) for k in (None, 4))
            said.append(f"dp_ftrl on {s.name}'s first {m} rows (one example; a person, k = 4): {same}")
            ok &= same
        if pred:
            s, X, ids = next(iter(pred.values()))
            m = min(max(4 * n, 1_200), s.labels.size - n)     # an epoch needs ~600 at epsilon 4
            same = all(check_predictor(X[:m], s.labels[:m], X[m:m + n], ids[:m], k) for k in (None, 16))
            said.append(f"the predictor on {s.name}'s first {m} rows and {n} queries (one example; "
                        f"a person, k = 16): {same}")
            ok &= same
        print(f"\nthe bench's runs against the embedded runtime, identical answers: {'; '.join(said)} "
              f"({time.perf_counter() - t0:.1f} s)")
        if not ok:
            sys.exit("the bench no longer runs the kinds as the runtime does")
    print("\nthe kinds' registration notes (where the epsilons below come from), k = 4:")
    if ftrl:
        s, X, ids = next(iter(ftrl.values()))
        config = ftrl_plan(ids, X.shape[1], 4.0, 4)[0]
        print(f"  dp_ftrl, {s.name}, epsilon 4, horizon {config.params.horizon:,}: "
              + "; ".join(ftrl_kind.DPFTRLKind.registration_notes(config)))
    if pred:
        s, X, ids = next(iter(pred.values()))
        Xl, yl, _, _ = predictor_split(X, s.labels)
        config = predictor_plan(Xl, ids[:yl.size], 4)[0]
        print(f"  predictor, {s.name}, examples {config.params.examples:,}: "
              + " ".join(predictor_kind.PredictorKind.registration_notes(config)[:1]))
    print("\nseconds (a shared 2-core machine: they move between runs; the utility numbers do not):")
    if ftrl:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ftrl_tables(args, ftrl)
    if pred:
        predictor_tables(args, pred)
    if not args.no_epochs and "shuttle" in ftrl:
        epochs_table(args, "shuttle", *ftrl["shuttle"])
    print(f"\ntotal: {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
