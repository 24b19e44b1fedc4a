"""A resume while the disk is still full: every start-up write (the --out probe, the lock, run.json, the
ledger repair) says "free space and run the same command again" (exit 4), as the run that filled the disk
did, and never "choose a writable directory", whose remedy would regenerate everything already done."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from client.core.errors import ConfigError, SinkError, map_write_error
from client.local import ledger, lock, run_settings
from client.local.ledger import read_done_ids
from client.local.lock import hold_out_lock
from client.local.run_settings import RunRecord, write_run_file
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, make_prompts

FAST = ("--mean-tokens", "80", "--tokens-per-chunk", "3")
CLIENT = ("--max-in-flight", "16", "--idle-timeout", "1", "--max-attempts", "10", "--grace", "3")


def _full(_: Any = None) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize(("code", "kind"), [(errno.ENOSPC, SinkError), (errno.EDQUOT, SinkError),
                                            (errno.EFBIG, SinkError), (errno.EACCES, ConfigError),
                                            (errno.EROFS, ConfigError)])
def test_no_room_is_a_sink_error(code: int, kind: type) -> None:
    error = map_write_error(OSError(code, os.strerror(code)), "cannot write x", ". Choose another.")
    assert type(error) is kind
    assert ("Choose another" in str(error)) == (kind is ConfigError)


def test_lock_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock.os, "fsync", _full)
    with pytest.raises(SinkError, match="lock file"), hold_out_lock(tmp_path):
        pass


def test_run_file_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_settings.os, "fsync", _full)
    with pytest.raises(SinkError, match=r"run\.json"):
        write_run_file(tmp_path, RunRecord(settings={}, prompts=(), created=0.0))


def test_ledger_repair_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    segments = tmp_path / "segments"
    segments.mkdir()
    (segments / "h-0of1-r-00001.jsonl").write_bytes(b'{"id": "a"}\n{"id": "b"}\n')  # no sidecar: rescanned
    monkeypatch.setattr(ledger.os, "fsync", _full)
    with pytest.raises(SinkError, match="cannot repair"):
        read_done_ids(segments)


def _whole_lines(out: Path) -> int:
    # The run that filled the disk left a torn last line; only whole lines are records.
    return sum(segment.read_bytes().count(b"\n") for segment in (out / "segments").glob("*.jsonl"))


def _file_limit(limit: int) -> Any:
    def apply() -> None:
        # A file-size cap stands in for a full disk: writes past it fail (EFBIG) as a full disk's do (ENOSPC).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_resume_on_a_full_disk_says_free_space(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    command = client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out), *CLIENT])
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                           preexec_fn=_file_limit(40_000))
    assert first.returncode == 4, first.stderr[-3000:]
    assert "free space" in first.stderr
    done = _whole_lines(out)
    assert done > 0

    second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                            preexec_fn=_file_limit(0))
    assert second.returncode == 4, second.stderr[-3000:]
    assert "free space (or fix permissions) and run the same command again" in second.stderr
    assert "Choose a writable directory" not in second.stderr
    assert "Traceback" not in second.stderr
    assert _whole_lines(out) == done
