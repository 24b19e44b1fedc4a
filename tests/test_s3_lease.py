"""The manifest as a lease: a second live writer of one name on one S3 prefix is refused at start; a
writer that is gone (its process dead on this machine, or its manifest stale) is taken over and said."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import ManifestConflict
from client.s3.lease import check_lease, check_shard_counts, fresh_for
from client.s3.manifest import Manifest
from launch.sim.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results, run_client, wait_until
from tests.s3_server import BUCKET, S3Server

NOW = 1_000_000.0
HERE = "node-a/0242ac110002"


def manifest(*, state: str = "running", machine: str = HERE, pid: int = 4242, age: float = 10.0,
             sync: float = 180.0) -> Manifest:
    return Manifest(writer="node-a-0of1", host="node-a", shard="0/1", run="r1", state=state,
                    sync_interval_s=sync, updated=NOW - age, machine=machine, pid=pid)


@pytest.mark.parametrize(("previous", "alive", "outcome"), [
    (manifest(state="finished"), True, None),
    (manifest(state="stopped"), True, None),
    (manifest(machine=""), True, None),                                  # written by a client without a lease
    (manifest(), False, "its last client on this machine (host node-a, pid 4242, run r1) is gone"),
    (manifest(age=421.0), True, "has not been updated for 7m01s"),     # 2 x 180 s + 60 s
    (manifest(machine="node-a/other", age=421.0), True, "has not been updated for 7m01s"),
    (manifest(), True, "conflict"),                                      # alive here
    (manifest(machine="node-a/other"), False, "conflict"),               # another machine, fresh
    (manifest(machine="node-a/other", age=419.0), False, "conflict"),
])
def test_check_lease(previous: Manifest, alive: bool, outcome: str | None) -> None:
    if outcome == "conflict":
        with pytest.raises(ManifestConflict, match="writer node-a-0of1 is running on this S3 prefix"):
            check_lease(previous, machine=HERE, now=NOW, alive=lambda pid: alive)
        return
    said = check_lease(previous, machine=HERE, now=NOW, alive=lambda pid: alive)
    if outcome is None:
        assert said is None
    else:
        assert said is not None and outcome in said


@pytest.mark.parametrize(("other", "alive", "refused"), [
    (manifest(), True, True),                               # live here: shards of count 1 and 2 overlap
    (manifest(), False, False),                             # its pid is gone from this machine: dead at once
    (manifest(machine="node-b/0242ac110003"), False, True),  # another machine: only staleness tells
    (manifest(age=421.0), True, False),
    (manifest(state="finished"), True, False),
])
def test_check_shard_counts(other: Manifest, alive: bool, refused: bool) -> None:
    def check() -> None:
        check_shard_counts([other], writer="node-a-0of2", shard="0/2", url="s3://b/p/", now=NOW, machine=HERE,
                           alive=lambda pid: alive)
    if refused:
        with pytest.raises(ManifestConflict, match="live writer"):
            check()
    else:
        check()


def test_fresh_for_follows_the_sync_interval() -> None:
    assert fresh_for(manifest(sync=180.0)) == 420.0
    assert fresh_for(manifest(sync=0.0)) == 62.0


@pytest.mark.slow
def test_a_second_live_writer_of_one_name_is_refused(tmp_path: Path, fleet_factory: Any,
                                                     s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=4, speed=1.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 80)
    common = ["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--s3", f"s3://{BUCKET}/{s3_prefix}",
              "--s3-endpoint-url", s3.url, "--sync-interval", "2"]
    first = subprocess.Popen(client_command([*common, "--out", str(tmp_path / "a")]), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: bool(s3.keys(BUCKET, f"{s3_prefix}/manifests/")), "the first writer to register", proc=first)
    second = run_client([*common, "--out", str(tmp_path / "b")], timeout=120)
    assert second.code == 2, second.stderr[-2000:]
    assert "is running on this S3 prefix" in second.stderr
    assert f"pid {first.pid}" in second.stderr
    assert not read_results(tmp_path / "b")
    first.kill()
    first.wait(timeout=30)
    # Same machine, its pid gone: the name is free at once, and the takeover is said. (The slow server kept
    # the first writer running; the rest is done on a fast one.)
    fast = fleet_factory([SimServerSpec(max_running=16, speed=40.0, extra_args=("--mean-tokens", "60"))])
    third = run_client([*common[2:], "--endpoints", fast.urls[0], "--out", str(tmp_path / "a")], timeout=180)
    assert third.code == 0, third.stderr[-2000:]
    assert "taking over writer" in third.stderr and "is gone" in third.stderr
    [key] = s3.keys(BUCKET, f"{s3_prefix}/manifests/")
    body = s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert orjson.loads(body)["state"] == "finished"


@pytest.mark.slow
def test_shards_of_a_new_count_start_at_once_after_a_kill_here(tmp_path: Path, fleet_factory: Any,
                                                                s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=4.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    common = ["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--s3", f"s3://{BUCKET}/{s3_prefix}",
              "--s3-endpoint-url", s3.url, "--sync-interval", "60"]
    first = subprocess.Popen(client_command([*common, "--out", str(tmp_path / "all")]), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: bool(s3.keys(BUCKET, f"{s3_prefix}/manifests/")), "the first writer to register",
               proc=first)
    first.kill()
    first.wait(timeout=30)
    shards = [subprocess.Popen(client_command([*common, "--shard", f"{k}/2", "--out", str(tmp_path / f"s{k}")]),
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for k in range(2)]
    for k, proc in enumerate(shards):
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"shard {k}/2: {stderr[-2000:]}"
        assert "live writer" not in stderr
    done = [r["id"] for k in range(2) for r in read_results(tmp_path / f"s{k}")]
    assert sorted(done) == [f"p{i:06d}" for i in range(60)]
