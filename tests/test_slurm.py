"""launch/slurm/ on a real SLURM cluster (single node, 127.0.0.1; tests/setup/slurm.sh starts it).

`regen.sbatch` as an array of 3 tasks with the sim preset and an S3 protocol server as the bucket: one
task is scancel'ed mid-run and its index resubmitted alone; in the end every prompt id is in S3 exactly
once, `client.status` reports 3 complete shards, and no task left a server running. `servers.sbatch`
(the servers-only layout) writes the fleet's endpoints to a shared file that a client elsewhere uses, and
stops its servers on scancel.

Outside Linux these tests skip; on Linux without the cluster they skip, except under CI=true, where
they fail (CI installs it).
"""

from __future__ import annotations

import collections
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import REPO, engine_missing, in_ci, make_prompts, run_client, wait_until
from tests.s3_server import BUCKET, S3Server, read_s3_results

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture
def s3(s3_private: S3Server) -> S3Server:
    """The SLURM jobs get a server of their own: the tests read a whole fixed prefix back."""
    return s3_private


SBATCH = REPO / "launch" / "slurm" / "regen.sbatch"
SERVERS_SBATCH = REPO / "launch" / "slurm" / "servers.sbatch"
PROMPTS = 120


def _cluster_answers() -> str | None:
    """None when sbatch and a responding controller with an idle-able node are here, else why not."""
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "SLURM is not installed (bash tests/setup/slurm.sh, as root)"
    proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return f"the SLURM controller does not answer ({proc.stderr.strip()[:200]}); run tests/setup/slurm.sh"
    return None


@pytest.fixture(scope="module")
def slurm_cluster() -> None:
    if platform.system() != "Linux":
        pytest.skip("the SLURM cluster of the tests runs on Linux only")
    why = _cluster_answers()
    if why is not None:
        if in_ci():
            pytest.fail(f"{why}\n(CI=true: `make engines` starts the SLURM cluster)", pytrace=False)
        engine_missing(why)


