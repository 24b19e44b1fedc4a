"""Queue-depth balancing and endpoint health, end to end against real simulated servers."""

from __future__ import annotations

import collections
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from client.fleet.balancer import target_depth
from launch.sim.fleet import SimServerSpec
from tests.conftest import REPO, client_command, count_written, make_prompts, read_results, run_client, wait_for_records
from tests.test_run_e2e import assert_complete_once

FAST = ("--mean-tokens", "150", "--tokens-per-chunk", "2")


def per_endpoint(out: Path) -> collections.Counter[str]:
    return collections.Counter(r["endpoint"] for r in read_results(out))


def tokens_per_endpoint(out: Path) -> collections.Counter[str]:
    tokens: collections.Counter[str] = collections.Counter()
    for record in read_results(out):
        tokens[record["endpoint"]] += record["usage"]["completion_tokens"]
    return tokens


@pytest.mark.slow
def test_four_times_the_capacity_gets_four_times_the_work(tmp_path: Path, fleet_factory: Any) -> None:
    """While prompts remain, the policy holds every endpoint between its capacity and its target depth, so
    each server decodes at full batch and its share of the generated tokens is its share of the slots.
    The one slack is the end of the run: when the prompts run out, each server still finishes what it
    holds, at most its target depth of requests of at most --max-tokens each. So with capacities 4 and
    16 (ratio 4) the large server's tokens L and the small one's S satisfy
        -4 * target_depth(4) * M  <=  L - 4 * S  <=  target_depth(16) * M.
    Token counts, not request counts: lengths are heavy-tailed, so how many requests fit in a server's
    slots varies from run to run far more than the tokens it decodes."""
    small_slots, large_slots, max_tokens = 4, 16, 300
    fleet = fleet_factory([SimServerSpec(max_running=small_slots, speed=6.0, extra_args=FAST),
                           SimServerSpec(max_running=large_slots, speed=6.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 400)
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", str(max_tokens)])
    assert result.code == 0, result.stderr[-2000:]
    counts, tokens = per_endpoint(out), tokens_per_endpoint(out)
    assert counts[fleet.urls[0]] + counts[fleet.urls[1]] == 400
    small, large = tokens[fleet.urls[0]], tokens[fleet.urls[1]]
    ratio = large_slots // small_slots
    low = -ratio * target_depth(small_slots) * max_tokens
    high = target_depth(large_slots) * max_tokens
    assert low <= large - ratio * small <= high, (
        f"tokens small {small}, large {large} (ratio {large / small:.2f}): L - {ratio}S = {large - ratio * small} "
        f"is outside [{low}, {high}]; requests {dict(counts)}")


@pytest.mark.slow
def test_killed_server_rejoins_after_restart(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=8.0, extra_args=FAST)] * 2)
    # Enough prompts that many are left once the restarted server is back and probed (its start-up and the
    # client's probe interval take seconds on a loaded machine, while server 0 goes on alone).
    prompts = make_prompts(tmp_path / "p.jsonl", 480)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
            "--idle-timeout", "10"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for_records(out, 50, proc=proc)  # under way on both servers
        fleet.kill(1)
        killed_with = count_written(out)
        wait_for_records(out, killed_with + 40, proc=proc)  # and going on without server 1
        restarted_at = time.time()
        fleet.restart(1)
        _, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    records = read_results(out)
    assert_complete_once(records, {f"p{i:06d}" for i in range(480)})
    # Server 1 was dead from the kill to the restart: a record of its written after the restart is the new one's.
    after = [r for r in records if r["endpoint"] == fleet.urls[1] and r["created"] > restarted_at]
    assert len(after) >= 10, f"the restarted server must take work again; it did {len(after)}"


@pytest.mark.slow
def test_late_server_joins_when_ready(tmp_path: Path, fleet_factory: Any) -> None:
    delay = 3.0
    ready = fleet_factory([SimServerSpec(max_running=8, speed=3.0, extra_args=FAST)])
    late_started = time.time()
    late = fleet_factory([SimServerSpec(max_running=8, speed=3.0, startup_delay=delay, extra_args=FAST)],
                         wait_ready=False)
    prompts = make_prompts(tmp_path / "p.jsonl", 120)
    out = tmp_path / "out"
    result = run_client(["--endpoints", f"{ready.urls[0]},{late.urls[0]}", "--prompts", str(prompts),
                         "--out", str(out)])
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    assert_complete_once(records, {f"p{i:06d}" for i in range(120)})
    from_late = [r for r in records if r["endpoint"] == late.urls[0]]
    assert len(from_late) > 10, "the late server must join once ready"
    assert min(r["created"] for r in from_late) >= late_started + delay, "nothing ends there before it is ready"
    assert all(r["attempts"] == 1 for r in records), "nothing may be sent to a server that is not ready"
