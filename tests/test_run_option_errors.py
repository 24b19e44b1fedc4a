"""`python -m client.run` refuses option values that used to get through argparse and then break the run:
each is a one-line option error, exit 2, before anything is sent or written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, run_client

FAST = ("--mean-tokens", "20")


def test_seed_past_64_bits_is_an_option_error(tmp_path: Path, fleet_factory: Any) -> None:
    # A live server, so that the old failure (orjson cannot write the seed into the first request) would show.
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    out = tmp_path / "out"
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                         "--seed", "18446744073709551616"])
    assert result.code == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert ("argument --seed: must be a whole number from -9223372036854775808 to 9223372036854775807 "
            "(signed 64-bit), got 18446744073709551616") in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("tool", ["run", "estimate"])
def test_empty_out_is_an_option_error(tmp_path: Path, fleet_factory: Any, tool: str) -> None:
    # Run from an empty directory: `--out ""` used to be taken as the current one and filled with
    # .lock, run.json, segments/ and failures/ (the estimate's sample too).
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    here = tmp_path / "here"
    here.mkdir()
    args = ["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", ""]
    command = client_command(args) if tool == "run" else [sys.executable, "-m", "client.estimate", *args]
    proc = subprocess.run(command, cwd=here, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "argument --out: must name a directory, got an empty path" in proc.stderr
    assert list(here.iterdir()) == []
