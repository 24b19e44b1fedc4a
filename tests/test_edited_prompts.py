"""A done prompt whose line is edited afterwards: the resume names its id (from the `prompt_sha256` its
result recorded), the audit warns, and --redo-edited takes the old result out and generates it again."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.records import prompt_sha256
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, read_results, run_client

MESSAGES = [{"role": "user", "content": "hi", "name": "a"}]


@pytest.mark.parametrize(("messages", "tools", "meta", "same"), [
    ([{"name": "a", "content": "hi", "role": "user"}], None, None, True),  # key order is not an edit
    ([{"role": "user", "content": "hi!", "name": "a"}], None, None, False),
    (MESSAGES, [{"type": "function"}], None, False),
    (MESSAGES, None, {"source": "x"}, False),
])
def test_prompt_sha256(messages: Any, tools: Any, meta: Any, same: bool) -> None:
    assert (prompt_sha256(messages, tools, meta) == prompt_sha256(MESSAGES, None, None)) is same


def audit(out: Path, prompts: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--prompts", str(prompts), "--json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report: dict[str, Any] = orjson.loads(proc.stdout)
    return report


def edit_line(prompts: Path, number: int, content: str) -> None:
    lines = prompts.read_bytes().splitlines()
    record = orjson.loads(lines[number - 1])
    record["messages"][0]["content"] = content
    lines[number - 1] = orjson.dumps(record)
    prompts.write_bytes(b"\n".join(lines) + b"\n")


def test_an_edited_done_prompt_is_named_and_redone_on_request(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "150", "--tokens-per-chunk", "8"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 20)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)]
    first = run_client(args)
    assert first.code == 0, first.stderr[-2000:]
    assert all(r["prompt_sha256"] for r in read_results(out))

    edit_line(prompts, 4, "An edited question.")
    kept = run_client(args)
    assert kept.code == 0, kept.stderr[-2000:]
    assert f"1 done prompt(s) were edited since their result was written: p000003 ({prompts}:4)" in kept.stderr
    assert "--redo-edited" in kept.stderr
    old = next(r for r in read_results(out) if r["id"] == "p000003")
    assert old["messages"][0]["content"] != "An edited question.", "kept until asked"
    findings = [f["message"] for f in audit(out, prompts)["findings"]]
    assert any("1 done prompt(s) were edited" in f and "p000003" in f for f in findings), findings

    redone = run_client([*args, "--redo-edited"])
    assert redone.code == 0, redone.stderr[-2000:]
    assert "took their 1 old result(s) out of the segments" in redone.stderr
    records = read_results(out)
    assert collections.Counter(r["id"] for r in records) == {f"p{i:06d}": 1 for i in range(20)}
    assert next(r for r in records if r["id"] == "p000003")["messages"][0]["content"] == "An edited question."
    report = audit(out, prompts)
    assert report["ids"]["edited"] == 0 and report["ids"]["duplicated"] == 0
