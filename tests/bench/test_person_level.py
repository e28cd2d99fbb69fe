"""bench/person_level.py: its people generator, and that its runs of dp_ftrl and the
predictor are the runs the embedded runtime makes (the bench replays the kinds outside
the runtime to stay within minutes; docs/performance.md, "Person-level privacy: the
utility cost")."""
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = list(sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import person_level as P  # noqa: E402  (bench/person_level.py, and the bench modules it imports)
sys.path[:] = _PATH       # the benches' folder (its datasets.py, common.py) off the path again


def synthetic(n: int, d: int = 4, seed: int = 0):
    """Rows in [-1, 1]^d labelled by a halfspace (test data)."""
    g = np.random.default_rng(seed)
    X = g.uniform(-1, 1, size=(n, d))
    return X, np.where(X[:, 0] + X[:, 1] > 0, 1, -1)


def test_the_people_are_seeded_skewed_and_interleaved():
    """Every row has a person; the same seed gives the same pattern and another seed
    another; about 5 rows a person with a long tail; a heavy person's rows are spread
    over the stream, not in one run."""
    ids = P.persons(20_000, seed=0)
    assert ids.size == 20_000 and np.array_equal(ids, P.persons(20_000, seed=0))
    assert not np.array_equal(ids, P.persons(20_000, seed=1))
    counts = np.bincount(ids)
    assert counts.min() >= 1 and 4.5 <= counts.mean() <= 5.7 and np.median(counts) <= 3
    assert (counts >= 50).sum() >= 5
    heavy = np.flatnonzero(ids == counts.argmax())
    assert heavy[-1] - heavy[0] > 10_000                       # spread over the stream
    runs = np.diff(np.flatnonzero(np.diff(ids) != 0))
    assert runs.max() <= 3                                     # no person's rows in a run


@pytest.mark.parametrize("k", [None, 2], ids=["one example", "a person, k = 2"])
def test_the_bench_runs_dp_ftrl_as_the_runtime_does(k):
    """Answers before every example and the admitted examples, identical to the embedded
    runtime's (a query before each example), with the horizon the bench registers."""
    X, y = synthetic(160)
    assert P.check_ftrl(X, y, P.persons(160), 4.0, k)


def test_the_bench_runs_the_predictor_as_the_runtime_does():
    """The queries' answers after one epoch, identical to the embedded runtime's, for a
    person as the unit (a person's rows in one block)."""
    X, y = synthetic(560, seed=1)
    ids = P.persons(500)
    assert P.check_predictor(X[:500], y[:500], X[500:], ids, 16, eps=8.0)


def test_a_tiny_run_reports_what_the_tables_print():
    """The noise grows with k, so the epsilon per example under it falls; a person's
    bound keeps examples from the learner; the lifetime composes over max_epochs."""
    X, y = synthetic(600, seed=2)
    ids = P.persons(600)
    a = P.ftrl_run(X, y, ids, 4.0, 0)
    one, four = P.ftrl_run(X, y, ids, 4.0, 0, k=1), P.ftrl_run(X, y, ids, 4.0, 0, k=4)
    assert a.reached == 1.0 and one.reached < four.reached < 1.0
    assert four.sigma > one.sigma and four.eps_example < one.eps_example <= 4.0
    assert four.eps_person == pytest.approx(4.0, rel=1e-3) and 0 <= four.error <= 1
    life = P.ftrl_run(X, y, ids, 4.0, 0, k=4, max_epochs=3, horizon=100)
    assert life.epochs >= 2 and life.eps_life > life.eps_person
    eps, rows = P.ftrl_heaviest(P.ftrl_plan(ids, X.shape[1], 4.0, None)[0], ids)
    assert rows == np.bincount(ids).max() and eps > 4.0
