"""run.json records where a run syncs and whether it deleted uploaded segments: a resume of such an --out
without its --s3 (which would send every done prompt again) is refused before anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from client.local.run_settings import SyncTarget, next_sync, sync_refusal
from simulator.fleet import SimServerSpec
from tests.conftest import make_prompts, run_client
from tests.s3_server import BUCKET, S3Server

PREFIX = "s3://b/run"


@pytest.mark.parametrize(("previous", "s3", "delete", "expected"), [
    (None, None, False, None),
    (None, PREFIX, False, SyncTarget(PREFIX, False)),
    (None, PREFIX, True, SyncTarget(PREFIX, True)),
    (SyncTarget(PREFIX, True), PREFIX, False, SyncTarget(PREFIX, True)),  # deletion is remembered
    (SyncTarget(PREFIX, True), None, False, SyncTarget(PREFIX, True)),
    (SyncTarget(PREFIX, False), "s3://b/other", True, SyncTarget("s3://b/other", True)),
])
def test_next_sync(previous: SyncTarget | None, s3: str | None, delete: bool, expected: SyncTarget | None) -> None:
    assert next_sync(previous, s3, delete) == expected


@pytest.mark.parametrize(("recorded", "s3", "refused"), [
    (None, None, False),
    (SyncTarget(PREFIX, False), None, False),  # the local segments are all still there
    (SyncTarget(PREFIX, True), PREFIX, False),
    (SyncTarget(PREFIX, True), None, True),
    (SyncTarget(PREFIX, True), "s3://b/elsewhere", True),
])
def test_sync_refusal(recorded: SyncTarget | None, s3: str | None, refused: bool) -> None:
    problem = sync_refusal(Path("out"), recorded, s3)
    assert (problem is not None) == refused
    if problem is not None:
        assert f"--s3 {PREFIX}" in problem


@pytest.mark.s3
@pytest.mark.slow
def test_resume_without_s3_after_delete_uploaded_is_refused(tmp_path: Path, fleet_factory: Any,
                                                            s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0,
                                         extra_args=("--mean-tokens", "60", "--tokens-per-chunk", "8"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    out = tmp_path / "out"
    local = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)]
    prefix = f"s3://{BUCKET}/{s3_prefix}"
    first = run_client([*local, "--s3", prefix, "--s3-endpoint-url", s3.url, "--delete-uploaded"])
    assert first.code == 0, first.stderr[-2000:]
    assert not list((out / "segments").glob("*.jsonl")), "every uploaded segment was deleted"
    assert orjson.loads((out / "run.json").read_bytes())["sync"] == {"s3": prefix, "deleted_uploaded": True}

    again = run_client(local)
    assert again.code == 2, again.stderr[-2000:]
    assert f"--s3 {prefix}" in again.stderr and "already-done" not in again.stderr

    resumed = run_client([*local, "--s3", prefix, "--s3-endpoint-url", s3.url])
    assert resumed.code == 0, resumed.stderr[-2000:]
    assert "already-done 60" in resumed.stderr
