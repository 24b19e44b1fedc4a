"""`python -m client.run` refuses option values that used to get through argparse and then break the run:
each is a one-line option error, exit 2, before anything is sent or written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch.sim.fleet import SimServerSpec
from tests.conftest import make_prompts, run_client

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
