"""A start that is refused (here: its settings differ from run.json's) leaves the S3 prefix and --out as
it found them: the finished manifest is not rewritten as running with a dead pid (which `client.status`
would later call a stale shard), and --delete-uploaded deletes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import make_prompts, run_client
from tests.s3_server import BUCKET, S3Server

pytestmark = [pytest.mark.s3, pytest.mark.slow]


def prefix_state(s3: S3Server, prefix: str) -> dict[str, bytes]:
    return {key: s3.get(BUCKET, key) for key in s3.keys(BUCKET, f"{prefix}/")
            if not key.startswith(f"{prefix}/segments/")}


def test_a_start_refused_for_its_settings_changes_nothing(tmp_path: Path, fleet_factory: Any, s3: S3Server,
                                                          s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0,
                                         extra_args=("--mean-tokens", "60", "--tokens-per-chunk", "8"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 40)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
            "--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url]
    first = run_client(args)
    assert first.code == 0, first.stderr[-2000:]
    before = prefix_state(s3, s3_prefix)
    assert b'"state": "finished"' in before[next(k for k in before if "/manifests/" in k)]
    local = sorted((out / "segments").glob("*.jsonl"))
    assert local

    refused = run_client([*args, "--temperature", "1.3", "--delete-uploaded"])
    assert refused.code == 2, refused.stderr[-2000:]
    assert "settings differ" in refused.stderr
    assert prefix_state(s3, s3_prefix) == before, "a refused start rewrote the prefix's manifests or run.json"
    assert sorted((out / "segments").glob("*.jsonl")) == local, "a refused start deleted local segments"
