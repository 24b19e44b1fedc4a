"""No asyncio noise: under every fault of the simulator's matrix, a server kill, stalls, a full disk and a
double Ctrl-C, the client's stderr carries its own messages only: no "Future exception was never
retrieved", no "Task was destroyed", no stray traceback."""

from __future__ import annotations

import resource
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results, wait_for_records

pytestmark = pytest.mark.slow

NOISE = ("Future exception was never retrieved", "Task was destroyed", "Task exception was never retrieved",
         "Traceback (most recent call last)", "Exception ignored", "was never awaited", "Unclosed", "unclosed")
FAST = ("--mean-tokens", "80", "--tokens-per-chunk", "3")
CLIENT = ("--max-in-flight", "16", "--idle-timeout", "1", "--max-attempts", "10", "--grace", "3")


def assert_quiet(stderr: str) -> None:
    found = [marker for marker in NOISE if marker in stderr]
    assert not found, f"asyncio noise on stderr ({found}):\n{stderr[-4000:]}"


@pytest.mark.parametrize("fault", [
    ("--fail-500", "0.3"),
    ("--fail-429", "0.3", "--retry-after", "0"),
    ("--drop-stream", "0.3"),
    ("--stall-stream", "0.2", "--stall-seconds", "4"),
    ("--error-event", "0.3"),
], ids=lambda fault: fault[0].lstrip("-"))
def test_fault_matrix_leaves_stderr_clean(fault: tuple[str, ...], tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=(*FAST, *fault))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / "out"),
            "--circuit-failures", "1000", *CLIENT]
    proc = subprocess.run(client_command(args), cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert len(read_results(tmp_path / "out")) >= 30
    assert_quiet(proc.stderr)


def test_server_killed_mid_stream_leaves_stderr_clean(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=5.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 120)
    out = tmp_path / "out"
    proc = subprocess.Popen(client_command(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                            "--out", str(out), *CLIENT]),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_records(out, 20, timeout=90.0, proc=proc)
    fleet.kill(1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-3000:]
    assert_quiet(stderr)


def test_double_ctrl_c_leaves_stderr_clean(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=2.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    proc = subprocess.Popen(client_command(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                            "--out", str(out), *CLIENT]),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_records(out, 10, timeout=90.0, proc=proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    assert "interrupted" in stderr
    assert_quiet(stderr)


def _small_file_limit() -> None:
    # A file-size cap stands in for a full disk: writes past it fail (EFBIG) as a full disk's do (ENOSPC).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))


def test_full_disk_leaves_stderr_clean(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    proc = subprocess.run(client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts),
                                          "--out", str(out), *CLIENT]),
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          preexec_fn=_small_file_limit)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "cannot append to" in proc.stderr
    assert_quiet(proc.stderr)
