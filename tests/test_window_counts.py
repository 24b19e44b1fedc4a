"""`--train-window` counts held to the server's own word, and a wider window that sends what now fits.

- The tolerance rule (table): a count may differ from the reply's `usage.prompt_tokens` by at most
  max(8, 2%) tokens (client.core.window_count).
- A count route that lies (a reverse proxy in front of the simulator answering every tokenize request with
  3,000, while the chat route's usage says about 20): before, every reply was capped at window - 3,000
  and the audit called the cuts "what the trainer keeps; not damage" and said HEALTHY. Now the run's
  summary warns, and the audit fails those records.
- A count below one (-100000 was accepted and recorded) is refused at start.
- A resume with a wider window sends the prompts that now fit (before: none, "too-long-earlier").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client.core.window_count import miscounted, record_miscount
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, read_failures, read_results, run_client


@pytest.mark.parametrize(("counted", "reported", "wrong"), [
    (20, 20, False), (28, 20, False), (29, 20, True), (12, 20, False), (11, 20, True),
    (1020, 1000, False), (1021, 1000, True), (3000, 20, True), (-100000, 20, True),
])
def test_the_tolerance(counted: int, reported: int, wrong: bool) -> None:
    assert miscounted(counted, reported) is wrong


@pytest.mark.parametrize(("record", "expected"), [
    ({"train_window": {"prompt_tokens": 3000}, "usage": {"prompt_tokens": 20}}, (3000, 20)),
    ({"train_window": {"prompt_tokens": 20}, "usage": {"prompt_tokens": 20}}, None),
    ({"usage": {"prompt_tokens": 20}}, None),  # no window
    ({"train_window": {"prompt_tokens": 3000}, "usage": {}}, None),  # no usage to hold it to
    ({"train_window": {"prompt_tokens": 3000.0}, "usage": {"prompt_tokens": 20}}, None),
])
def test_a_record_is_judged_by_its_own_two_counts(record: dict[str, Any], expected: tuple[int, int] | None) -> None:
    assert record_miscount(record) == expected


def _liar(servers: Any, fleet: Any, count: str) -> Any:
    """A reverse proxy at /api in front of the fleet's server whose tokenize answers say `count`."""
    return servers.start("proxies", "reverse", "--prefix", "/api", "--upstream", fleet.urls[0], "--count-as", count)


def _audit(out: Path) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    return proc.returncode, json.loads(proc.stdout)


def test_a_lying_count_route_is_caught_by_the_run_and_the_audit(tmp_path: Path, fleet_factory: Any,
                                                              servers: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=50.0, extra_args=("--mean-tokens", "40"))])
    liar = _liar(servers, fleet, "3000")
    prompts = make_prompts(tmp_path / "p.jsonl", 6, with_tools_every=0)
    out = tmp_path / "out"
    result = run_client(["--endpoints", f"{liar.url}/api", "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "2000", "--train-window", "3100"])
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    assert len(records) == 6
    assert all(r["train_window"]["prompt_tokens"] == 3000 and r["train_window"]["max_tokens"] == 100 for r in records)
    assert "warning: 6 record(s) were capped by a --train-window count that disagrees" in result.stderr
    code, report = _audit(out)
    assert code != 0 and report["verdict"] != "healthy"
    assert report["window_miscounts"] == 6
    assert any(f["level"] == "fail" and "--train-window prompt count that disagrees" in f["message"]
               for f in report["findings"])


def test_a_count_below_one_is_refused(tmp_path: Path, fleet_factory: Any, servers: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=4, speed=50.0)])
    liar = _liar(servers, fleet, "-100000")
    prompts = make_prompts(tmp_path / "p.jsonl", 2, with_tools_every=0)
    result = run_client(["--endpoints", f"{liar.url}/api", "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                         "--max-tokens", "64", "--train-window", "4096"])
    assert result.code == 2, result.stderr[-3000:]
    assert "impossible token count, -100000" in result.stderr
    assert not read_results(tmp_path / "out")


def test_a_wider_window_sends_the_prompts_that_now_fit(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 6, with_tools_every=3)  # two carry a tool: longer prompts
    out = tmp_path / "out"
    base = ["--simulate", "1", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out),
            "--max-tokens", "32"]
    first = run_client([*base, "--train-window", "30"])
    assert first.code == 0, first.stderr[-3000:]
    filled = {f["id"] for f in read_failures(out) if f["error_class"] == "fills_window"}
    assert filled and all(f.get("train_window") == 30 for f in read_failures(out))
    assert f"fills_window {len(filled)}" in first.stderr and "too_long" not in first.stderr.split("reconciliation")[1]
    wider = run_client([*base, "--train-window", "100000", "--allow-settings-change"])
    assert wider.code == 0, wider.stderr[-3000:]
    assert {r["id"] for r in read_results(out)} >= filled, "the prompts that fit the wider window were sent"
    assert "too-long-or-fills-window-earlier" not in wider.stderr
