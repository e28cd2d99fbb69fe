"""The README's test command spreads the suite over processes (pytest-xdist, ``-n 4
--dist loadgroup``), and the tests of a broker that a session fixture starts must share
one process (tests/conftest.py ``SHARED_BROKERS``): else each process starts its own
three-node cluster and secured broker on two cores. pytest 9.2 with pytest-xdist 3.8 drops
the groups without a word (pytest-xdist's issue 1386), so this runs the suite's own
conftest under xdist on tests that ask for those fixtures and checks where they ran."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

PROBE = '''
import os
import pytest

@pytest.fixture
def {name}():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(4))
def test_shared(i, {name}):
    open(os.path.join(os.environ["PROBE_RAN"], f"{name} {{i}} " + {name}), "w").close()

@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
'''


@pytest.mark.slow
def test_the_tests_of_each_shared_broker_run_in_one_process(tmp_path):
    from tests.conftest import SHARED_BROKERS
    (tmp_path / "tests").mkdir()
    shutil.copy(HERE / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "__init__.py").write_text("")
    for name in SHARED_BROKERS:
        (tmp_path / "tests" / f"test_{name}.py").write_text(PROBE.format(name=name))
    (ran := tmp_path / "ran").mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PROBE_RAN": str(ran)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    where = [path.name.split() for path in ran.iterdir()]          # fixture, i, worker
    assert len(where) == 4 * len(SHARED_BROKERS)
    for name in SHARED_BROKERS:
        assert len({worker for fixture, _, worker in where if fixture == name}) == 1, (name, sorted(where))
