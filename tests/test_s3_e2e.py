"""End to end with S3 on: the real CLI against simulated servers and a real S3 protocol server (moto in a
subprocess), through an S3 outage, a kill -9 mid-upload, a full disk, and two shards on one prefix.
Every test ends with every id exactly once in S3 and every stored line valid JSON."""

from __future__ import annotations

import collections
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, count_written, make_prompts, read_results, run_client, wait_until
from tests.s3_server import BUCKET, S3Server, read_s3_results

pytestmark = pytest.mark.usefixtures("aws_env")

FAST = ("--mean-tokens", "120", "--tokens-per-chunk", "3")
CLIENT_FAST = ("--max-in-flight", "16", "--idle-timeout", "10", "--max-attempts", "8", "--grace", "5")


def s3_args(server: S3Server, prefix: str, *extra: str) -> list[str]:
    return ["--s3", f"s3://{BUCKET}/{prefix}", "--s3-endpoint-url", server.url, *extra]


def assert_once(records: list[dict[str, Any]], expected: set[str]) -> None:
    counts = collections.Counter(r["id"] for r in records)
    duplicates = [i for i, n in counts.items() if n > 1]
    assert not duplicates, f"ids stored more than once: {duplicates[:5]}"
    assert set(counts) == expected, f"missing {sorted(expected - set(counts))[:5]}"


def ids(count: int, prefix: str = "p") -> set[str]:
    return {f"{prefix}{i:06d}" for i in range(count)}


def manifest_segments(server: S3Server, prefix: str) -> int:
    try:
        keys = server.keys(BUCKET, f"{prefix}/manifests/")
        return sum(len(orjson.loads(server.get(BUCKET, k))["segments"]) for k in keys)
    except Exception:  # the server may be down or restarting: "not yet"
        return 0


def most_pending(progress: Path) -> int:
    """The largest number of pending segments any progress line showed."""
    return max((int(n) for n in re.findall(r"sync:(\d+) seg", progress.read_text())), default=0)


def status(server: S3Server, prefix: str, *extra: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "client.status", "--s3", f"s3://{BUCKET}/{prefix}",
                           "--s3-endpoint-url", server.url, "--json", *extra],
                          cwd=REPO, capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result: dict[str, Any] = orjson.loads(proc.stdout)
    return result


