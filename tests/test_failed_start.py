"""A run that fails at start (here: an unreachable endpoint, exit 2) leaves no empty run folder behind:
the `--out` it created, and the parents it created for it, are removed; an `--out` that existed before
is left as it was. The estimate's calibration on a fleet does the same with its runs/estimate-<time>."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, make_prompts, run_client


@pytest.fixture
def refusing_url() -> Iterator[str]:
    # A bound socket that never listens: every connection to it is refused, at once.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"


def test_an_unreachable_endpoint_leaves_no_out_it_created(tmp_path: Path, refusing_url: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    out = tmp_path / "runs" / "first"
    result = run_client(["--endpoints", refusing_url, "--prompts", str(prompts), "--out", str(out)])
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "the folders this run made are removed again"


def test_an_out_that_existed_before_is_left_as_it_was(tmp_path: Path, refusing_url: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    out = tmp_path / "out"
    out.mkdir()
    result = run_client(["--endpoints", refusing_url, "--prompts", str(prompts), "--out", str(out)])
    assert result.code == 2, result.stderr
    assert out.is_dir()


def _estimate(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "client.estimate", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_an_estimate_on_an_unreachable_fleet_leaves_no_calibration_folder(tmp_path: Path, refusing_url: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    plain = _estimate(tmp_path, "--endpoints", refusing_url, "--prompts", str(prompts))
    assert plain.returncode == 2 and "cannot reach 1 of 1 endpoint(s)" in plain.stderr, plain.stderr
    assert not (tmp_path / "runs").exists(), "no empty runs/estimate-<time> (nor the runs/ made for it)"
    named = _estimate(tmp_path, "--endpoints", refusing_url, "--prompts", str(prompts), "--out", "cal/first")
    assert named.returncode == 2, named.stderr
    assert not (tmp_path / "cal").exists(), "an --out the estimate created is removed as well"
    (tmp_path / "empty").mkdir()
    existed = _estimate(tmp_path, "--endpoints", refusing_url, "--prompts", str(prompts), "--out", "empty")
    assert existed.returncode == 2, existed.stderr
    assert (tmp_path / "empty").is_dir(), "a directory that existed before is left"
