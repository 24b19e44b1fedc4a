"""`--shard auto`: the environment table of every scheduler (SLURM array, SLURM tasks, Kubernetes Indexed
Job), the error cases, and one real run that takes its shard from a SLURM array's variables and records
where it came from in its S3 manifest."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import ConfigError, ManifestConflict, ShardEnvError
from client.core.ids import shard_of
from client.core.shard_env import ShardChoice, shard_from_env
from client.run.shard_auto import resolve_shard
from client.s3.lease import check_shard_counts
from client.s3.manifest import Manifest, manifest_key
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results
from tests.s3_server import BUCKET, S3Server

ARRAY = {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
         "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_JOB_ID": "77"}

# (case, environment, --shard-count, (K, N) or None, what the source or the error says)
CASES: list[tuple[str, dict[str, str], int | None, tuple[int, int] | None, str]] = [
    ("slurm array", ARRAY, None, (2, 4), "SLURM_ARRAY_TASK_ID=2 of SLURM_ARRAY_TASK_COUNT=4"),
    ("slurm array, first task", {**ARRAY, "SLURM_ARRAY_TASK_ID": "0"}, None, (0, 4), "SLURM_ARRAY_TASK_ID=0"),
    ("slurm array without COUNT (older SLURM): MAX+1",
     {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "2"}, None, (1, 3),
     "SLURM_ARRAY_TASK_COUNT=3"),
    ("slurm array with COUNT and no MAX", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}, None,
     (0, 2), "SLURM_ARRAY_TASK_ID=0 of SLURM_ARRAY_TASK_COUNT=2"),
    ("slurm array with COUNT, MIN 0 and no MAX",
     {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0"}, None, (1, 2),
     "SLURM_ARRAY_TASK_COUNT=2"),
    ("slurm array wins over its own SLURM_PROCID", {**ARRAY, "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, None,
     (2, 4), "SLURM array"),
    ("slurm array, count by env", {**ARRAY, "REGEN_SHARD_COUNT": "8"}, None, (2, 8), "REGEN_SHARD_COUNT=8"),
    ("slurm array, count by flag beats env", {**ARRAY, "REGEN_SHARD_COUNT": "8"}, 5, (2, 5), "--shard-count 5"),
    ("resubmitted index with the full count",
     {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "1",
      "SLURM_ARRAY_TASK_MAX": "1", "REGEN_SHARD_COUNT": "3"}, None, (1, 3), "SLURM_ARRAY_TASK_ID=1"),
    ("slurm tasks under srun", {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "9"}, None, (3, 4),
     "SLURM_PROCID=3 of SLURM_NTASKS=4"),
    ("slurm tasks, count by flag", {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, 6, (1, 6), "--shard-count 6"),
    ("kubernetes indexed job, count by env", {"JOB_COMPLETION_INDEX": "5", "REGEN_SHARD_COUNT": "8"}, None,
     (5, 8), "JOB_COMPLETION_INDEX=5, REGEN_SHARD_COUNT=8"),
    ("kubernetes indexed job, count by flag", {"JOB_COMPLETION_INDEX": "0"}, 2, (0, 2), "--shard-count 2"),
    ("spaces around numbers", {"JOB_COMPLETION_INDEX": " 1 ", "REGEN_SHARD_COUNT": " 2"}, None, (1, 2), ""),
    # errors
    ("nothing set", {}, None, None, "no scheduler says which shard this is"),
    ("only unrelated SLURM variables", {"SLURM_JOB_ID": "5"}, None, None, "give --shard K/N instead"),
    ("resubmitted index without the count",
     {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "1", "SLURM_ARRAY_TASK_MIN": "2",
      "SLURM_ARRAY_TASK_MAX": "2"}, None, None, "not the whole range 0..N-1"),
    ("array starting at 1", {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "1",
                             "SLURM_ARRAY_TASK_MAX": "3"}, None, None, "indices 1-3"),
    ("array with a step", {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
                           "SLURM_ARRAY_TASK_MAX": "4"}, None, None, "--shard-count N or REGEN_SHARD_COUNT=N"),
    ("array of COUNT without MAX, starting at 1",
     {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "1"}, None, None,
     "indices 1-2"),
    ("array without COUNT or MAX", {"SLURM_ARRAY_TASK_ID": "1"}, None, None, "neither SLURM_ARRAY_TASK_COUNT"),
    ("index not below the given count", {**ARRAY, "REGEN_SHARD_COUNT": "2"}, None, None,
     "index 2 is not below the shard count 2"),
    ("kubernetes without a count", {"JOB_COMPLETION_INDEX": "3"}, None, None, "gives the index only"),
    ("kubernetes index past the count", {"JOB_COMPLETION_INDEX": "3", "REGEN_SHARD_COUNT": "3"}, None, None,
     "index 3 is not below the shard count 3"),
    ("srun without NTASKS", {"SLURM_PROCID": "0"}, None, None, "SLURM_NTASKS is not"),
    ("not a number", {"SLURM_ARRAY_TASK_ID": "two", "SLURM_ARRAY_TASK_COUNT": "3"}, None, None,
     "SLURM_ARRAY_TASK_ID='two' is not a whole number"),
    ("negative", {"JOB_COMPLETION_INDEX": "-1", "REGEN_SHARD_COUNT": "2"}, None, None, "is negative"),
    ("count zero by env", {"JOB_COMPLETION_INDEX": "0", "REGEN_SHARD_COUNT": "0"}, None, None, "at least 1"),
    ("count zero by flag", {"JOB_COMPLETION_INDEX": "0"}, 0, None, "--shard-count 0"),
    ("count not a number", {"JOB_COMPLETION_INDEX": "0", "REGEN_SHARD_COUNT": "x"}, None, None,
     "REGEN_SHARD_COUNT='x'"),
]


@pytest.mark.parametrize(("env", "count", "expected", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_shard_from_env(env: dict[str, str], count: int | None, expected: tuple[int, int] | None, says: str) -> None:
    if expected is None:
        with pytest.raises(ShardEnvError) as caught:
            shard_from_env(env, count)
        assert says in str(caught.value)
        return
    choice = shard_from_env(env, count)
    assert isinstance(choice, ShardChoice)
    assert (choice.index, choice.count) == expected
    assert says in choice.source


RESOLVE: list[tuple[str | None, int | None, dict[str, str], tuple[int, int] | None, str]] = [
    (None, None, {}, None, ""),
    ("1/3", None, {}, (1, 3), "--shard 1/3"),
    ("auto", None, ARRAY, (2, 4), "SLURM array"),
    ("AUTO", 6, ARRAY, (2, 6), "--shard-count 6"),
]


@pytest.mark.parametrize(("text", "count", "env", "expected", "source"), RESOLVE)
def test_resolve_shard(text: str | None, count: int | None, env: dict[str, str], expected: tuple[int, int] | None,
                       source: str) -> None:
    notes: list[str] = []
    shard, got = resolve_shard(text, count, env, notes.append)
    assert (None if shard is None else (shard.index, shard.count)) == expected
    assert source in got
    assert bool(notes) == (text is not None and text.lower() == "auto"), "only auto logs its choice"


@pytest.mark.parametrize(("text", "count", "env", "says"), [
    ("2/2", None, {}, "K must be in 0..N-1"),
    ("x", None, {}, "or 'auto'"),
    ("1/2", 2, {}, "--shard-count N goes with --shard auto"),
    (None, 2, ARRAY, "--shard-count N goes with --shard auto"),
    ("auto", None, {}, "no scheduler says"),
])
def test_resolve_shard_refusals(text: str | None, count: int | None, env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_shard(text, count, env, lambda _: None)
    assert says in str(caught.value)


def test_cli_without_a_scheduler_exits_2_naming_the_variables(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION", "REGEN_SHARD"))}
    proc = subprocess.run(client_command(["--endpoints", "http://127.0.0.1:9", "--prompts", str(prompts),
                                          "--out", str(tmp_path / "out"), "--shard", "auto"]),
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "SLURM_ARRAY_TASK_ID" in proc.stderr and "JOB_COMPLETION_INDEX" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.usefixtures("aws_env")
def test_run_takes_the_array_shard_and_records_it(tmp_path: Path, fleet_factory: Any,
                                                  s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    out = tmp_path / "out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION"))},
           "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0",
           "SLURM_ARRAY_TASK_MAX": "2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(client_command(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                          "--out", str(out), "--shard", "auto", "--max-in-flight", "8",
                                          "--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url]),
                          cwd=REPO, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "shard 1/3 (--shard auto: SLURM array task SLURM_ARRAY_TASK_ID=1" in proc.stderr
    written = {r["id"] for r in read_results(out)}
    assert written == {f"p{i:06d}" for i in range(60) if shard_of(f"p{i:06d}", 3) == 1}
    keys = s3.keys(BUCKET, f"{s3_prefix}/manifests/")
    assert len(keys) == 1 and keys[0].endswith("-1of3.json")
    manifest = orjson.loads(s3.get(BUCKET, keys[0]))
    assert manifest["shard"] == "1/3"
    assert manifest["shard_source"].startswith("SLURM array task SLURM_ARRAY_TASK_ID=1")


def live(shard: str, *, state: str = "running", age: float = 10.0, writer: str = "") -> Manifest:
    now = time.time()
    return Manifest(writer=writer or f"h-{shard.replace('/', 'of')}", host="h", shard=shard, state=state,
                    sync_interval_s=60.0, updated=now - age)


# (case, the manifests on the prefix, this writer's shard, refused). The manifests are made when the test
# runs, not when it is collected: their age is what makes a writer live or stale.
COUNT_CASES: list[tuple[str, Callable[[], list[Manifest]], str, bool]] = [
    ("same count", lambda: [live("1/3"), live("2/3")], "0/3", False),
    ("a live writer of another count", lambda: [live("2/3")], "0/2", True),
    ("unsharded beside sharded", lambda: [live("1/2")], "0/1", True),
    ("another count, stopped", lambda: [live("2/3", state="stopped")], "0/2", False),
    ("another count, finished", lambda: [live("2/3", state="finished")], "0/2", False),
    ("another count, stale (gone)", lambda: [live("2/3", age=2 * 60 + 61)], "0/2", False),
    ("this writer's own old manifest", lambda: [live("0/3", writer="h-0of2")], "0/2", False),
]


@pytest.mark.parametrize(("make", "shard", "refused"), [c[1:] for c in COUNT_CASES],
                         ids=[c[0] for c in COUNT_CASES])
def test_live_writers_of_another_shard_count_are_refused(make: Callable[[], list[Manifest]], shard: str,
                                                         refused: bool) -> None:
    manifests = make()
    if not refused:
        check_shard_counts(manifests, writer="h-0of2", shard=shard, url="s3://b/p/")
        return
    with pytest.raises(ManifestConflict) as caught:
        check_shard_counts(manifests, writer="h-0of2", shard=shard, url="s3://b/p/")
    count = manifests[0].shard.split("/")[1]
    assert f"REGEN_SHARD_COUNT={count}" in str(caught.value) and manifests[0].writer in str(caught.value)


@pytest.mark.usefixtures("aws_env")
def test_partial_resubmission_without_the_count_is_refused_beside_live_shards(tmp_path: Path,
                                                                               s3: S3Server, s3_prefix: str) -> None:
    """`sbatch --array=0,1` of a 3-shard job, while shard 2/3 still runs: the array says 2 shards, the
    prefix says 3 are live, and the client stops before sending anything."""
    other = Manifest(writer="node9-2of3", host="node9", shard="2/3", sync_interval_s=60.0, machine="node9/0", pid=1)
    s3.client().put_object(Bucket=BUCKET, Key=f"{s3_prefix}/{manifest_key(other.writer)}", Body=other.to_json())
    prompts = make_prompts(tmp_path / "p.jsonl", 6)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JOB_COMPLETION"))},
           "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0",
           "SLURM_ARRAY_TASK_MAX": "1"}
    proc = subprocess.run(client_command(["--endpoints", "http://127.0.0.1:9", "--prompts", str(prompts), "--out",
                                          str(tmp_path / "out"), "--shard", "auto", "--s3", f"s3://{BUCKET}/{s3_prefix}",
                                          "--s3-endpoint-url", s3.url]),
                          cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "node9-2of3 (shard 2/3" in proc.stderr and "REGEN_SHARD_COUNT=3" in proc.stderr
    assert "Traceback" not in proc.stderr