@pytest.mark.slow
def test_uploads_manifest_checksums_and_status(tmp_path: Path, fleet_factory: Any,
                                               s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 300)
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         *CLIENT_FAST, "--segment-mb", "0.05", *s3_args(s3, s3_prefix)])
    assert result.code == 0, result.stderr[-3000:]
    assert "every closed segment is uploaded and listed" in result.stderr
    stored = read_s3_results(s3, BUCKET, s3_prefix)
    assert_once(stored, ids(300))
    local = read_results(out)
    assert len(local) == 300 and len(list((out / "segments").glob("*.jsonl"))) > 3
    by_id = {r["id"]: r for r in local}
    assert all(r == by_id[r["id"]] for r in stored), "S3 holds exactly the local bytes"
    manifest = orjson.loads(s3.get(BUCKET, next(iter(s3.keys(BUCKET, f"{s3_prefix}/manifests/")))))
    assert manifest["state"] == "finished" and manifest["shard"] == "0/1"

    report = status(s3, s3_prefix, "--prompts", str(prompts))
    assert report["totals"]["done"] == 300 and report["totals"]["remaining"] == 0
    assert report["totals"]["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in local)
    assert [row["shard"] for row in report["shards"]] == ["0/1"] and not report["shards"][0]["stale"]


@pytest.mark.slow
def test_resume_from_s3_alone_with_an_empty_dir(tmp_path: Path, fleet_factory: Any,
                                                s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=6.0, extra_args=FAST)] * 2)
    # Enough prompts that the run is still going when two segments are listed and the stop comes.
    prompts = make_prompts(tmp_path / "p.jsonl", 600)
    first_out = tmp_path / "host-a"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), *CLIENT_FAST,
            *s3_args(s3, s3_prefix, "--sync-interval", "1", "--s3-gzip", "--delete-uploaded")]
    proc = subprocess.Popen(client_command([*args, "--out", str(first_out)]), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: manifest_segments(s3, s3_prefix) >= 2, "two uploaded segments", timeout=60, proc=proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert not list((first_out / "segments").glob("*.jsonl")), "--delete-uploaded leaves no uploaded segment"
    first = read_s3_results(s3, BUCKET, s3_prefix)
    assert 0 < len(first) < 600

    # A fresh host: nothing on disk, everything it knows comes from S3.
    result = run_client([*args, "--out", str(tmp_path / "host-b")])
    assert result.code == 0, result.stderr[-3000:]
    assert f"{len(first):,} more done id(s)" in result.stderr
    assert f"already-done {len(first)}" in result.stderr
    stored = read_s3_results(s3, BUCKET, s3_prefix)
    assert_once(stored, ids(600))
    assert all(key.endswith((".jsonl.gz", ".ids.gz")) for key in s3.keys(BUCKET, f"{s3_prefix}/segments/"))


@pytest.mark.slow
def test_s3_outage_mid_run_then_everything_uploads(tmp_path: Path, fleet_factory: Any,
                                                   s3_private: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=3.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    log = tmp_path / "client.out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            "--progress-every", "0.5", *s3_args(s3_private, s3_prefix, "--sync-interval", "1")]
    with log.open("w") as stdout:
        proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=stdout, stderr=subprocess.PIPE, text=True)
        wait_until(lambda: manifest_segments(s3_private, s3_prefix) >= 1, "a first upload", timeout=60, proc=proc)
        s3_private.stop()
        written = count_written(out)
        wait_until(lambda: most_pending(log) >= 3 and count_written(out) > written + 20,
                   "the run to go on writing locally while S3 is down", timeout=60, proc=proc)
        s3_private.restart()
        _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    assert "retrying: cannot reach S3" in log.read_text()
    assert "every closed segment is uploaded and listed" in stderr
    assert_once(read_s3_results(s3_private, BUCKET, s3_prefix), ids(200))


@pytest.mark.slow
def test_kill_9_during_an_upload_then_rerun(tmp_path: Path, fleet_factory: Any,
                                            s3_private: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=6.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            *s3_args(s3_private, s3_prefix, "--sync-interval", "1")]
    s3_private.hold_uploads()
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    held = s3_private.wait_held(60)
    assert held is not None and "/segments/" in held, "an upload started"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    s3_private.release_uploads()
    assert manifest_segments(s3_private, s3_prefix) == 0, "the killed client listed nothing"

    result = run_client(args)
    assert result.code == 0, result.stderr[-3000:]
    assert "closed by an earlier run but not uploaded" in result.stderr
    assert_once(read_s3_results(s3_private, BUCKET, s3_prefix), ids(200))
    assert_once(read_results(out), ids(200))


@pytest.mark.slow
def test_two_shards_write_one_prefix(tmp_path: Path, fleet_factory: Any, s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=20.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 300)
    procs = []
    for k in range(2):
        args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / f"out{k}"),
                *CLIENT_FAST, "--shard", f"{k}/2", *s3_args(s3, s3_prefix, "--sync-interval", "1")]
        procs.append(subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, stderr = proc.communicate(timeout=180)
        assert proc.returncode == 0, stderr[-3000:]
    stored = read_s3_results(s3, BUCKET, s3_prefix)
    assert_once(stored, ids(300))
    assert len(s3.keys(BUCKET, f"{s3_prefix}/manifests/")) == 2
    report = status(s3, s3_prefix, "--prompts", str(prompts))
    assert [row["shard"] for row in report["shards"]] == ["0/2", "1/2"]
    assert all(row["remaining"] == 0 and row["done"] > 0 for row in report["shards"])
    assert report["totals"]["done"] == 300 and report["totals"]["remaining"] == 0


@pytest.mark.slow
def test_full_disk_with_s3_on_stops_keeps_lines_and_rerun_continues(tmp_path: Path, fleet_factory: Any,
                                                                    s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            *s3_args(s3, s3_prefix, "--sync-interval", "60")]
    limit = 60_000

    def small_disk() -> None:  # no file may grow past `limit` bytes: writes beyond it fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(client_command(args), cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=small_disk, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, check=False)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "Every line already written is intact" in proc.stderr
    assert 0 < count_written(out) < 200

    result = run_client(args)
    assert result.code == 0, result.stderr[-3000:]
    assert "repaired a torn tail" in result.stderr
    assert_once(read_s3_results(s3, BUCKET, s3_prefix), ids(200))
    assert_once(read_results(out), ids(200))


def test_missing_bucket_fails_before_any_request(tmp_path: Path, fleet_factory: Any, s3: S3Server) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 5)
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                         "--s3", "s3://no-such-bucket/run", "--s3-endpoint-url", s3.url])
    assert result.code == 2
    assert "bucket 'no-such-bucket' does not exist" in result.stderr
    assert not list((tmp_path / "out" / "segments").glob("*.jsonl"))


@pytest.mark.slow
def test_s3_down_at_the_end_exits_5_and_the_rerun_uploads(tmp_path: Path, fleet_factory: Any,
                                                          s3_private: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=6.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 150)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            *s3_args(s3_private, s3_prefix, "--sync-interval", "1", "--sync-wait", "2")]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    # The manifest is the last thing the start-up writes to S3 (once nothing can refuse the start), just
    # before the first prompt is sent.
    wait_until(lambda: bool(s3_private.keys(BUCKET, f"{s3_prefix}/manifests/")), "the run to register in S3",
               timeout=60, proc=proc)
    s3_private.stop()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 5, stderr[-2000:]
    assert "are not in S3 yet" in stderr and "run the same command again to upload them" in stderr
    assert_once(read_results(out), ids(150))

    s3_private.restart()
    result = run_client(args)
    assert result.code == 0, result.stderr[-2000:]
    assert "closed by an earlier run but not uploaded" in result.stderr
    assert_once(read_s3_results(s3_private, BUCKET, s3_prefix), ids(150))
