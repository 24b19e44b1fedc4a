"""A raw byte that is not UTF-8 (here 0xff inside an id) makes its line a bad record like any other: the
run, the audit, the status and the estimate name it with FILE:LINE and go on with the valid lines,
where they used to stop on a UnicodeDecodeError traceback and write nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, read_results, run_client
from tests.results_fixture import result, write_prompt_ids, write_segment

BAD_PROMPT = b'{"id": "a\xff", "messages": [{"role": "user", "content": "hi"}]}\n'
PROBLEM = "not valid UTF-8: byte 0xff"


def prompts_with_a_bad_line(path: Path) -> Path:
    """Five valid prompts with the bad line third."""
    make_prompts(path, 5)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], BAD_PROMPT, *lines[2:]]))
    return path


def results_with_a_bad_line(out: Path) -> Path:
    """A segment whose second line holds the bad byte in its id; `p1` is there twice and `stranger` is not a
    prompt, so that the audit also names duplicated and unknown ids (a second pass over the lines)."""
    records = [result("p0"), result("a\u00e9"), result("p1"), result("p1"), result("stranger")]
    segment = write_segment(out, records)
    segment.write_bytes(segment.read_bytes().replace("a\u00e9".encode(), b"a\xff"))
    return segment


def tool(name: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", f"client.{name}", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def test_run_reports_the_line_and_does_the_valid_ones(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=("--mean-tokens", "20"))])
    prompts = prompts_with_a_bad_line(tmp_path / "p.jsonl")
    lenient = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "o")])
    assert lenient.code == 0, lenient.stderr[-3000:]
    assert "Traceback" not in lenient.stderr
    assert f"{prompts}:3: {PROBLEM} at byte 10" in lenient.stderr
    assert "skipped-invalid 1" in lenient.stderr
    assert sorted(r["id"] for r in read_results(tmp_path / "o")) == [f"p{i:06d}" for i in range(5)]

    strict = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "s"),
                         "--strict"])
    assert strict.code == 3, strict.stderr[-3000:]
    assert "Traceback" not in strict.stderr
    assert f"{prompts}:3: {PROBLEM}" in strict.stderr


def test_audit_names_the_line(tmp_path: Path) -> None:
    segment = results_with_a_bad_line(tmp_path / "run")
    prompts = write_prompt_ids(tmp_path / "p.jsonl", ["p0", "p1", "p2"])
    with prompts.open("ab") as handle:
        handle.write(BAD_PROMPT)
    proc = tool("audit", str(tmp_path / "run"), "--prompts", str(prompts), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 1, proc.stderr[-3000:]  # p1 twice and a stranger
    data = orjson.loads(proc.stdout)
    assert data["counts"]["corrupt_lines"] == 1
    assert data["unreadable_examples"] == [f"{segment}:2: {PROBLEM} at byte 9 of the line (JSON lines must be UTF-8)"]
    assert (data["ids"]["missing"], data["ids"]["duplicated"], data["ids"]["unknown"]) == (1, 1, 1)
    assert data["ids"]["examples"]["unknown"][0].startswith("stranger (")


def test_status_names_the_line(tmp_path: Path) -> None:
    segment = results_with_a_bad_line(tmp_path / "run")
    prompts = prompts_with_a_bad_line(tmp_path / "p.jsonl")
    proc = tool("status", "--out", str(tmp_path / "run"), "--prompts", str(prompts), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = orjson.loads(proc.stdout)
    assert doc["corrupt_lines"] == 1 and doc["prompts"] == 5
    assert doc["unreadable_examples"] == [f"{segment}:2: {PROBLEM} at byte 9 of the line (JSON lines must be UTF-8)"]
    # The table wraps to the terminal: relative paths keep the line whole, whatever the temporary directory.
    table = tool("status", "--out", "run", "--prompts", "p.jsonl", cwd=tmp_path)
    assert table.returncode == 0, table.stderr[-3000:]
    assert "1 unreadable line(s)" in table.stdout
    assert f"run/segments/{segment.name}:2: {PROBLEM} at byte 9" in table.stdout


def test_estimate_from_results_names_the_lines(tmp_path: Path) -> None:
    segment = results_with_a_bad_line(tmp_path / "run")
    prompts = write_prompt_ids(tmp_path / "p.jsonl", ["p0", "p1", "p2"])
    with prompts.open("ab") as handle:
        handle.write(BAD_PROMPT)
    proc = tool("estimate", "--from-results", str(tmp_path / "run"), "--prompts", str(prompts), "--json")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    data = orjson.loads(proc.stdout)["input"]
    assert data["prompts"] == 3 and data["invalid_prompts"] == 1
    assert data["prompt_problems"] == [f"{prompts}:4: {PROBLEM} at byte 10 of the line (JSON lines must be UTF-8)"]
    assert data["unreadable_results"] == 1
    assert data["unreadable_examples"] == [f"{segment}:2: {PROBLEM} at byte 9 of the line (JSON lines must be UTF-8)"]
    table = tool("estimate", "--from-results", "run", "--prompts", "p.jsonl", cwd=tmp_path)
    assert "Traceback" not in table.stderr, table.stderr[-3000:]
    assert f"p.jsonl:4: {PROBLEM}" in table.stdout and f"run/segments/{segment.name}:2: {PROBLEM}" in table.stdout


def test_status_folds_a_long_file_line_instead_of_cutting_it(tmp_path: Path) -> None:
    """A FILE:LINE wider than the table folds onto the next lines: every character is printed."""
    deep = tmp_path.joinpath(*(["a-rather-long-directory-name"] * 5), "run")
    segment = results_with_a_bad_line(deep)
    table = tool("status", "--out", str(deep))
    assert table.returncode == 0, table.stderr[-3000:]
    expected = f"{segment}:2: {PROBLEM} at byte 9 of the line (JSON lines must be UTF-8)"
    assert len(expected) > 160 and "…" not in table.stdout
    printed = "".join(table.stdout.replace("│", " ").split())  # the folds, without the column rule and padding
    assert "".join(expected.split()) in printed
