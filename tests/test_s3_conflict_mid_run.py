"""A manifest taken by another client in the middle of a run: the uploader raises the conflict, which ends
the swarm's TaskGroup with it (client.engine.swarm), so the run stops with exit 2 and says what to do,
instead of going on generating into a prefix it may no longer write. The other writer's manifest is left
as it found it, and every line written locally is whole."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, count_written, make_prompts, read_results, wait_until
from tests.s3_server import BUCKET, S3Server
from tests.test_s3_e2e import CLIENT_FAST, FAST, manifest_segments, s3_args

pytestmark = pytest.mark.usefixtures("aws_env")

PROMPTS = 400


@pytest.mark.slow
def test_a_manifest_taken_mid_run_ends_the_run_with_exit_2(tmp_path: Path, fleet_factory: Any,
                                                           s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=3.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", PROMPTS)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            "--segment-mb", "0.02", *s3_args(s3, s3_prefix, "--sync-interval", "1")]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_until(lambda: manifest_segments(s3, s3_prefix) >= 1, "a first upload", timeout=60, proc=proc)
        [key] = s3.keys(BUCKET, f"{s3_prefix}/manifests/")
        taken = orjson.loads(s3.get(BUCKET, key))
        taken["run_id"] = "another-client"
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=orjson.dumps(taken))
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 2, stderr[-3000:]
    assert "same host name and shard" in stderr and "give every host its own --shard K/N" in stderr
    assert "another holds its manifest" in stderr and "run the same command again" not in stderr
    assert "Traceback" not in stderr
    assert orjson.loads(s3.get(BUCKET, key)) == taken, "the other writer's manifest is not overwritten"
    assert count_written(out) < PROMPTS, "the run stopped, it did not go on to the end"
    assert len(read_results(out)) == count_written(out)  # every line whole and readable
