"""A log that cannot be written never ends the run: stdout (and stderr) redirected to /dev/full, a real
device on which every write fails with ENOSPC, as a log on a disk that filled while `--out` has room. The
progress stops with one line on stderr (when stderr works), every record is written, the summary is given
where it can be, and the exit code is the run's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, count_written, make_prompts

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs the /dev/full device")

PROMPTS = 300


def _run(tmp_path: Path, fleet_factory: Any, *, stderr_full: bool) -> tuple[int, str, Path]:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=20.0)])
    prompts = make_prompts(tmp_path / "p.jsonl", PROMPTS)
    out = tmp_path / "out"
    # Progress every 50 ms: the run lasts far longer, so a progress line is attempted (and fails) while
    # requests are in flight.
    argv = [*client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                             "--max-tokens", "64"]), "--progress-every", "0.05"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(argv, cwd=REPO, stdout=full, stderr=full if stderr_full else subprocess.PIPE,
                              text=True, timeout=180, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return proc.returncode, proc.stderr or "", out


def test_stdout_on_a_full_disk_stops_the_progress_not_the_run(tmp_path: Path, fleet_factory: Any) -> None:
    code, stderr, out = _run(tmp_path, fleet_factory, stderr_full=False)
    assert code == 0, stderr
    assert count_written(out) == PROMPTS
    assert stderr.count("warning: cannot write the progress to stdout (No space left on device); progress lines "
                        "stopped, the run goes on") == 1, stderr
    assert f"{PROMPTS} done, 0 failed" in stderr, "the summary is still given on stderr"
    assert "Traceback" not in stderr and "Exception ignored" not in stderr


def test_stdout_and_stderr_on_a_full_disk_still_write_every_record(tmp_path: Path, fleet_factory: Any) -> None:
    code, _, out = _run(tmp_path, fleet_factory, stderr_full=True)
    assert code == 0
    assert count_written(out) == PROMPTS
    assert not (out / "failures").exists() or not any((out / "failures").iterdir())
