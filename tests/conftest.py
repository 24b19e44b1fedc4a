"""Shared test fixtures: prompt files, simulated fleets (real subprocess servers on 127.0.0.1), the S3
protocol server with its fake credentials, the tests/servers programs (`servers`, `tls_files`), the
engines' markers, and helpers that run the real `python -m client.run` CLI as a subprocess and wait for
what it writes.

Markers (declared in pyproject.toml): `vllm` and `sglang` on every test that needs that engine (a test
using an engine's fixture without its marker is a collection error), `trainers` on every test that runs a
drafter trainer's data code (tests/engines/conftest_trainers.py), `slow` on tests over ~5 s; `s3` is
added here to each test that uses the S3 protocol server (fixtures `s3`, `s3_private`), and to no other.
`make test-fast` deselects vllm, sglang, trainers and slow. Under pytest-xdist (`make test`: `-n 2 --dist loadgroup`)
each engine's tests form one xdist group, so that its session servers start on one worker only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
import pytest

from bench.prompt_file import write_prompts
from simulator.fleet import SimFleet, SimServerSpec
from tests.s3_server import FAKE_AWS_ENV, UNSET_AWS_ENV, S3Server, running_s3
from tests.servers.harness import ServerGroup

if TYPE_CHECKING:
    from tests.servers.tlsfiles import TLSFiles

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "prompts" / "sample.jsonl"

# start_time first: the engines' fixtures import it, and a plugin is registered (and assert-rewritten) before.
pytest_plugins = ["tests.engines.start_time", "tests.engines.conftest_vllm", "tests.engines.conftest_sglang",
                  "tests.engines.conftest_trainers"]

# The tool schema the generated prompts carry (a strict one: `unit` is an enum, no other properties).
WEATHER_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string"},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"], "additionalProperties": False}}}

# -- engines: markers, CI, time limits ----------------------------------------------------------------

# The fixtures that need each engine; a test that uses one must carry the engine's marker, so that
# `-m "not vllm and not sglang and not slurm"` deselects exactly the tests that cannot run without the engines.
ENGINE_FIXTURES = {
    "vllm": {"vllm_venv_python", "tiny_model_dirs", "tiny_script", "vllm_server_factory", "vllm_scripted",
             "vllm_random"},
    "sglang": {"sglang_parser"},
    "sglang_server": {"sglang_venv_python", "sglang_model_dirs", "sglang_script", "sglang_pair", "sglang_scripted",
                      "sglang_random"},
    "slurm": {"slurm_cluster"},  # tests/test_slurm.py
    "trainers": {"specforge_venv", "speculators_venv"},  # tests/engines/conftest_trainers.py
}
# The fixtures that start or share the S3 protocol server: the tests using one get the `s3` marker.
S3_FIXTURES = {"s3_session", "s3_private"}
# An engine test's own limit. Building the tiny models and starting the servers, in whichever test needs them
# first, is not on this clock (tests/engines/start_time.py): it has its own bound, while the server lives.
VLLM_TIMEOUT_S = 600
# `make test` runs the suite on two pytest-xdist workers (`--dist loadgroup`). The tests of one engine share
# session-scoped servers (SLURM one cluster, the trainers one driver process each), so each engine's tests
# form one group and run on one worker: its servers start once, not once per worker. Every other test is
# scheduled on its own.
XDIST_GROUPS = ("vllm", "sglang_server", "slurm", "trainers")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def engine_missing(message: str) -> NoReturn:
    """A test's engine is not installed: in CI that fails (CI installs every engine), elsewhere the test is
    skipped with the reason and the way out; `make test-fast` deselects these tests before they start."""
    if in_ci():
        pytest.fail(f"{message}\n(CI=true: every engine must be installed; `make engines` does it)", pytrace=False)
    pytest.skip(f"{message}; or leave the engines out: make test-fast")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = []
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in ENGINE_FIXTURES.items():
            if used & fixtures and item.get_closest_marker(marker) is None:
                unmarked.append(f"{item.nodeid} (uses {', '.join(sorted(used & fixtures))})")
        if used & S3_FIXTURES:
            item.add_marker(pytest.mark.s3)  # only the tests that use the server, not their module's pure tests
        engine_test = item.get_closest_marker("vllm") or item.get_closest_marker("sglang_server")
        if engine_test and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(VLLM_TIMEOUT_S))
        groups = [name for name in XDIST_GROUPS if item.get_closest_marker(name)]
        if len(groups) > 1:  # its worker would start a second set of the other engine's servers
            unmarked.append(f"{item.nodeid} (carries {' and '.join(groups)}: one engine per test)")
        elif groups:
            item.add_marker(pytest.mark.xdist_group(groups[0]))
    if unmarked:
        raise pytest.UsageError("tests that need an engine must carry its marker (vllm, sglang, slurm or "
                                "trainers), and only one engine's:\n  "
                                + "\n  ".join(unmarked))


UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)  # after xdist's hook, which writes each test's group into its node id
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup` a group that does not take would start an engine's servers on every worker,
    both writing the same log files; each such test fails at once instead, saying why."""
    if not session.config.getoption("loadgroup", False):
        return  # not an xdist worker of a loadgroup run
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        if mark and not item.nodeid.endswith(f"@{mark.args[0]}"):
            item.stash[UNGROUPED] = (f"pytest-xdist did not put this test in its group {mark.args[0]!r}: this pytest "
                                     "and pytest-xdist do not work together (see the pin in pyproject.toml)")


