"""`client.status --s3`: per shard host, last manifest update, done, rate, stale and complete shards, the
fleet total with its ETA, and exit 3 naming a stale shard. The summary is pure (table-driven here on
manifests built in memory); the exit code is checked end to end against a real run in a real S3 server."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.s3.manifest import Manifest, SegmentEntry, manifest_key
from client.status.fleet import eta_from, summarize
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, run_client
from tests.s3_server import BUCKET, S3Server

NOW = 1_800_000_000.0


def segment(name: str, records: int, uploaded: float) -> SegmentEntry:
    return SegmentEntry(name=name, key=f"segments/{name}.jsonl", ids_key=f"segments/{name}.ids.gz", records=records,
                        completion_tokens=records * 100, bytes=records * 1000, stored_bytes=records * 1000,
                        gzip=False, sha256="0" * 64, etag="e", ids_sha256="", uploaded=uploaded)


def manifest(shard: str, host: str, state: str, *, updated_ago: float, sync: float = 60.0,
             records: tuple[tuple[int, float], ...] = (), started_ago: float = 7200.0, failed: int = 0) -> Manifest:
    label = shard.replace("/", "of")
    m = Manifest(writer=f"{host}-{label}", host=host, shard=shard, state=state, sync_interval_s=sync,
                 started=NOW - started_ago, updated=NOW - updated_ago, failed=failed)
    for i, (count, ago) in enumerate(records):
        m.segments[f"{host}-{label}-{i}"] = segment(f"{host}-{label}-{i}", count, NOW - ago)
    return m


# (case, manifests, stale shards, complete shards, missing shards)
CASES: list[tuple[str, list[Manifest], list[str], list[str], list[str]]] = [
    ("fresh running shard", [manifest("0/1", "a", "running", updated_ago=30)], [], [], []),
    ("running, just under 3 intervals + a minute",
     [manifest("0/1", "a", "running", updated_ago=3 * 60 + 59)], [], [], []),
    ("running, over 3 intervals + a minute", [manifest("0/1", "a", "running", updated_ago=3 * 60 + 61)],
     ["0/1"], [], []),
    ("stopped long ago is not stale", [manifest("0/1", "a", "stopped", updated_ago=86400)], [], [], []),
    ("finished without failures is complete", [manifest("0/1", "a", "finished", updated_ago=86400)], [], ["0/1"],
     []),
    ("finished with failures is not complete", [manifest("0/1", "a", "finished", updated_ago=10, failed=2)], [], [],
     []),
    ("a dead writer superseded by a newer one on another host",
     [manifest("1/2", "a", "running", updated_ago=7200), manifest("1/2", "b", "finished", updated_ago=5),
      manifest("0/2", "c", "finished", updated_ago=5)], [], ["0/2", "1/2"], []),
    ("a newer writer that died makes the shard stale",
     [manifest("1/2", "a", "finished", updated_ago=7200), manifest("1/2", "b", "running", updated_ago=3600),
      manifest("0/2", "c", "running", updated_ago=5)], ["1/2"], [], []),
    ("a shard no manifest names", [manifest("0/3", "a", "running", updated_ago=5),
                                   manifest("2/3", "a", "running", updated_ago=5)], [], [], ["1/3"]),
]


@pytest.mark.parametrize(("manifests", "stale", "complete", "missing"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_summarize(manifests: list[Manifest], stale: list[str], complete: list[str], missing: list[str]) -> None:
    status = summarize(manifests, None, now=NOW)
    assert [r.shard for r in status.stale()] == stale
    assert [r.shard for r in status.rows if r.complete()] == complete
    assert status.missing == missing


def test_rate_eta_and_completeness_with_prompts() -> None:
    manifests = [
        # 360 records in the last hour (and 1,000 older ones): 0.1 records/s
        manifest("0/2", "a", "running", updated_ago=10, records=((1000, 5000), (200, 1800), (160, 60))),
        # started 10 minutes ago: 120 records over 600 s = 0.2 records/s
        manifest("1/2", "b", "running", updated_ago=10, records=((120, 30),), started_ago=600),
    ]
    prompts = (10_000, {2: Counter({0: 5000, 1: 5000})})
    status = summarize(manifests, prompts, now=NOW)
    rates = {r.shard: round(r.rate(), 6) for r in status.rows}
    assert rates == {"0/2": 0.1, "1/2": 0.2}
    assert status.done == 1480 and status.remaining == 8520
    assert status.eta_s == pytest.approx(8520 / 0.3)
    assert [r.remaining for r in status.rows] == [3640, 4880]
    assert {r.shard: r.hosts for r in status.rows} == {"0/2": ["a"], "1/2": ["b"]}
    stopped = summarize([manifest("0/2", "a", "stopped", updated_ago=10, records=((50, 30),)),
                         manifest("1/2", "b", "running", updated_ago=10, records=((60, 30),), started_ago=600)],
                        (1000, {2: Counter({0: 500, 1: 500})}), now=NOW)
    assert stopped.rate == pytest.approx(0.1), "a stopped shard makes no progress: only the running one counts"
    done = summarize([manifest("0/1", "a", "stopped", updated_ago=10, records=((50, 30),))],
                     (50, {1: Counter({0: 50})}), now=NOW)
    assert done.eta_s == 0.0 and done.rows[0].complete(), "nothing remains: complete whatever the state"


def test_stale_is_judged_on_s3_clock() -> None:
    # The writer's clock is 15 minutes slow (its `updated` says 15 minutes ago), but S3 stored its manifest
    # 20 s ago: live. Another's clock is 15 minutes fast, and S3 has had nothing from it for an hour: stale.
    slow = manifest("0/2", "a", "running", updated_ago=900)
    slow.age_s = 20.0
    fast = manifest("1/2", "b", "running", updated_ago=-900)
    fast.age_s = 3600.0
    status = summarize([slow, fast], None, now=NOW)
    assert [r.shard for r in status.stale()] == ["1/2"]
    assert [round(r.age(NOW)) for r in status.rows] == [20, 3600]


@pytest.mark.parametrize("skew", [-900.0, 0.0, 900.0], ids=["15-min-behind", "on-time", "15-min-ahead"])
def test_rate_is_the_writers_own_whatever_its_clock(skew: float) -> None:
    # 600 records in the 10 minutes since it started, by its own clock; S3 stored its manifest 10 s ago.
    m = manifest("0/1", "a", "running", updated_ago=10 - skew, started_ago=600 - skew,
                 records=((300, 310 - skew), (300, 10 - skew)))
    m.age_s = 10.0
    status = summarize([m], (1200, {1: Counter({0: 1200})}), now=NOW)
    assert status.rate == pytest.approx(1.0)
    assert status.eta_s == pytest.approx(600.0)


def skewed_manifest(shard: str, host: str, skew: float) -> bytes:
    """A running writer whose clock is `skew` seconds off: it started 10 minutes ago and uploaded 600
    records since, all by its own clock, and S3 stores its manifest now."""
    m = Manifest(writer=f"{host}-{shard.replace('/', 'of')}", host=host, shard=shard, state="running",
                 sync_interval_s=60.0, machine=f"{host}/0", pid=1)
    blob = orjson.loads(m.to_json())
    at = blob["updated"] + skew
    blob["updated"], blob["started"] = at, at - 600
    blob["segments"] = [asdict(segment(f"{host}-{i}", 300, at - 300 * (1 - i))) for i in range(2)]
    return orjson.dumps(blob)


@pytest.mark.usefixtures("aws_env")
def test_a_writer_15_minutes_ahead_has_its_true_rate(s3: S3Server, s3_prefix: str, tmp_path: Path) -> None:
    for shard, host, skew in (("0/2", "ahead", 900.0), ("1/2", "ontime", 0.0)):
        s3.client().put_object(Bucket=BUCKET, Key=f"{s3_prefix}/manifests/{host}-{shard.replace('/', 'of')}.json",
                               Body=skewed_manifest(shard, host, skew))
    prompts = make_prompts(tmp_path / "p.jsonl", 4000)
    code, doc, stderr = status_cli(s3, s3_prefix, "--prompts", str(prompts))
    assert code == 0, stderr
    rates = {row["shard"]: row["rate_per_s"] for row in doc["shards"]}
    # 600 records over the 10 minutes (and the few seconds S3 has held the manifests since) of each writer.
    assert rates["0/2"] == pytest.approx(1.0, rel=0.05) and rates["1/2"] == pytest.approx(1.0, rel=0.05)
    assert doc["totals"]["rate_per_s"] == pytest.approx(2.0, rel=0.05)
    assert doc["totals"]["eta_s"] == pytest.approx((4000 - 1200) / 2.0, rel=0.05)


def status_cli(server: S3Server, prefix: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.status", "--s3", f"s3://{BUCKET}/{prefix}",
                           "--s3-endpoint-url", server.url, "--json", *extra],
                          cwd=REPO, capture_output=True, timeout=60, check=False)
    doc: dict[str, Any] = orjson.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr.decode()


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_stale_shard_exits_3_and_names_it(tmp_path: Path, fleet_factory: Any, s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 40)
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out",
                         str(tmp_path / "out"), "--shard", "0/2", "--s3", f"s3://{BUCKET}/{s3_prefix}",
                         "--s3-endpoint-url", s3.url, "--sync-interval", "5"])
    assert result.code == 0, result.stderr[-3000:]
    code, doc, stderr = status_cli(s3, s3_prefix, "--prompts", str(prompts))
    assert code == 0, stderr
    assert doc["totals"]["complete_shards"] == 1 and doc["missing_shards"] == ["1/2"]
    assert doc["shards"][0]["complete"] and doc["shards"][0]["hosts"]

    # Shard 1/2's client died on another node an hour ago without saying so: its manifest says running, and
    # S3 stored it an hour ago (S3's clock is moved on by an hour for this prefix).
    dead = Manifest(writer="node7-1of2", host="node7", shard="1/2", state="running", sync_interval_s=60.0,
                    machine="node7/0", pid=1)
    s3.client().put_object(Bucket=BUCKET, Key=f"{s3_prefix}/{manifest_key(dead.writer)}", Body=dead.to_json())
    s3.clock_ahead(s3_prefix, 3600)
    code, doc, stderr = status_cli(s3, s3_prefix, "--prompts", str(prompts))
    assert code == 3, stderr
    assert doc["totals"]["stale_shards"] == ["1/2"]
    assert "stale shard 1/2 (host node7)" in stderr and "1h" in stderr
    code, _, _ = status_cli(s3, s3_prefix, "--stale-after", "100")
    assert code == 0, "the threshold is the caller's"

    table = subprocess.run([sys.executable, "-m", "client.status", "--s3", f"s3://{BUCKET}/{s3_prefix}",
                            "--s3-endpoint-url", s3.url], cwd=REPO, capture_output=True, text=True, timeout=60,
                           check=False)
    assert table.returncode == 3
    assert "stale" in table.stdout and "node7" in table.stdout and "ETA" in table.stdout


@pytest.mark.parametrize(("remaining", "rate", "eta"), [
    (None, 1.0, None),   # no total: unknown
    (0, 0.0, 0.0),       # nothing left: done, whatever the rate
    (10, 0.0, None),     # no rate: unknown
    (10, 2.0, 5.0),
])
def test_one_eta_for_the_fleet_and_an_out(remaining: int | None, rate: float, eta: float | None) -> None:
    assert eta_from(remaining, rate) == eta
