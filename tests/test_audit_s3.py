"""The offline tools read a run from its S3 prefix (a real S3 protocol server) as from its directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, run_client
from tests.s3_server import BUCKET, S3Server


def tool(module: str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", module, *args, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False, env=dict(os.environ))
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


@pytest.mark.slow
def test_audit_and_estimate_read_the_s3_prefix(tmp_path: Path, fleet_factory: Any,
                                               s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0,
                                         extra_args=("--mean-tokens", "200", "--tokens-per-chunk", "8"))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    prefix = f"s3://{BUCKET}/{s3_prefix}"
    run = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                      "--segment-mb", "0.05", "--s3", prefix, "--s3-endpoint-url", s3.url])
    assert run.code == 0, run.stderr[-2000:]
    local_code, local, _ = tool("client.audit", str(tmp_path / "o"), "--prompts", str(prompts))
    code, remote, stderr = tool("client.audit", prefix, "--s3-endpoint-url", s3.url, "--prompts", str(prompts))
    assert code == local_code == 0, stderr
    assert remote["counts"]["segments"] > 3
    for key in ("ids", "finish_reasons", "completion_tokens", "tool_calls", "models"):
        assert remote[key] == local[key], key
    assert not remote["stubs"]["examples"] or "segments/" in remote["stubs"]["examples"][0]
    code, estimate, stderr = tool("client.estimate", "--from-results", prefix, "--s3-endpoint-url", s3.url,
                                  "--prompts", str(prompts))
    assert code == 0, stderr
    assert estimate["input"]["done"] == 200
    code, _, stderr = tool("client.audit", f"s3://{BUCKET}/nothing-here", "--s3-endpoint-url", s3.url)
    assert code == 2 and "no uploaded result segments" in stderr


def test_edited_prompts_of_an_s3_run_get_advice_that_works(tmp_path: Path, fleet_factory: Any,
                                                            s3: S3Server, s3_prefix: str) -> None:
    """`client.run --redo-edited --s3` is refused (S3 segments are never rewritten), so the audit of an S3
    run must not advise it (before, it did)."""
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=("--mean-tokens", "20"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 6)
    prefix = f"s3://{BUCKET}/{s3_prefix}"
    run = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                      "--s3", prefix, "--s3-endpoint-url", s3.url])
    assert run.code == 0, run.stderr[-2000:]
    lines = prompts.read_text().splitlines()
    lines[2] = lines[2].replace("Question number 2", "Question number two")
    prompts.write_text("\n".join(lines) + "\n")
    _, remote, stderr = tool("client.audit", prefix, "--s3-endpoint-url", s3.url, "--prompts", str(prompts))
    edited = [f["message"] for f in remote["findings"] if "were edited" in f["message"]]
    assert len(edited) == 1, stderr
    assert "give them new ids" in edited[0] and "run client.run with --redo-edited" not in edited[0]
    _, local, _ = tool("client.audit", str(tmp_path / "o"), "--prompts", str(prompts))
    assert any("run client.run with --redo-edited" in f["message"] for f in local["findings"])
