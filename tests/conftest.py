"""Shared test fixtures: prompt files, simulated fleets (real subprocess servers on 127.0.0.1), and a
helper that runs the real `python -m client.run` CLI as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from launch.sim.fleet import SimFleet, SimServerSpec

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "prompts" / "sample.jsonl"

pytest_plugins = ["tests.engines.conftest_vllm"]


def make_prompts(path: Path, count: int, *, with_tools_every: int = 4, prefix: str = "p") -> Path:
    """`count` valid PromptRecords; every `with_tools_every`-th carries a tool schema."""
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    lines = []
    for i in range(count):
        record: dict[str, Any] = {"id": f"{prefix}{i:06d}",
                                  "messages": [{"role": "user", "content": f"Question number {i}: explain {i % 17}."}],
                                  "meta": {"source": "test", "n": i}}
        if with_tools_every and i % with_tools_every == 0:
            record["tools"] = [tool]
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def read_results(out: Path) -> list[dict[str, Any]]:
    """Every result line of every segment; fails on any line that is not valid JSON."""
    records = []
    for segment in sorted((out / "segments").glob("*.jsonl")):
        for number, line in enumerate(segment.read_bytes().splitlines(), start=1):
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:  # pragma: no cover - the assertion is the point
                raise AssertionError(f"{segment}:{number} is not valid JSON: {line[:120]!r}") from exc
    return records


def read_failures(out: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for path in sorted((out / "failures").glob("*.jsonl"))
            for line in path.read_bytes().splitlines()]


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


def client_command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "client.run", "--plain", "--progress-every", "2", *args]


def run_client(args: Sequence[str], timeout: float = 180.0) -> CliResult:
    proc = subprocess.run(client_command(args), cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[Any]:
    """Start simulated fleets; every fleet started here is closed after the test."""
    fleets: list[SimFleet] = []

    def start(specs: Sequence[SimServerSpec], *, wait_ready: bool = True, seed: int = 0) -> SimFleet:
        fleet = SimFleet(list(specs), seed=seed, log_dir=tmp_path / f"sim-logs-{len(fleets)}")
        fleets.append(fleet)
        fleet.start(wait_ready=wait_ready)
        return fleet

    yield start
    for fleet in fleets:
        fleet.close()
