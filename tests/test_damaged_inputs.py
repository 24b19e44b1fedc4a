"""More damaged inputs that used to end in a traceback, each now a clear message and a run that goes on:
an `--endpoints @FILE` with bytes that are not UTF-8, random bytes appended to a segment's `.ids`
sidecar, a compressed segment cut short, a stream with an event that is not JSON (no "Future exception
was never retrieved" after the summary), and Ctrl-C or SIGTERM while the modules still load."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, make_prompts, read_failures, read_results, run_client
from tests.results_fixture import result, write_prompt_ids, write_segment


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Wide enough that the rich tables do not fold the message.
    return subprocess.run([sys.executable, "-m", f"client.{name}", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "COLUMNS": "400"})


def test_an_endpoints_file_that_is_not_utf8_names_its_line(tmp_path: Path) -> None:
    endpoints = tmp_path / "endpoints.txt"
    endpoints.write_bytes(b"# the fleet\nhttp://127.0.0.1:9\nhttp://127.0.0.1:1\xff0\n")
    result_ = run_client(["--endpoints", f"@{endpoints}", "--prompts", str(make_prompts(tmp_path / "p.jsonl", 1)),
                          "--out", str(tmp_path / "out")])
    assert result_.code == 2
    assert f"{endpoints}:3: not UTF-8 text (byte 0xff)" in result_.stderr
    assert "Traceback" not in result_.stderr


def test_a_damaged_ids_sidecar_is_rebuilt_from_its_segment(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    out = tmp_path / "out"
    args = ["--simulate", "1", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out), "--max-tokens", "16"]
    assert run_client(args).code == 0
    (sidecar,) = (out / "segments").glob("*.ids")
    sidecar.write_bytes(sidecar.read_bytes() + os.urandom(8) + b"\xff\xfe\n")
    again = run_client(args)
    assert again.code == 0, again.stderr
    assert "resuming: 12 done id(s) in 1 segment(s), rebuilt 1 damaged .ids sidecar(s) from their segments" \
        in again.stderr
    assert len(read_results(out)) == 12, "nothing done is generated again"
    assert "Traceback" not in again.stderr


def _truncated_gzip_run(folder: Path) -> Path:
    segment = write_segment(folder, [result(f"p{i}", content=f"answer {i} " * 40, created=1000.0 + i)
                                     for i in range(200)])
    packed = gzip.compress(segment.read_bytes())
    segment.unlink()
    (segment.parent / (segment.name + ".gz")).write_bytes(packed[: len(packed) // 2])
    return segment.parent / (segment.name + ".gz")


@pytest.mark.parametrize("command", [["audit", "{run}"], ["status", "--out", "{run}"],
                                     ["estimate", "--from-results", "{run}", "--prompts", "{prompts}"]],
                         ids=["audit", "status", "estimate"])
def test_a_compressed_segment_cut_short_is_named_and_its_lines_before_are_read(tmp_path: Path,
                                                                              command: list[str]) -> None:
    damaged = _truncated_gzip_run(tmp_path / "run")
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(200)])
    proc = tool(command[0], *[part.format(run=tmp_path / "run", prompts=prompts) for part in command[1:]])
    assert "Traceback" not in proc.stderr, proc.stderr
    said = proc.stdout + proc.stderr
    assert damaged.name in said and "ends early" in said, said


def test_an_event_that_is_not_json_fails_the_attempt_and_nothing_is_left_unretrieved(tmp_path: Path,
                                                                                     servers: Any) -> None:
    server = servers.oddserver("bad_event")
    out = tmp_path / "out"
    result_ = run_client(["--endpoints", server.url, "--prompts", str(make_prompts(tmp_path / "p.jsonl", 20)),
                          "--out", str(out), "--max-attempts", "2"])
    assert result_.code == 1, result_.stderr
    failures = read_failures(out)
    assert len(failures) == 20 and {f["error_class"] for f in failures} == {"StreamDropped"}
    assert "malformed event" in failures[0]["last_error"]
    assert "Future exception was never retrieved" not in result_.stderr
    assert "Traceback" not in result_.stderr


LOADING = """
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "client.run.main":
            raise KeyboardInterrupt  # what Ctrl-C or SIGTERM does to a module still loading
sys.meta_path.insert(0, Interrupt())
runpy.run_module("client.run", run_name="__main__")
"""


def test_ctrl_c_while_the_modules_load_is_exit_130_without_a_traceback() -> None:
    proc = subprocess.run([sys.executable, "-c", LOADING, "--simulate", "1"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "stopped by Ctrl-C or SIGTERM before the run started; nothing was sent"
