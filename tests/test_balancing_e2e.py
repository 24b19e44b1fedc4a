"""Queue-depth balancing and endpoint health, end to end against real simulated servers."""

from __future__ import annotations

import collections
import subprocess
import time
from pathlib import Path
from typing import Any

from launch.sim.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results, run_client
from tests.test_run_e2e import assert_complete_once

FAST = ("--mean-tokens", "150", "--tokens-per-chunk", "2")


def per_endpoint(out: Path) -> collections.Counter[str]:
    return collections.Counter(r["endpoint"] for r in read_results(out))


def test_four_times_the_capacity_gets_four_times_the_work(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=4, speed=6.0, extra_args=FAST),
                           SimServerSpec(max_running=16, speed=6.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 400)
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)])
    assert result.code == 0, result.stderr[-2000:]
    counts = per_endpoint(out)
    small, large = counts[fleet.urls[0]], counts[fleet.urls[1]]
    assert small + large == 400
    assert 3.0 <= large / small <= 5.0, (small, large)


def test_killed_server_rejoins_after_restart(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=4.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 500)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
            "--idle-timeout", "10"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(3.0)
        fleet.kill(1)
        time.sleep(3.0)
        restarted_at = time.time()
        fleet.restart(1)
        _, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    records = read_results(out)
    assert_complete_once(records, {f"p{i:06d}" for i in range(500)})
    after = [r for r in records if r["endpoint"] == fleet.urls[1] and r["created"] > restarted_at + 1.0]
    assert len(after) > 20, "the restarted server must take work again"


def test_late_server_joins_when_ready(tmp_path: Path, fleet_factory: Any) -> None:
    ready = fleet_factory([SimServerSpec(max_running=8, speed=3.0, extra_args=FAST)])
    late = fleet_factory([SimServerSpec(max_running=8, speed=3.0, startup_delay=10.0, extra_args=FAST)],
                         wait_ready=False)
    prompts = make_prompts(tmp_path / "p.jsonl", 400)
    out = tmp_path / "out"
    started = time.time()
    result = run_client(["--endpoints", f"{ready.urls[0]},{late.urls[0]}", "--prompts", str(prompts),
                         "--out", str(out)])
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    assert_complete_once(records, {f"p{i:06d}" for i in range(400)})
    from_late = [r for r in records if r["endpoint"] == late.urls[0]]
    assert from_late, "the late server must join once ready"
    assert min(r["created"] for r in from_late) >= started + 9.0
    assert all(r["attempts"] == 1 for r in records), "nothing may be sent to a server that is not ready"
