"""The estimate on a simulated fleet's modelled clock, and results that know where they came from.

Pure: a wall time read on a server's modelled clock (client.fleet.sim_clock.ClockTrace), the servers' own
count of a window, and run.json's `fleets` (a run on the same fleet adds nothing). On simulated servers
over sockets: three calibrations of the same command agree on the modelled clock, whatever else the
machine runs (only modelled quantities are asserted: the simulated GPU's tokens per modelled second, never
a wall-clock rate); a run on a simulated fleet records it in run.json, and `--from-results` on its results
refuses with the reason instead of taking the host's wall clock for a GPU's. And the simulator's rank,
behind its schedule, waits for the client's next request rather than decode a batch a starved host thinned.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.fleet.sim_clock import ClockTrace
from client.local.run_settings import from_json, next_fleets
from simulator.config import SimConfig
from simulator.engine import EngineRequest, Rank
from tests.conftest import REPO

URL = "http://127.0.0.1:1"


def _trace() -> ClockTrace:
    """One server: idle until wall 100, then busy at half the wall's pace (a starved host) to wall 104,
    idle for a second, then busy again; 100 tokens per modelled second over a batch of 4 per step."""
    trace = ClockTrace()
    for wall, busy in ((99.0, 10.0), (100.0, 10.0), (102.0, 11.0), (104.0, 12.0), (105.0, 12.0), (106.0, 13.0)):
        modelled = busy - 10.0
        trace.add(URL, wall, busy, (100 * modelled, 10 * modelled, 40 * modelled))
    return trace


@pytest.mark.parametrize(("wall", "modelled"), [
    (90.0, 0.0),  # before the first reading: its origin
    (99.5, 0.0),  # idle: the clock stands still
    (101.0, 0.5),  # busy at half the wall's pace
    (104.5, 2.0),  # idle again
    (105.5, 2.5),
    (200.0, 3.0),  # after the last reading: its value
])
def test_a_wall_time_reads_on_the_servers_modelled_clock(wall: float, modelled: float) -> None:
    assert _trace().at(URL, wall) == pytest.approx(modelled)


def test_an_unknown_server_has_no_modelled_time() -> None:
    assert _trace().at("http://elsewhere:1", 101.0) is None


def test_a_reading_out_of_order_or_running_back_changes_nothing() -> None:
    trace = _trace()
    trace.add(URL, 103.0, 99.0)  # older than the last reading
    trace.add(URL, 107.0, 5.0)  # a clock that runs back is held where it was
    assert trace.at(URL, 101.0) == pytest.approx(0.5)
    assert trace.at(URL, 107.0) == pytest.approx(3.0)


def test_the_servers_count_the_window_they_decoded() -> None:
    # Modelled seconds 0.5-2.5: 100 tokens per modelled second, a batch of 40 / 10 = 4 requests per step.
    rate, batch = _trace().served(0.5, 2.5) or (0.0, 0.0)
    assert rate == pytest.approx(100.0)
    assert batch == pytest.approx(4.0)
    assert _trace().served(2.0, 2.0) is None


def test_run_json_adds_a_fleet_only_when_it_changes() -> None:
    sim = {"simulated": True, "servers": 2, "gpus": 2, "kind": "Simulated GPU", "clock": "modelled", "speed": 20.0}
    real = {"simulated": False, "servers": 1, "gpus": 8, "kind": "NVIDIA B200", "clock": "wall"}
    fleets = next_fleets((), sim, run="a", at=0.0)
    assert next_fleets(fleets, dict(sim), run="b", at=1.0) == fleets  # a resume on the same fleet
    both = next_fleets(fleets, real, run="c", at=2.0)
    assert [(f["run"], f["simulated"]) for f in both] == [("a", True), ("c", False)]
    assert next_fleets(both, None, run="d", at=3.0) == both


def _prompts(path: Path, count: int) -> Path:
    lines = [orjson.dumps({"id": f"{s}-{i}", "messages": [{"role": "user", "content": f"q {i}"}],
                           "meta": {"source": s}}) for i in range(count) for s in ("chat", "code")]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)


def _calibrate(prompts: Path) -> dict[str, Any]:
    proc = _tool("client.estimate", "--simulate", "2", "--prompts", str(prompts), "--sim-speed", "10",
                 "--sim-max-running", "8", "--sim-arg=--mean-tokens", "--sim-arg=60", "--sample", "100",
                 "--rounds", "50", "--max-tokens", "300", "--progress-every", "60", "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.mark.slow
def test_three_calibrations_of_one_command_agree_on_the_modelled_clock(tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "p.jsonl", 100)
    runs = [_calibrate(prompts) for _ in range(3)]
    for run in runs:
        assert run["input"]["clock"] == "modelled"
        assert run["input"]["simulated"]["speed"] == 10.0 and run["input"]["simulated"]["servers"] == 2
    # The sample and the simulated lengths are fixed by the seed: the tokens are the same numbers.
    assert len({run["projection"]["targets"][0]["output_tokens"]["point"] for run in runs}) == 1
    rates = [run["projection"]["throughput"]["tokens_per_s"] for run in runs]
    middle = statistics.median(rates)
    assert all(abs(rate / middle - 1) <= 0.05 for rate in rates), rates
    # The modelled GPU cannot beat its own full batch: 2 servers x 8 slots, one token a step of
    # 20 ms x (1 + 8/8) at speed 1 (simulator's defaults).
    assert max(rates) <= 2 * 8 / 0.040 * 1.001, rates
    walls = [run["projection"]["targets"][0]["wall_s"] for run in runs]
    for one in walls:
        for other in walls:
            assert other["low"] <= one["point"] <= other["high"], walls


@pytest.mark.slow
def test_a_simulated_run_is_recorded_and_from_results_refuses_it(tmp_path: Path) -> None:
    prompts = _prompts(tmp_path / "p.jsonl", 10)
    out = tmp_path / "run"
    proc = _tool("client.run", "--simulate", "2", "--sim-speed", "10", "--sim-arg=--mean-tokens", "--sim-arg=20",
                 "--prompts", str(prompts), "--out", str(out), "--max-tokens", "100", "--plain")
    assert proc.returncode == 0, proc.stderr[-3000:]
    fleets = from_json((out / "run.json").read_bytes()).fleets
    assert len(fleets) == 1
    assert {k: fleets[0][k] for k in ("simulated", "servers", "speed", "kind", "clock", "gpus")} == {
        "simulated": True, "servers": 2, "speed": 10.0, "kind": "Simulated GPU", "clock": "modelled", "gpus": 2}
    refused = _tool("client.estimate", "--from-results", str(out), "--prompts", str(prompts), "--json")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "simulated fleet (2 server(s) at speed 10.0" in refused.stderr
    assert "--simulate N" in refused.stderr


async def test_a_rank_behind_schedule_waits_for_the_clients_next_request() -> None:
    # Slots a finished request freed are owed to the client: a submit pays one back and ends the wait; with
    # none coming the wait gives up (the run is draining) and the rank waits no more until the client sends
    # again. The modelled clock counts no part of it.
    rank = Rank(0, SimConfig(max_running=2), random.Random(0))
    rank._owed = 1
    loop = asyncio.get_running_loop()
    loop.call_later(0.001, rank.submit, EngineRequest(5, 10))
    await rank._await_refill(loop)
    assert rank._owed == 0 and len(rank.waiting) == 1
    rank._owed = 1
    await rank._await_refill(loop)
    assert rank._owed == 0 and not rank._patient  # until the client sends again
    rank.submit(EngineRequest(5, 10))
    assert rank._patient
    assert rank.stats.busy_s == 0.0
