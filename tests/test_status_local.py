"""`client.status --out`: a run's local directory. During a real run it says the run is live and shows
done/total, tokens, the rate over the last hour and an ETA; after it, that no run is live and nothing
remains. The rate window and the lock's holder are checked on directories laid out by hand, and the
refusals (exit 2) by the CLI."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.ids import shard_of
from client.local import lock as out_lock
from client.local.lock import hold_out_lock
from client.local.run_settings import RunRecord, hash_prompt_file, shaping_settings, write_run_file
from client.status.local import lock_state
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, wait_for_records


def status(out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.status", "--out", str(out), "--json", *extra], cwd=REPO,
                          capture_output=True, timeout=60, check=False)
    doc: dict[str, Any] = orjson.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr.decode()


@pytest.mark.slow
def test_live_run_then_finished(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=4, speed=3.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 400)
    out = tmp_path / "out"
    proc = subprocess.Popen(client_command(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                            "--out", str(out), "--max-in-flight", "4", "--grace", "2"]),
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_records(out, 8, proc=proc)
        code, doc, stderr = status(out, "--prompts", str(prompts))
        assert code == 0, stderr
        assert doc["live"] is True and doc["lock"].startswith("a run is live")
        assert doc["holder"]["pid"] == proc.pid
        assert doc["prompts"] == 400 and 8 <= doc["done"] < 400 and doc["remaining"] == 400 - doc["done"]
        assert doc["completion_tokens"] > 0 and doc["rate_per_s"] > 0 and doc["eta_s"] > 0
        assert doc["run"]["settings"]["model"], "run.json is read"
        table = subprocess.run([sys.executable, "-m", "client.status", "--out", str(out), "--prompts", str(prompts)],
                               cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert table.returncode == 0, table.stderr
        for word in ("a run is live", "done", "/ 400", "tok/s", "ETA"):
            assert word in table.stdout, table.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    code, doc, _ = status(out, "--prompts", str(prompts))
    assert code == 0 and doc["live"] is False and doc["lock"] == "no run is live (the lock is free)"
    assert doc["done"] < 400 and doc["remaining"] > 0


def write_segment(out: Path, name: str, records: list[tuple[str, float, int]]) -> None:
    (out / "segments").mkdir(parents=True, exist_ok=True)
    lines = [orjson.dumps({"id": i, "usage": {"prompt_tokens": 10, "completion_tokens": tokens}, "created": created})
             for i, created, tokens in records]
    (out / "segments" / name).write_bytes(b"".join(line + b"\n" for line in lines))


def test_rate_over_the_last_hour_and_shard_total(tmp_path: Path) -> None:
    now = time.time()
    out = tmp_path / "out"
    # Shard 1 of 2: two records from three hours ago, 36 from the last half hour (one every 50 s).
    old = [(f"old{i}", now - 3 * 3600 - i, 100) for i in range(2)]
    recent = [(f"new{i}", now - 1800 + 50 * i, 10) for i in range(36)]
    write_segment(out, "h-1of2-20260101T000000-abcd-000001.jsonl", old)
    write_segment(out, "h-1of2-20260101T010000-abcd-000002.jsonl", recent)
    (out / "segments" / "h-1of2-20260101T010000-abcd-000003.jsonl").write_bytes(b'{"id": "torn", "us')
    ids = [r[0] for r in old + recent] + [f"other{i}" for i in range(200)]
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": i, "messages": []}) + b"\n" for i in ids))
    code, doc, stderr = status(out, "--prompts", str(prompts))
    assert code == 0, stderr
    assert doc["shard"] == "1/2" and doc["done"] == 38 and doc["torn_tails"] == 1
    assert doc["rate_window_s"] == 3600.0 and doc["records_in_window"] == 36
    assert doc["rate_per_s"] == pytest.approx(0.01) and doc["tokens_per_s"] == pytest.approx(0.1)
    shard_total = sum(1 for i in ids if shard_of(i, 2) == 1)
    assert doc["prompts"] == shard_total
    assert doc["eta_s"] == pytest.approx((shard_total - 38) / 0.01, rel=0.01)
    assert doc["live"] is False and doc["run"] is None


def test_lock_holders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    lock = out / ".lock"
    assert lock_state(out).live is False
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    lock.write_bytes(orjson.dumps({"host": socket.gethostname(), "pid": int(gone.stdout), "started": 1.0}))
    state = lock_state(out)
    assert state.live is False and "left by a client that is gone" in state.describe()
    lock.write_bytes(orjson.dumps({"host": "elsewhere", "pid": 1, "started": 1.0}))
    state = lock_state(out)
    assert state.live is False and "left by a client that is gone" in state.describe()
    lock.write_bytes(b"")
    assert lock_state(out).describe() == "no run is live (the lock is free)"
    with hold_out_lock(out) as me:
        state = lock_state(out)
        assert state.live is True and state.holder == me and state.describe().startswith("a run is live")
    assert lock_state(out).describe() == "no run is live (the lock is free)"


@pytest.mark.parametrize("pid", [1, os.getpid()], ids=["pid 1", "this process"])
def test_a_live_unrelated_pid_in_an_unheld_lock_is_not_a_live_run(tmp_path: Path, pid: int) -> None:
    # pid 1 always runs: a lock file naming it (a container's client was pid 1) but not held is a run that is
    # gone, as client.run judges it when it takes the lock over.
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_bytes(orjson.dumps({"host": socket.gethostname(), "pid": pid, "started": 1.0}))
    code, doc, stderr = status(out)
    assert code == 0, stderr
    assert doc["live"] is False and "left by a client that is gone" in doc["lock"], doc
    taken: list[str] = []
    with hold_out_lock(out, note=taken.append):
        assert lock_state(out).live is True
    assert taken and "taking over the lock left by a client that is gone" in taken[0]


@pytest.mark.parametrize(("args", "says"), [
    (["--out", "{t}/nope"], "no such directory"),
    (["--out", "{t}/empty"], "not a run's directory"),
    (["--out", "{t}/empty", "--s3", "s3://b/p"], "name it once"),
    (["--out", "{t}/empty", "--s3-endpoint-url", "http://127.0.0.1:9"], "--s3-endpoint-url goes with an s3:// run"),
    ([], "which run? Name it as RUN"),
])
def test_refusals_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "client.status", *(a.format(t=tmp_path) for a in args)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_turns_all_counts_finished_conversations(tmp_path: Path) -> None:
    now = time.time()
    out = tmp_path / "out"
    out.mkdir()
    settings = shaping_settings(model="m", sampling={"max_tokens": 64}, thinking=True, turns="all", fields=[])
    write_run_file(out, RunRecord(settings, (), now - 600, "r1"))
    # c1 is over (its last event has the `!`), c2 is at its second turn, c3 has not started.
    write_segment(out, "h-0of1-20260101T000000-abcd-000001.jsonl",
                  [("c1#1", now - 300, 10), ("c1#2!", now - 200, 10), ("c2#1", now - 100, 10)])
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": i, "messages": []}) + b"\n" for i in ("c1", "c2", "c3")))
    code, doc, stderr = status(out, "--prompts", str(prompts))
    assert code == 0, stderr
    assert doc["counts"] == "conversations" and doc["records"] == 3
    assert doc["done"] == 1 and doc["prompts"] == 3 and doc["remaining"] == 2
    assert doc["records_in_window"] == 1, "the rate counts finished conversations"
    assert doc["completion_tokens"] == 30


def test_a_status_probe_never_turns_a_starting_client_away(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").write_bytes(b"")
    probe = (out / ".lock").open("rb")
    fcntl.flock(probe.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)  # a status probe at the moment a client starts
    waits: list[float] = []

    def probe_ends(seconds: float) -> None:
        waits.append(seconds)
        probe.close()  # the probe lets go while the client waits

    monkeypatch.setattr(out_lock.time, "sleep", probe_ends)
    with hold_out_lock(out) as me:
        assert lock_state(out).holder == me
    assert len(waits) == 1


def test_a_finished_run_without_prompts_uses_run_json_and_its_own_last_hour(tmp_path: Path) -> None:
    now = time.time()
    out = tmp_path / "out"
    out.mkdir()
    prompts = tmp_path / "p.jsonl"
    ids = [f"q{i}" for i in range(50)]
    prompts.write_bytes(b"".join(orjson.dumps({"id": i, "messages": []}) + b"\n" for i in ids))
    settings = shaping_settings(model="m", sampling={"max_tokens": 64}, thinking=True, turns="last", fields=[])
    write_run_file(out, RunRecord(settings, (hash_prompt_file(prompts),), now - 6 * 3600, "r1"))
    # The run ended four hours ago: 40 records over its last hour, one every 90 s.
    ended = now - 4 * 3600
    write_segment(out, "h-0of1-20260101T000000-abcd-000001.jsonl",
                  [(ids[i], ended - 90 * (39 - i), 10) for i in range(40)])
    code, doc, stderr = status(out)
    assert code == 0, stderr
    assert doc["live"] is False and doc["prompts_from"] == "run.json"
    assert doc["prompts"] == 50 and doc["done"] == 40 and doc["remaining"] == 10
    assert doc["records_in_window"] == 40, "the hour before the run ended, not the idle hour before now"
    assert doc["rate_per_s"] == pytest.approx(40 / 3510, rel=0.01)  # since the first record: 39 x 90 s
    table = subprocess.run([sys.executable, "-m", "client.status", "--out", str(out)], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=False)
    assert "40 / 50" in table.stdout and "prompts from run.json" in table.stdout, table.stdout