def free_port_base(span: int) -> int:
    """A port P with P..P+span free on 127.0.0.1 right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + span >= 65000:
            continue
        free = True
        for port in range(base, base + span + 1):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    free = False
                    break
        if free:
            return base
    raise AssertionError("no free port range")


def sbatch(script: Path, cwd: Path, env: dict[str, str], *options: str) -> str:
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={cwd}", *options, str(script)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def queued(job: str) -> list[str]:
    """The job's tasks still pending or running, as `ID STATE` lines."""
    proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%i %T"], capture_output=True, text=True, timeout=30,
                          check=False)
    return [line for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []


def task_state(job: str, index: int) -> str:
    proc = subprocess.run(["scontrol", "-o", "show", "job", f"{job}_{index}"], capture_output=True, text=True,
                          timeout=30, check=False)
    for word in proc.stdout.split():
        if word.startswith("JobState="):
            return word.split("=", 1)[1]
    return ""


def held_for_begin_time(job: str, index: int) -> bool:
    proc = subprocess.run(["scontrol", "-o", "show", "job", f"{job}_{index}"], capture_output=True, text=True,
                          timeout=30, check=False)
    words = set(proc.stdout.split())
    return "JobState=PENDING" in words and "Reason=BeginTime" in words


def node_settled() -> bool:
    """No node is still completing a job (its epilog, the end of a requeued run)."""
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode == 0 and not any("comp" in state for state in proc.stdout.split())


def manifest(server: S3Server, prefix: str, shard: str) -> dict[str, Any] | None:
    try:
        for key in server.keys(BUCKET, f"{prefix}/manifests/"):
            doc: dict[str, Any] = orjson.loads(server.get(BUCKET, key))
            if doc.get("shard") == shard:
                return doc
    except Exception:  # not there yet
        return None
    return None


def logs(cwd: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(cwd.glob("*.out")))


@pytest.fixture
def job_env(tmp_path: Path) -> dict[str, str]:
    """The environment a job is submitted with (sbatch passes it on): no SLURM or REGEN variable of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "REGEN_"))}
    env.update({"REGEN_REPO": str(REPO), "REGEN_PYTHON": sys.executable, "REGEN_WORK": str(tmp_path / "work")})
    return env


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("slurm_cluster")
def test_array_of_three_with_a_cancelled_task_resubmitted(tmp_path: Path, s3: S3Server,
                                                          job_env: dict[str, str]) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", PROMPTS)
    prefix = "slurm-run"
    base = free_port_base(30)
    env = {**job_env, "REGEN_PROMPTS": str(prompts), "REGEN_S3": f"s3://{BUCKET}/{prefix}", "REGEN_PRESET": "sim",
           "REGEN_BASE_PORT": str(base), "REGEN_PORT_STRIDE": "10",
           "REGEN_SERVER_ARGS": "--num-gpus 1 --extra-args '--speed 1 --mean-tokens 40 --max-running 4'",
           "REGEN_CLIENT_ARGS": f"--s3-endpoint-url {s3.url} --max-in-flight 3 --sync-interval 1 --grace 2 "
                                "--progress-every 2"}
    job = sbatch(SBATCH, tmp_path, env, "--array=0-2", "--oversubscribe")
    try:
        # Task 1 is mid-run once it has uploaded something: cancel it there.
        wait_until(lambda: bool((m := manifest(s3, prefix, "1/3")) and m["segments"]), "task 1 uploads a segment",
                   timeout=120)
        subprocess.run(["scancel", f"{job}_1"], check=True, timeout=30)
        wait_until(lambda: not queued(job), "the array ends", timeout=180)
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
    out1 = (tmp_path / f"regen-{job}_1.out").read_text(errors="replace")
    assert "the client exited 130" in out1 and "stopping the servers" in out1, logs(tmp_path)
    cancelled = manifest(s3, prefix, "1/3")
    assert cancelled is not None and cancelled["state"] == "stopped", logs(tmp_path)
    assert cancelled["totals"]["records"] > 0, "it was cancelled mid-run"
    for index in (0, 2):
        assert task_state(job, index) in ("COMPLETED", ""), logs(tmp_path)
        assert "the client exited 0" in (tmp_path / f"regen-{job}_{index}.out").read_text(), logs(tmp_path)

    report = status(s3, prefix, prompts)
    assert report["totals"]["complete_shards"] == 2 and report["totals"]["remaining"] > 0

    # Resubmit only index 1: the count must be given (an array of one task is not the shard count).
    again = sbatch(SBATCH, tmp_path, {**env, "REGEN_SHARD_COUNT": "3"}, "--array=1", "--oversubscribe")
    try:
        wait_until(lambda: not queued(again), "the resubmitted task ends", timeout=180)
    finally:
        subprocess.run(["scancel", again], capture_output=True, timeout=30, check=False)
    out = (tmp_path / f"regen-{again}_1.out").read_text(errors="replace")
    assert "the client exited 0" in out, logs(tmp_path)
    assert "shard 1/3 (--shard auto: SLURM array task SLURM_ARRAY_TASK_ID=1, REGEN_SHARD_COUNT=3)" in out

    stored = read_s3_results(s3, BUCKET, prefix)
    counts = collections.Counter(r["id"] for r in stored)
    assert [i for i, n in counts.items() if n > 1] == [], "an id is in S3 twice"
    assert set(counts) == {f"p{i:06d}" for i in range(PROMPTS)}
    report = status(s3, prefix, prompts)
    assert report["totals"]["complete_shards"] == 3 and report["totals"]["remaining"] == 0
    assert [row["shard"] for row in report["shards"]] == ["0/3", "1/3", "2/3"]
    assert all(row["shard_source"].startswith("SLURM array task") for row in report["shards"])
    for pid_file in (tmp_path / "work").glob("regen-*/servers/servers.pid"):
        alive = subprocess.run(["bash", str(REPO / "launch" / "stop_servers.sh"), "--status", "--pid-file",
                                str(pid_file)], capture_output=True, text=True, timeout=30, check=False)
        assert alive.returncode == 1, f"a server of {pid_file} still runs: {alive.stdout}"


def status(s3: S3Server, prefix: str, prompts: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "client.status", "--s3", f"s3://{BUCKET}/{prefix}",
                           "--s3-endpoint-url", s3.url, "--prompts", str(prompts), "--json"], cwd=REPO,
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    doc: dict[str, Any] = orjson.loads(proc.stdout)
    return doc


@pytest.mark.timeout(180)
@pytest.mark.usefixtures("slurm_cluster")
def test_servers_only_layout_writes_a_shared_endpoints_file(tmp_path: Path, job_env: dict[str, str]) -> None:
    shared = tmp_path / "shared"
    base = free_port_base(4)
    env = {**job_env, "REGEN_PRESET": "sim", "REGEN_BASE_PORT": str(base), "REGEN_ENDPOINTS_DIR": str(shared),
           "REGEN_SERVER_ARGS": "--num-gpus 2 --extra-args '--speed 20 --mean-tokens 30'"}
    job = sbatch(SERVERS_SBATCH, tmp_path, env, "--nodes=1", "--oversubscribe")
    endpoints = shared / "endpoints.txt"
    try:
        wait_until(endpoints.exists, "the shared endpoints file", timeout=120)
        urls = [line for line in endpoints.read_text().splitlines() if line and not line.startswith("#")]
        assert urls == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"], endpoints.read_text()
        prompts = make_prompts(tmp_path / "p.jsonl", 20)
        result = run_client(["--endpoints", f"@{endpoints}", "--prompts", str(prompts), "--out",
                             str(tmp_path / "out"), "--max-in-flight", "4"])
        assert result.code == 0, result.stderr[-2000:]
    finally:
        subprocess.run(["scancel", job], check=True, timeout=30)
    wait_until(lambda: not queued(job), "the servers job ends", timeout=90)
    log = (tmp_path / f"servers-{job}.out").read_text(errors="replace")
    assert "stopping the servers" in log, log
    for pid_file in (tmp_path / "work").glob("**/servers.pid"):
        alive = subprocess.run(["bash", str(REPO / "launch" / "stop_servers.sh"), "--status", "--pid-file",
                                str(pid_file)], capture_output=True, text=True, timeout=30, check=False)
        assert alive.returncode == 1, f"a server of {pid_file} still runs: {alive.stdout}"


@pytest.mark.timeout(300)
@pytest.mark.usefixtures("slurm_cluster")
def test_time_limit_warning_flushes_requeues_and_resumes(tmp_path: Path, s3: S3Server,
                                                         job_env: dict[str, str]) -> None:
    """What `--signal=B:USR1@120` does before the time limit, sent by hand: the script stops the client (it
    uploads), stops the servers and requeues the task, which resumes its shard from S3 and finishes."""
    prompts = make_prompts(tmp_path / "p.jsonl", 40)
    prefix = "requeue"
    env = {**job_env, "REGEN_PROMPTS": str(prompts), "REGEN_S3": f"s3://{BUCKET}/{prefix}", "REGEN_PRESET": "sim",
           "REGEN_BASE_PORT": str(free_port_base(2)),
           "REGEN_SERVER_ARGS": "--num-gpus 1 --extra-args '--speed 1 --mean-tokens 40 --max-running 4'",
           "REGEN_CLIENT_ARGS": f"--s3-endpoint-url {s3.url} --max-in-flight 3 --sync-interval 1 --grace 2"}
    job = sbatch(SBATCH, tmp_path, env, "--array=0", "--oversubscribe")
    log = tmp_path / f"regen-{job}_0.out"
    try:
        wait_until(lambda: bool((m := manifest(s3, prefix, "0/1")) and m["segments"]), "a first upload",
                   timeout=120)
        subprocess.run(["scancel", "--batch", "--signal=USR1", f"{job}_0"], check=True, timeout=30)
        wait_until(lambda: task_state(job, 0) == "PENDING", "the task is requeued", timeout=90)
        # SLURM holds a requeued job back for a while (its begin time); that wait is site policy, not ours, so
        # the test lifts it. Only once the hold is in place and the node has finished with the old run: a
        # relaunch while the node still completes the requeued instance fails at once.
        released_at = [0.0]

        def finished_again() -> bool:
            if log.exists() and "the client exited 0" in log.read_text(errors="replace"):
                return True
            if time.monotonic() - released_at[0] >= 5.0 and held_for_begin_time(job, 0) and node_settled():
                released_at[0] = time.monotonic()
                subprocess.run(["scontrol", "update", f"JobId={job}_0", "StartTime=now"], capture_output=True,
                               timeout=30, check=False)
            return False

        try:
            wait_until(finished_again, "the requeued task finishes", timeout=240)
        except AssertionError as exc:
            shown = subprocess.run(["scontrol", "show", "job", f"{job}_0"], capture_output=True, text=True,
                                   timeout=30, check=False).stdout
            text = log.read_text(errors="replace") if log.exists() else "(no log)"
            raise AssertionError(f"{exc}\n--- scontrol show job\n{shown}\n--- log tail\n{text[-3000:]}") from exc
        wait_until(lambda: not queued(job), "the task ends", timeout=60)
    finally:
        subprocess.run(["scancel", job], capture_output=True, timeout=30, check=False)
    text = log.read_text(errors="replace")
    assert "the time limit is near" in text and "the client exited 130" in text, text[-3000:]
    assert "requeueing this task" in text, text[-3000:]
    assert text.count("starting the servers") == 2, "the requeued task started again"
    stored = read_s3_results(s3, BUCKET, prefix)
    counts = collections.Counter(r["id"] for r in stored)
    assert max(counts.values()) == 1 and set(counts) == {f"p{i:06d}" for i in range(40)}


def _listening(port: int) -> list[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} writes them) with a socket listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            for row in list(handle)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.append(address)
    return found


@pytest.mark.usefixtures("slurm_cluster")
def test_the_daemons_listen_on_loopback_only() -> None:
    # slurmctld (6817) and slurmd (6818) stay up after the tests: no other host may reach them.
    for port in (6817, 6818):
        addresses = _listening(port)
        assert addresses, f"nothing listens on port {port}"
        assert set(addresses) <= {"0100007F", "00000000000000000000000001000000"}, (port, addresses)
