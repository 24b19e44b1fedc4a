"""The estimate's promise, checked end to end: on a simulated fleet, a projection from a 2% sample lands
within 10% of the wall time of the full run of the same prompts.

20,000 prompts (so the 2% sample is 400: the simulated lengths are heavy-tailed, and the sample's mean
is the dominant error) on two servers of 16 slots; both the estimate and the full run are the real CLIs.
About 35 s on an idle two-core machine. This is the one timed assertion of the suite, and it needs the
machine to itself: the test's own processes use about one core, and other work running at the same
time starves the 35 s full run far more than the half-second window in which the sample measures the
throughput, which no estimate can foresee. The CPU time the rest of the machine used meanwhile is
reported with the figures when the assertion fails, so such a failure explains itself; it is never
skipped.
"""

from __future__ import annotations

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
    assert row["sample"] == 400
    assert row["actual_records"] == 20_000
    assert abs(row["tokens_error"]) <= TOLERANCE, row
    assert abs(row["wall_error"]) <= TOLERANCE, (
        f"{row} (other processes used {row['cpu_used_elsewhere']:.0%} of the machine's CPU meanwhile)")
