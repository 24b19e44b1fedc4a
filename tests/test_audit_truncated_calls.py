"""A tool call cut off by max_tokens (finish_reason length) is truncated, not invalid: a healthy run with
some truncation is not BROKEN, while the same broken call in a finished record still is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import REPO
from tests.results_fixture import WEATHER_TOOL, result, tool_call, write_segment

GOOD = tool_call("get_weather", '{"city": "Paris", "unit": "celsius"}')
CUT = tool_call("get_weather", '{"city": "Par', "call_2")  # what max_tokens leaves of a call


def audit(run: Path) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(run), "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    return proc.returncode, orjson.loads(proc.stdout), proc.stderr


# (case, the record with the odd call, exit code, invalid kinds, truncated calls)
CASES = [
    ("cut by length, last call", dict(finish_reason="length", tool_calls=[GOOD, CUT]), 0, {}, 10),
    ("cut by length, only call", dict(finish_reason="length", tool_calls=[CUT]), 0, {}, 10),
    ("broken in a finished record", dict(finish_reason="tool_calls", tool_calls=[GOOD, CUT]), 1,
     {"arguments not JSON": 10}, 0),
    ("broken before the last call of a length record", dict(finish_reason="length", tool_calls=[CUT, GOOD]), 1,
     {"arguments not JSON": 10}, 0),
]


@pytest.mark.parametrize(("name", "odd", "code", "invalid", "truncated"), CASES, ids=[c[0] for c in CASES])
def test_truncated_tool_calls_are_not_invalid(tmp_path: Path, name: str, odd: dict[str, Any], code: int,
                                              invalid: dict[str, int], truncated: int) -> None:
    records = [result(f"g{i}", tool_calls=[GOOD], tools=[WEATHER_TOOL], finish_reason="tool_calls")
               for i in range(40)]
    records += [result(f"t{i}", tools=[WEATHER_TOOL], **odd) for i in range(10)]
    write_segment(tmp_path / "run", records)
    exit_code, data, stderr = audit(tmp_path / "run")
    assert "Traceback" not in stderr
    assert exit_code == code
    assert data["verdict"] == ("healthy" if code == 0 else "broken")
    assert data["tool_calls"]["invalid"] == invalid
    assert data["tool_calls"]["truncated"] == truncated
    text = "\n".join(f["message"] for f in data["findings"])
    if truncated:
        assert f"{truncated} tool call(s) were cut off by max_tokens (finish_reason length): counted as truncated, " \
               "not invalid" in text


def test_the_verdict_line_says_truncation_is_expected(tmp_path: Path) -> None:
    records = [result(f"g{i}", tool_calls=[GOOD], tools=[WEATHER_TOOL], finish_reason="tool_calls") for i in range(20)]
    records += [result(f"t{i}", tools=[WEATHER_TOOL], finish_reason="length", tool_calls=[CUT]) for i in range(3)]
    write_segment(tmp_path / "run", records)
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0
    assert "verdict: HEALTHY (3 completion(s) cut off by max_tokens: truncated, which is expected, not broken)" \
        in proc.stdout


def _window_cut(record_id: str) -> dict[str, Any]:
    """A reply that ended at its --train-window room (600 of the window's 4,096, below max_tokens 8,192)."""
    return result(record_id, finish_reason="length", completion_tokens=600,
                  usage={"prompt_tokens": 3496, "completion_tokens": 600},
                  train_window={"size": 4096, "prompt_tokens": 3496, "max_tokens": 600})


@pytest.mark.parametrize(("by_max_tokens", "by_window", "says"), [
    (3, 0, "(3 completion(s) cut off by max_tokens: truncated, which is expected, not broken)"),
    (0, 3, "(3 completion(s) ended at their --train-window room: what the trainer keeps, not broken)"),
    (2, 1, "(3 completion(s) cut off: 2 by max_tokens, 1 at their --train-window room; expected, not broken)"),
])
def test_the_verdict_line_says_where_replies_were_cut(tmp_path: Path, by_max_tokens: int, by_window: int,
                                                       says: str) -> None:
    records = [result(f"g{i}") for i in range(20)]
    records += [result(f"t{i}", finish_reason="length") for i in range(by_max_tokens)]
    records += [_window_cut(f"w{i}") for i in range(by_window)]
    write_segment(tmp_path / "run", records)
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"verdict: HEALTHY {says}" in " ".join(proc.stdout.split())
