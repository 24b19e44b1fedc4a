"""The estimate's promise, checked end to end: on a simulated fleet, a projection from a 2% sample lands
within 10% of the wall time of the full run of the same prompts.

20,000 prompts (so the 2% sample is 400: the simulated lengths are heavy-tailed, and the sample's mean
is the dominant error) on two servers of 16 slots; both the estimate and the full run are the real CLIs.
About 35 s on an idle two-core machine. This is the one timed assertion of the suite: a machine busy
with other work while it runs slows the full run and not the sample (or the other way round), which no
estimate can foresee; when the load average says so and the figures are off, the test is skipped with
the figures in the reason rather than failed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from bench.estimate_vs_actual import compare, sim_spec

TOLERANCE = 0.10


@pytest.mark.slow
def test_two_percent_sample_projects_the_full_run_within_ten_percent(tmp_path: Path, fleet_factory: Any) -> None:
    spec = sim_spec(max_running=16, speed=10.0, tokens_per_chunk=8, mean_tokens=100)
    fleet = fleet_factory([spec] * 2, seed=0)
    row = compare(tmp_path, fleet.urls, prompts=20_000, sample="2%", max_tokens=300, seed=0)
    load = os.getloadavg()[0]
    if load > 2 * (os.cpu_count() or 1) and abs(row["wall_error"]) > TOLERANCE:
        pytest.skip(f"the machine was busy with other work (load {load:.1f}), which slows the full run and not "
                    f"the sample: {row}")
    assert row["sample"] == 400
    assert row["actual_records"] == 20_000
    assert abs(row["wall_error"]) <= TOLERANCE, row
    assert abs(row["tokens_error"]) <= TOLERANCE, row
