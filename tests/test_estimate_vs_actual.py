"""The estimate against the run it foresees, end to end on a simulated fleet: what is deterministic.

A 400-prompt sample of 2,000 prompts, then the full run of the same prompts, both the real CLIs on two
servers of 16 slots. The simulated output lengths are heavy-tailed and fixed by the request, and the
sample is fixed by the seed, so the projected and the actual output tokens are the same numbers on every
machine: the projection must land within 10% of the tokens the full run made. Both are timed on the
servers' modelled clock. The full run's results, read back with --from-results, are refused: its run.json
records the simulated fleet, whose results carry the host's wall clock, not a GPU's. A heavy-tailed set whose
small sample leaves the tokens open gets the sample size that closes them, and a calibration with it does.

How close the projected time comes to the actual one is measured, not asserted: `python -m
bench.estimate_vs_actual` (figures in docs/benchmarks.md).
The wall-time arithmetic on recorded timings is tested on fixed timings in tests/test_estimate.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.estimate_vs_actual import SHAPES, compare, sim_spec
from tests.conftest import REPO

TOLERANCE = 0.10


@pytest.mark.slow
def test_a_sample_projects_the_full_runs_output_tokens(tmp_path: Path, fleet_factory: Any) -> None:
    spec = sim_spec(max_running=16, speed=10.0, tokens_per_chunk=8, mean_tokens=100)
    fleet = fleet_factory([spec] * 2, seed=0)
    row = compare(tmp_path, fleet.urls, prompts=2_000, sample="400", max_tokens=300, seed=0)
    assert row["sample"] == 400
    assert row["actual_records"] == 2_000
    tokens = row["projected_tokens"]
    assert tokens["low"] <= tokens["point"] <= tokens["high"]
    assert abs(row["tokens_error"]) <= TOLERANCE, row
    wall = row["projected_wall_s"]
    assert 0 < wall["low"] <= wall["point"] <= wall["high"], row
    assert row["clock"] == "modelled" and row["actual_s"] == row["actual_modelled_s"] > 0, row

    # Read back from the full run: refused, with the reason, since its fleet was simulated.
    proc = subprocess.run([sys.executable, "-m", "client.estimate", "--from-results", str(tmp_path / "full"),
                           "--prompts", str(tmp_path / "prompts.jsonl"), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ran on a simulated fleet (2 server(s) at speed 10.0" in proc.stderr


@pytest.mark.slow
def test_a_heavy_tail_gets_the_sample_it_needs(tmp_path: Path, fleet_factory: Any) -> None:
    """Long reasoning with a heavy tail: a small sample leaves the tokens wide open and the estimate names the
    sample that closes them to about +-5%; a calibration with that sample does."""
    sources, extra, factor = SHAPES["reasoning"]
    spec = sim_spec(max_running=16, speed=20.0, tokens_per_chunk=8, mean_tokens=100, extra=extra)
    fleet = fleet_factory([spec] * 2, seed=0)
    row = compare(tmp_path, fleet.urls, prompts=1_500, sample="120", max_tokens=300 * factor, seed=0, sources=sources,
                  follow_advice=True)
    assert row["tokens_precision"] > 0.05 and row["advised_sample"] is not None, row
    advised = row["advised"]
    assert advised["sample"] == row["advised_sample"], "the second calibration sends the sample the first named"
    assert advised["tokens_precision"] <= 0.065, advised  # about 5%: the advice is a normal approximation
    tokens = advised["projected_tokens"]
    assert tokens["low"] <= tokens["point"] <= tokens["high"]
