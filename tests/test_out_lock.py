"""The exclusive lock on --out: the lock itself in-process, then the real CLI (two clients at once on one
--out; a kill -9'd client's lock taken over) against real simulated servers."""

from __future__ import annotations

import collections
import os
import re
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import OutLocked
from client.local.lock import LOCK_FILE, Holder, hold_out_lock
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts, read_results, run_client, wait_for_records

FAST = ("--mean-tokens", "120", "--tokens-per-chunk", "3")


# -- the lock, in-process ------------------------------------------------------------------------------

def test_a_second_holder_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    with hold_out_lock(tmp_path) as me:
        assert me.pid == os.getpid()
        with pytest.raises(OutLocked) as refused, hold_out_lock(tmp_path):
            pass  # pragma: no cover - never reached
    message = str(refused.value)
    assert f"--out {tmp_path} is in use by another client" in message
    assert f"host {socket.gethostname()}, pid {os.getpid()}, started " in message


def test_a_clean_release_empties_the_file_and_the_next_holder_says_nothing(tmp_path: Path) -> None:
    notes: list[str] = []
    with hold_out_lock(tmp_path, note=notes.append):
        assert Holder.parse((tmp_path / LOCK_FILE).read_bytes()) is not None
    assert (tmp_path / LOCK_FILE).exists() and (tmp_path / LOCK_FILE).read_bytes() == b""
    with hold_out_lock(tmp_path, note=notes.append):
        pass
    assert notes == []


def test_a_lock_left_by_a_client_that_is_gone_is_taken_over(tmp_path: Path) -> None:
    gone = Holder("gpu-7", 4242, 1_700_000_000.0)
    (tmp_path / LOCK_FILE).write_bytes(gone.to_json())
    notes: list[str] = []
    with hold_out_lock(tmp_path, note=notes.append) as me:
        assert Holder.parse((tmp_path / LOCK_FILE).read_bytes()) == me
    assert notes == [f"--out {tmp_path}: taking over the lock left by a client that is gone "
                     "(host gpu-7, pid 4242, started 2023-11-14 22:13:20 UTC)"]


@pytest.mark.parametrize(("blob", "expected"), [
    (b"", None),
    (b"{", None),
    (b'{"host": "h"}', None),
    (b'{"host": "h", "pid": 1, "started": 2.5}\n', Holder("h", 1, 2.5)),
])
def test_holder_parse(blob: bytes, expected: Holder | None) -> None:
    assert Holder.parse(blob) == expected


# -- the real CLI ----------------------------------------------------------------------------------------

def assert_each_once(out: Path, count: int) -> None:
    counts = collections.Counter(r["id"] for r in read_results(out))
    assert {i: n for i, n in counts.items() if n > 1} == {}
    assert set(counts) == {f"p{i:06d}" for i in range(count)}


@pytest.mark.slow
def test_two_clients_at_once_on_one_out(tmp_path: Path, fleet_factory: Any) -> None:
    """The second client on a live --out is refused before it sends anything. It starts once the first holds
    the lock (read from `.lock`), and the first is slow and then stopped, so the two always overlap:
    starting both at once let a fast first run finish before the second reached the lock."""
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=1.0, extra_args=("--mean-tokens", "400"))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)]
    with (tmp_path / "a.log").open("wb") as handle:
        first = subprocess.Popen(client_command([*args, "--grace", "0"]), cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=handle)
    wait_for_records(out, 1, proc=first)  # it holds the lock and is generating
    holder = Holder.parse((out / LOCK_FILE).read_bytes())
    assert holder is not None and holder.pid == first.pid
    second = run_client(args)
    assert first.poll() is None, "the first client was still running when the second tried"
    assert second.code == 2, second.stderr
    assert f"is in use by another client (host {socket.gethostname()}, pid {first.pid}, started " in second.stderr
    assert "servers:" not in second.stderr and "preflight" not in second.stderr  # nothing was sent
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 130, (tmp_path / "a.log").read_text()[-2000:]
    # Only the first wrote: every segment carries its one run id.
    run_ids = {re.sub(r"-\d{5}$", "", path.stem) for path in (out / "segments").glob("*.jsonl")}
    assert len(run_ids) == 1
    # The rest on a fast fleet (the same model): what the first wrote is not sent again.
    fast = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)] * 2)
    rest = run_client(["--endpoints", ",".join(fast.urls), *args[2:]], timeout=300)
    assert rest.code == 0, rest.stderr[-2000:]
    assert_each_once(out, 60)


@pytest.mark.slow
def test_the_lock_of_a_kill_9d_client_is_taken_over(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=8.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out, 30, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    left = orjson.loads((out / LOCK_FILE).read_bytes())
    assert left["pid"] == proc.pid  # the file still names the dead client; the kernel dropped its lock
    result = run_client(args)
    assert result.code == 0, result.stderr[-3000:]
    assert (f"--out {out}: taking over the lock left by a client that is gone (host {socket.gethostname()}, "
            f"pid {proc.pid}, started ") in result.stderr
    assert_each_once(out, 200)
    assert (out / LOCK_FILE).read_bytes() == b""
