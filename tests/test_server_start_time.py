"""A session fixture's server start is not on the clock of the test that needs it first.

pytest-timeout times setup, call and teardown together, so without tests/engines/start_time.py a real
engine that starts slowly on a loaded machine is killed by the first test's limit. Here a pytest run of its
own holds two tests with a 1 s limit, each of whose fixtures starts a simulated server that answers
/health 503 for its first 3 s (its modelled start-up, `--startup-delay`): the start wrapped in
`server_start()` is waited for and its test passes; the bare one is killed by the limit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CONFTEST = """\
pytest_plugins = ["tests.engines.start_time"]
"""

TESTS = """\
import pytest

from simulator.fleet import SimFleet, SimServerSpec
from tests.engines.start_time import server_start


def _slow_server(log_dir):
    fleet = SimFleet([SimServerSpec(startup_delay=3.0)], log_dir=log_dir)
    fleet.start(timeout=120)  # returns once /health answers 200: after the 3 s start-up at least
    return fleet


@pytest.fixture
def wrapped(tmp_path):
    with server_start():
        fleet = _slow_server(tmp_path)
    yield fleet
    fleet.close()


@pytest.fixture
def bare(tmp_path):
    fleet = _slow_server(tmp_path)
    yield fleet
    fleet.close()


@pytest.mark.timeout(1)
def test_wrapped(wrapped):
    assert wrapped.urls


@pytest.mark.timeout(1)
def test_bare(bare):
    assert bare.urls
"""


@pytest.mark.slow
def test_a_slow_start_in_a_fixture_is_not_killed_by_the_test_limit(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_starts.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), "-rA", str(tmp_path / "test_starts.py")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    report = run.stdout + run.stderr
    assert "PASSED test_starts.py::test_wrapped" in report, report[-3000:]
    assert "Timeout" in report and "test_bare" in report, report[-3000:]
    assert "1 failed, 1 passed" in report or "1 passed, 1 error" in report, report[-3000:]
