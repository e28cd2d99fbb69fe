"""The README's test command spreads the suite over processes (pytest-xdist, ``-n 4
--dist loadgroup``), and the tests of a broker that a session fixture starts must share
one process (tests/conftest.py ``SHARED_BROKERS``): else each process starts its own
three-node cluster and secured broker on two cores. pytest 9.2 with pytest-xdist 3.8 drops
the groups without a word (a known pytest-xdist bug), so this runs the suite's own
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

MODULE_PROBE = '''
import os
import pytest

@pytest.fixture(scope="module")
def deployment():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(4))
def test_shared(i, deployment):
    open(os.path.join(os.environ["PROBE_RAN"], f"module {i} " + deployment), "w").close()

@pytest.mark.parametrize("i", range(4))
def test_free(i):
    pass
'''


@pytest.mark.slow
def test_the_tests_of_each_shared_broker_and_of_each_module_fixture_run_in_one_process(tmp_path):
    """And the tests that share a module-scoped fixture (one deployment, data an earlier
    test sent): a CI run split test_cli_contract.py over two processes, and the second's
    fresh deployment had nothing to consume."""
    from tests.conftest import SHARED_BROKERS
    (tmp_path / "tests").mkdir()
    shutil.copy(HERE / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "__init__.py").write_text("")
    for name in SHARED_BROKERS:
        (tmp_path / "tests" / f"test_{name}.py").write_text(PROBE.format(name=name))
    (tmp_path / "tests" / "test_module_state.py").write_text(MODULE_PROBE)
    (ran := tmp_path / "ran").mkdir()
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PROBE_RAN": str(ran)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    where = [path.name.split() for path in ran.iterdir()]          # fixture, i, worker
    assert len(where) == 4 * (len(SHARED_BROKERS) + 1)
    for name in (*SHARED_BROKERS, "module"):
        assert len({worker for fixture, _, worker in where if fixture == name}) == 1, (name, sorted(where))
