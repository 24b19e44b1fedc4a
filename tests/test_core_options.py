"""The shared option checkers (argchecks, and the client's seed): every bad value is a one-line argparse
error, never a traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from argchecks import (
    float_in,
    non_empty_path,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
    share,
)
from client.core.options import MAX_SIMULATED, seed_number, simulated_servers
from tests.conftest import REPO

Checker = Callable[[str], Any]
SIMULATED = ("must be a number of simulated servers from 1 to 64 (each one is a process of about 50 MB on this "
             "machine), ")


@pytest.mark.parametrize(("check", "text", "value"), [
    (positive_int, "1", 1), (positive_int, "512", 512), (non_negative_int, "0", 0),
    (positive_float, "0.5", 0.5), (non_negative_float, "0", 0.0), (float_in(0, 2), "2", 2.0),
    (float_in(0, 1), "0", 0.0), (share, "1", 1.0), (share, "0.25", 0.25),
    (port_number, "0", 0), (port_number, "9400", 9400), (port_number, "65535", 65535),
    (non_empty_path, "runs/first", "runs/first"), (non_empty_path, ".", "."), (non_empty_path, " ", " "),
    (seed_number, "0", 0), (seed_number, "11", 11), (seed_number, "-1", -1),
    (simulated_servers, "1", 1), (simulated_servers, "64", 64),
    (seed_number, "9223372036854775807", 2**63 - 1), (seed_number, "-9223372036854775808", -(2**63)),
])
def test_accepts(check: Checker, text: str, value: Any) -> None:
    assert check(text) == value


@pytest.mark.parametrize(("check", "text", "message"), [
    (positive_int, "0", "must be at least 1, got 0"),
    (positive_int, "-4", "must be at least 1, got -4"),
    (positive_int, "1.5", "not a whole number: '1.5'"),
    (non_negative_int, "-1", "must be 0 or more, got -1"),
    (positive_float, "0", "must be above 0, got 0"),
    (positive_float, "nan", "must be a finite number, got nan"),
    (positive_float, "inf", "must be a finite number, got inf"),
    (positive_float, "fast", "not a number: 'fast'"),
    (non_negative_float, "-0.1", "must be 0 or more, got -0.1"),
    (float_in(0, 2), "-1", "must be between 0 and 2, got -1"),
    (float_in(0, 1), "5", "must be between 0 and 1, got 5"),
    (share, "-0.5", "must be between 0 and 1, got -0.5"),
    (port_number, "65536", "must be a port from 0 to 65535, got 65536"),
    (port_number, "-1", "must be a port from 0 to 65535, got -1"),
    (port_number, "http", "not a whole number: 'http'"),
    (seed_number, "18446744073709551616",
     "must be a whole number from -9223372036854775808 to 9223372036854775807 (signed 64-bit), "
     "got 18446744073709551616"),
    (seed_number, "9223372036854775808",
     "must be a whole number from -9223372036854775808 to 9223372036854775807 (signed 64-bit), "
     "got 9223372036854775808"),
    (seed_number, "-9223372036854775809",
     "must be a whole number from -9223372036854775808 to 9223372036854775807 (signed 64-bit), "
     "got -9223372036854775809"),
    (seed_number, "1.5", "not a whole number: '1.5'"),
    (simulated_servers, "0", SIMULATED + "got 0"),
    (simulated_servers, "65", SIMULATED + "got 65"),
    (simulated_servers, "100000", SIMULATED + "got 100000"),
    (non_empty_path, "", "must name a directory, got an empty path (give e.g. runs/first, or . for the current "
                         "directory)"),
])
def test_refuses_with_a_message(check: Checker, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        check(text)
    assert str(caught.value) == message


def test_a_refusal_reaches_the_user_as_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--top-p", type=float_in(0, 1))
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--top-p", "5"])
    assert exited.value.code == 2
    assert "argument --top-p: must be between 0 and 1, got 5" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["run", "estimate"])
def test_simulate_past_the_bound_is_a_usage_error_before_any_server_starts(tool: str) -> None:
    assert MAX_SIMULATED == 64
    proc = subprocess.run([sys.executable, "-m", f"client.{tool}", "--simulate", "100000", "--prompts", "p.jsonl"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert f"argument --simulate: {SIMULATED}got 100000" in proc.stderr
    assert "Traceback" not in proc.stderr
