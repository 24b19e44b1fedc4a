"""A segment upload held longer than the lease lasts does not let the lease lapse: the heartbeat renews the
shard's lease and rewrites the manifest on its own timer while the PUT hangs, so a second client of the
same shard is refused (exit 2), not let in to generate the same ids; once the PUT goes through, the first
client ends normally with every id in S3 once.

The held PUT is the S3 protocol server's own hold (tests/s3_server.py); time passing on S3 is its clock
moved ahead for this test's prefix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.s3.shard_lease import lease_key
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, run_client, wait_until
from tests.s3_server import BUCKET, S3Server, read_s3_results
from tests.test_s3_e2e import CLIENT_FAST, FAST, assert_once, ids, s3_args

pytestmark = pytest.mark.usefixtures("aws_env")


def stored_updated(server: S3Server, key: str) -> float:
    """The `updated` of a stored lease or manifest (the writer's own clock: only compared with itself)."""
    return float(orjson.loads(server.get(BUCKET, key))["updated"])


@pytest.mark.slow
def test_a_held_upload_does_not_let_the_lease_lapse(tmp_path: Path, fleet_factory: Any,
                                                    s3_private: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=6.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    common = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), *CLIENT_FAST,
              *s3_args(s3_private, s3_prefix, "--sync-interval", "1", "--sync-wait", "150")]
    lease = f"{s3_prefix}/{lease_key('0/1')}"
    s3_private.hold_uploads()
    first = subprocess.Popen(client_command([*common, "--out", str(tmp_path / "a")]), cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        held = s3_private.wait_held(60)
        assert held is not None and "/segments/" in held, "a segment upload started and is held"
        [manifest] = s3_private.keys(BUCKET, f"{s3_prefix}/manifests/")
        lease_then, manifest_then = stored_updated(s3_private, lease), stored_updated(s3_private, manifest)
        # While the PUT hangs, the heartbeat goes on: both the lease and the manifest are stored again.
        wait_until(lambda: stored_updated(s3_private, lease) > lease_then
                   and stored_updated(s3_private, manifest) > manifest_then,
                   "the lease and the manifest renewed while a segment upload is held", timeout=30, proc=first)
        # 55 s pass on S3 (the lease lasts 2 x 1 s + 60 s): only a heartbeat of the last few seconds is live.
        s3_private.clock_ahead(s3_prefix, 55)
        second = run_client([*common, "--out", str(tmp_path / "b")], timeout=120)
        assert second.code == 2, second.stderr[-2000:]
        assert "is running on this S3 prefix" in second.stderr and f"pid {first.pid}" in second.stderr
        assert not (tmp_path / "b" / "segments").exists() or not any((tmp_path / "b" / "segments").glob("*.jsonl"))
        assert first.poll() is None, "the first client runs on"
    except BaseException:
        first.kill()
        first.communicate()
        raise
    finally:
        s3_private.release_uploads()
    _, stderr = first.communicate(timeout=180)
    assert first.returncode == 0, stderr[-3000:]
    assert "taken over" not in stderr
    assert_once(read_s3_results(s3_private, BUCKET, s3_prefix), ids(200))
    assert orjson.loads(s3_private.get(BUCKET, lease))["state"] == "released"