@pytest.hookimpl(tryfirst=True)  # before its fixtures start any server
def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNGROUPED in item.stash:
        pytest.fail(item.stash[UNGROUPED], pytrace=False)


# -- S3 ------------------------------------------------------------------------------------------------

@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for the S3 protocol server, and none of the host's AWS settings."""
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    for name in UNSET_AWS_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def s3_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(tmp_path_factory.mktemp("s3")) as server:
        server.create_bucket()
        yield server


@pytest.fixture
def s3(s3_session: S3Server, aws_env: None) -> S3Server:
    """The session's S3 protocol server (bucket BUCKET), with the fake credentials. Tests share it, so a
    test keeps to its own prefix (`s3_prefix`) and never stops, restarts or holds it (`s3_private` does)."""
    return s3_session


@pytest.fixture
def s3_private(tmp_path: Path, aws_env: None) -> Iterator[S3Server]:
    """A fresh S3 protocol server with an empty bucket, for one test that stops, restarts or holds it."""
    with running_s3(tmp_path / "s3") as server:
        server.create_bucket()
        yield server


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest) -> str:
    """This test's own key prefix in the bucket (no trailing slash), made from its node id, so that no test
    sees what another left behind on the shared server."""
    return re.sub(r"[^a-z0-9._-]+", "-", request.node.nodeid.removeprefix("tests/").lower()).strip("-")


# -- the small test servers of tests/servers ---------------------------------------------------------

@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerGroup]:
    """Start tests/servers programs (odd servers, proxies); everything started through it stops after the test."""
    with ServerGroup(tmp_path) as group:
        yield group


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost, made once per session."""
    from tests.servers.tlsfiles import write_tls_files  # trustme is imported only by the tests that use TLS

    return write_tls_files(tmp_path_factory.mktemp("tls"))


# -- prompts, results, the CLI -------------------------------------------------------------------------

def make_prompts(path: Path, count: int, *, with_tools_every: int = 4, prefix: str = "p") -> Path:
    """`count` valid PromptRecords; every `with_tools_every`-th carries a tool schema (bench.prompt_file)."""
    return write_prompts(path, count, tool=WEATHER_TOOL, tools_every=with_tools_every, prefix=prefix)


def read_results(out: Path) -> list[dict[str, Any]]:
    """Every result line of every segment; fails on any line that is not valid JSON."""
    records = []
    for segment in sorted((out / "segments").glob("*.jsonl")):
        for number, line in enumerate(segment.read_bytes().splitlines(), start=1):
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:  # pragma: no cover - the assertion is the point
                raise AssertionError(f"{segment}:{number} is not valid JSON: {line[:120]!r}") from exc
    return records


def read_whole_results(out: Path) -> list[dict[str, Any]]:
    """The result lines a crash left whole: a torn last line (no newline yet) is not a record; every
    whole line must be valid JSON."""
    records = []
    for segment in sorted((out / "segments").glob("*.jsonl")):
        data = segment.read_bytes()
        for number, line in enumerate(data[:data.rfind(b"\n") + 1].splitlines(), start=1):
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:  # pragma: no cover - the assertion is the point
                raise AssertionError(f"{segment}:{number} is a whole line but not JSON: {line[:120]!r}") from exc
    return records


def count_written(out: Path) -> int:
    """Result lines written so far in `out`'s segments (a line is written whole, then flushed)."""
    segments = out / "segments"
    return sum(p.read_bytes().count(b"\n") for p in segments.glob("*.jsonl")) if segments.exists() else 0


def wait_until(condition: Callable[[], bool], what: str, *, timeout: float = 60.0,
               proc: subprocess.Popen[Any] | None = None) -> None:
    """Poll `condition` every 0.1 s; fail when `timeout` passes, or when `proc` exits first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited (code {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def wait_for_records(out: Path, count: int, *, timeout: float = 60.0, proc: subprocess.Popen[Any] | None = None) -> int:
    """Wait until `count` results are written in `out` (the run is under way); returns how many there are."""
    wait_until(lambda: count_written(out) >= count, f"{count} results in {out}", timeout=timeout, proc=proc)
    return count_written(out)


def read_failures(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in sorted((out / "failures").glob("*.jsonl"))
            for line in path.read_bytes().splitlines()]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def client_command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "client.run", "--plain", "--progress-every", "2", *args]


def run_client(args: Sequence[str], timeout: float = 180.0) -> CliResult:
    proc = subprocess.run(client_command(args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[Any]:
    """Start simulated fleets; every fleet started here is closed after the test."""
    fleets: list[SimFleet] = []

    from tests.engines.start_time import SMALL_SERVER_START_S, server_start  # registered as a plugin first

    def start(specs: Sequence[SimServerSpec], *, wait_ready: bool = True, seed: int = 0) -> SimFleet:
        fleet = SimFleet(list(specs), seed=seed, log_dir=tmp_path / f"sim-logs-{len(fleets)}")
        fleets.append(fleet)
        with server_start():  # its own bound, while its processes live; not the test's time limit
            fleet.start(wait_ready=wait_ready, timeout=SMALL_SERVER_START_S)
        return fleet

    yield start
    for fleet in fleets:
        fleet.close()
