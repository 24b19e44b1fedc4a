"""Leases on an S3 prefix: a second live writer of one name, or of one shard under another name (another
host), is refused at start with exit 2 and one line; a writer that is gone (its process dead on this
machine, or no heartbeat stored for two sync intervals plus a minute) is taken over and said. Liveness is
judged on S3's clock (S3's Date minus the object's LastModified), never by comparing two hosts' clocks: a
writer whose clock is 15 minutes slow is live while S3 keeps storing its heartbeats, for the client and
for `client.status` alike. The shard's lease object settles two clients that start at once; one that is
not a lease at all (damaged) is nobody's claim, at start and for the live writer alike.

Time passing on S3 is S3's clock moved ahead for the test's own prefix (tests/s3_server.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import ManifestConflict
from client.s3.lease import check_lease, check_same_shard, check_shard_counts, fresh_for
from client.s3.manifest import Manifest, manifest_key
from client.s3.shard_lease import LeaseRecord, ShardLease, lease_key
from client.s3.store import S3Store, S3Url
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results, run_client, wait_until
from tests.s3_server import BUCKET, S3Server

NOW = 1_000_000.0
HERE = "node-a/0242ac110002"


def manifest(*, state: str = "running", machine: str = HERE, pid: int = 4242, age: float = 10.0,
             sync: float = 180.0, age_s: float | None = None, host: str = "node-a", shard: str = "0/1") -> Manifest:
    """`age`: by the writer's own `updated` against NOW; `age_s`: as S3's clock says (None: not read from S3)."""
    return Manifest(writer=f"{host}-{shard.replace('/', 'of')}", host=host, shard=shard, run="r1", state=state,
                    sync_interval_s=sync, updated=NOW - age, machine=machine, pid=pid, age_s=age_s)


@pytest.mark.parametrize(("previous", "alive", "outcome"), [
    (manifest(state="finished"), True, None),
    (manifest(state="stopped"), True, None),
    (manifest(machine=""), True, None),                                  # written by a client without a lease
    (manifest(), False, "its last client on this machine (host node-a, pid 4242, run r1) is gone"),
    (manifest(age=421.0), True, "no heartbeat from it for 7m01s"),     # 2 x 180 s + 60 s
    (manifest(machine="node-a/other", age=421.0), True, "no heartbeat from it for 7m01s"),
    # The writer's clock is 15 minutes slow, but S3 stored its heartbeat 5 s ago: live.
    (manifest(machine="node-a/other", age=905.0, age_s=5.0), True, "conflict"),
    # The writer's clock is 15 minutes fast, but S3 has stored nothing from it for 7m01s: gone.
    (manifest(machine="node-a/other", age=-900.0, age_s=421.0), True, "no heartbeat from it for 7m01s"),
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


# -- one shard, one writer, whatever its host --------------------------------------------------------

OTHER = "node-b/0242ac110003"


@pytest.mark.parametrize(("other", "alive", "refused"), [
    (manifest(host="node-b", shard="0/2", machine=OTHER), True, True),               # live, another host
    (manifest(host="node-b", shard="0/2", machine=OTHER, age=905.0, age_s=5.0), True, True),  # slow clock
    (manifest(host="node-b", shard="0/2", machine=OTHER, age_s=421.0), True, False),  # no heartbeat for 7m01s
    (manifest(host="node-b", shard="0/2", machine=HERE), False, False),             # its pid is gone from here
    (manifest(host="node-b", shard="0/2", machine=OTHER, state="finished"), True, False),
    (manifest(host="node-b", shard="1/2", machine=OTHER), True, False),             # another shard
    (manifest(host="node-a", shard="0/2", machine=OTHER), True, False),             # this writer's own name
])
def test_check_same_shard(other: Manifest, alive: bool, refused: bool) -> None:
    def check() -> None:
        check_same_shard([other], writer="node-a-0of2", shard="0/2", url="s3://b/p/", now=NOW, machine=HERE,
                         alive=lambda pid: alive)
    if refused:
        with pytest.raises(ManifestConflict, match=r"shard 0/2 is already being written to s3://b/p/ by writer "
                                                   r"node-b-0of2 \(host node-b, pid 4242, run r1; S3 stored its "
                                                   r"heartbeat \d+s ago\)"):
            check()
    else:
        check()


def record(host: str, run: str = "r1", shard: str = "0/2") -> LeaseRecord:
    return LeaseRecord(writer=f"{host}-{shard.replace('/', 'of')}", host=host, shard=shard,
                       machine=f"{host}/000000000001", pid=4242, run=run, sync_interval_s=60.0)


async def test_of_two_clients_starting_on_one_shard_one_runs(s3: S3Server, s3_prefix: str) -> None:
    async with S3Store(S3Url.parse(f"s3://{BUCKET}/{s3_prefix}"), endpoint_url=s3.url) as store:
        a = ShardLease(store, record("node-a"), alive=lambda pid: True)
        b = ShardLease(store, record("node-b"), alive=lambda pid: True)
        # Both read the prefix before either claims the shard: neither is refused yet.
        await a.check()
        await b.check()
        assert await a.claim() is None
        with pytest.raises(ManifestConflict, match=r"shard 0/2 is already being written .* by writer node-a-0of2"):
            await b.claim()
        await a.renew()  # the heartbeat: still a's
        # a ends: the shard is free at once.
        await a.release()
        assert await b.claim() is None
        stored = orjson.loads(s3.get(BUCKET, f"{s3_prefix}/{lease_key('0/2')}"))
        assert (stored["writer"], stored["state"]) == ("node-b-0of2", "running")

        # b's heartbeats stop reaching S3 for an hour; c takes the shard over, and b, back, stops.
        s3.clock_ahead(s3_prefix, 3600)
        c = ShardLease(store, record("node-c"), alive=lambda pid: True)
        said = await c.claim()
        assert said is not None and "taking over shard 0/2 from writer node-b-0of2" in said
        assert "no heartbeat from it for 1h" in said
        with pytest.raises(ManifestConflict, match="was taken over by writer node-c-0of2"):
            await b.renew()


def live_manifest_of_another_host(server: S3Server, prefix: str) -> Manifest:
    """Shard 0/2 running on node-b, whose clock is 15 minutes slow: S3 stores its heartbeat now."""
    other = Manifest(writer="node-b-0of2", host="node-b", shard="0/2", run="r9", state="running",
                     sync_interval_s=60.0, machine=OTHER, pid=4242)
    blob = orjson.loads(other.to_json())
    blob["updated"] -= 900
    server.client().put_object(Bucket=BUCKET, Key=f"{prefix}/{manifest_key(other.writer)}", Body=orjson.dumps(blob))
    return other


def status_code(server: S3Server, prefix: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "client.status", "--s3", f"s3://{BUCKET}/{prefix}",
                           "--s3-endpoint-url", server.url, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def test_a_live_writer_of_the_shard_on_another_host_refuses_the_start(tmp_path: Path, fleet_factory: Any,
                                                                      s3: S3Server, s3_prefix: str) -> None:
    live_manifest_of_another_host(s3, s3_prefix)
    # client.status sees it live (not stale) in spite of its clock.
    code, said = status_code(s3, s3_prefix)
    assert code == 0, said
    assert '"stale": false' in said
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=("--mean-tokens", "20"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 10)
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                         "--shard", "0/2", "--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url],
                        timeout=120)
    assert result.code == 2, result.stderr[-2000:]
    [line] = [text for text in result.stderr.splitlines() if "already being written" in text]
    assert line.startswith("error: shard 0/2 is already being written") and "writer node-b-0of2" in line
    assert not read_results(tmp_path / "out")
    assert s3.keys(BUCKET, f"{s3_prefix}/manifests/") == [f"{s3_prefix}/manifests/node-b-0of2.json"]
    assert not s3.keys(BUCKET, f"{s3_prefix}/leases/"), "a refused start writes nothing"


def test_a_live_lease_of_the_shard_refuses_the_start(tmp_path: Path, fleet_factory: Any, s3: S3Server,
                                                     s3_prefix: str) -> None:
    # Another host has just claimed shard 0/2 and has not written its manifest yet.
    s3.client().put_object(Bucket=BUCKET, Key=f"{s3_prefix}/{lease_key('0/2')}", Body=record("node-b").to_json())
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=("--mean-tokens", "20"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 10)
    common = ["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--s3", f"s3://{BUCKET}/{s3_prefix}",
              "--s3-endpoint-url", s3.url]
    result = run_client([*common, "--shard", "0/2", "--out", str(tmp_path / "a")], timeout=120)
    assert result.code == 2, result.stderr[-2000:]
    assert "error: shard 0/2 is already being written" in result.stderr and "node-b-0of2" in result.stderr
    # The other shard runs, takes its own lease and releases it at the end.
    other = run_client([*common, "--shard", "1/2", "--out", str(tmp_path / "b")], timeout=120)
    assert other.code == 0, other.stderr[-2000:]
    released = orjson.loads(s3.get(BUCKET, f"{s3_prefix}/{lease_key('1/2')}"))
    assert released["state"] == "released"
    # An hour on, S3 has had no heartbeat from node-b: shard 0/2 is taken over, and that is said.
    s3.clock_ahead(s3_prefix, 3600)
    again = run_client([*common, "--shard", "0/2", "--out", str(tmp_path / "a")], timeout=120)
    assert again.code == 0, again.stderr[-2000:]
    assert "taking over shard 0/2 from writer node-b-0of2" in again.stderr


# -- a lease object that is not a lease --------------------------------------------------------------

async def test_a_garbage_lease_is_taken_back_by_its_live_writer(s3: S3Server, s3_prefix: str) -> None:
    key = f"{s3_prefix}/{lease_key('0/2')}"
    async with S3Store(S3Url.parse(f"s3://{BUCKET}/{s3_prefix}"), endpoint_url=s3.url) as store:
        a = ShardLease(store, record("node-a"), alive=lambda pid: True)
        assert await a.claim() is None
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"\x00not a lease{")
        # Nobody claims the shard with it: as at the start, it is taken over, here by the live writer.
        said = await a.renew()
        assert said is not None and "took back the lease" in said and "not a readable lease" in said
        stored = orjson.loads(s3.get(BUCKET, key))
        assert (stored["writer"], stored["state"]) == ("node-a-0of2", "running")
        assert await a.renew() is None  # an ordinary heartbeat again
        b = ShardLease(store, record("node-b"), alive=lambda pid: True)
        with pytest.raises(ManifestConflict, match="by writer node-a-0of2"):
            await b.claim()


@pytest.mark.slow
def test_a_garbage_lease_does_not_stop_a_running_client(tmp_path: Path, fleet_factory: Any, s3: S3Server,
                                                        s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=8.0, extra_args=("--mean-tokens", "120"))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 120)
    key = f"{s3_prefix}/{lease_key('0/1')}"
    proc = subprocess.Popen(client_command(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                            "--out", str(tmp_path / "out"), "--s3", f"s3://{BUCKET}/{s3_prefix}",
                                            "--s3-endpoint-url", s3.url, "--sync-interval", "1"]),
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: bool(s3.keys(BUCKET, key)), "the client to claim its lease", proc=proc)
        s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"{garbage")

        def retaken() -> bool:
            try:
                return bool(orjson.loads(s3.get(BUCKET, key))["writer"])
            except (orjson.JSONDecodeError, KeyError):
                return False

        wait_until(retaken, "the running client to take its lease back", timeout=60, proc=proc)
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    [line] = [text for text in stderr.splitlines() if "took back the lease" in text]
    assert line.startswith("s3: took back the lease") and "shard 0/1" in line
    assert "taken over" not in stderr
    assert sorted(r["id"] for r in read_results(tmp_path / "out")) == [f"p{i:06d}" for i in range(120)]
    assert orjson.loads(s3.get(BUCKET, key))["state"] == "released"
