"""A segment in S3 that is not the one its manifest lists (truncated, replaced) is damaged: the audit
says so and fails, and a run, even from a fresh --out, does not count its ids as done but generates them
again. A real S3 protocol server and the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.s3.manifest import SegmentEntry, body_problem, listed_problem
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, run_client
from tests.s3_server import BUCKET, S3Server

pytestmark = pytest.mark.s3

ENTRY = SegmentEntry(name="w-0of1-a", key="segments/w-0of1-a.jsonl", ids_key="segments/w-0of1-a.ids.gz",
                     records=3, completion_tokens=9, bytes=6, stored_bytes=6, gzip=False,
                     sha256="bfd2c0a9b8a1ae23dd2aef3e5e37bd7a6c5b6ddb0d8e6fae5b3c0fb2b4d18f5d",
                     etag="0f343b0931126a20f133d67c2b018a3b", ids_sha256="", uploaded=0.0)


@pytest.mark.parametrize(("size", "etag", "expected"), [
    (6, '"0f343b0931126a20f133d67c2b018a3b"', None),
    (None, None, "missing"),
    (3, "0f343b0931126a20f133d67c2b018a3b", "truncated"),
    (6, "d41d8cd98f00b204e9800998ecf8427e", "replaced"),
])
def test_listed_problem(size: int | None, etag: str | None, expected: str | None) -> None:
    problem = listed_problem(ENTRY, size, etag)
    assert problem is None if expected is None else expected in (problem or "")


def test_body_problem_checks_size_then_sha() -> None:
    assert "truncated" in (body_problem(ENTRY, b"abc") or "")
    assert "sha256" in (body_problem(ENTRY, b"abcdef") or "")


def audit(*args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", *args, "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False, env=dict(os.environ))
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


@pytest.mark.slow
def test_a_truncated_segment_is_damaged_and_its_ids_are_generated_again(
        tmp_path: Path, fleet_factory: Any, s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0,
                                         extra_args=("--mean-tokens", "150", "--tokens-per-chunk", "8"))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    prefix = f"s3://{BUCKET}/{s3_prefix}"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--segment-mb", "0.05",
            "--s3", prefix, "--s3-endpoint-url", s3.url]
    first = run_client([*args, "--out", str(tmp_path / "a")])
    assert first.code == 0, first.stderr[-2000:]

    (manifest_key,) = s3.keys(BUCKET, f"{s3_prefix}/manifests/")
    entry = max(orjson.loads(s3.get(BUCKET, manifest_key))["segments"], key=lambda e: e["records"])
    body = s3.get(BUCKET, f"{s3_prefix}/{entry['key']}")
    s3.client().put_object(Bucket=BUCKET, Key=f"{s3_prefix}/{entry['key']}", Body=body[: len(body) // 3])

    code, report, stderr = audit(prefix, "--s3-endpoint-url", s3.url, "--prompts", str(prompts))
    assert code == 1, stderr
    assert report["counts"]["damaged_segments"] == 1 and entry["key"] in report["damaged_segments"][0]
    assert report["ids"]["missing"] == entry["records"]
    assert any("not the bytes their manifest lists" in f["message"] for f in report["findings"])

    # A fresh --out knows only S3: the damaged segment's ids are not done.
    second = run_client([*args, "--out", str(tmp_path / "b")])
    assert second.code == 0, second.stderr[-2000:]
    assert "is damaged" in second.stderr and "dropped from this writer's manifest" in second.stderr
    assert f"already-done {200 - entry['records']}" in second.stderr
    code, report, stderr = audit(prefix, "--s3-endpoint-url", s3.url, "--prompts", str(prompts))
    assert code == 0, (stderr, report["findings"])
    assert report["ids"]["missing"] == 0 and report["ids"]["duplicated"] == 0
