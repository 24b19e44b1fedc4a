"""The offline tools stopped or starved: Ctrl-C and SIGTERM in `client.audit`, `client.status` and
`client.export` end with one line and exit 130 (before, a KeyboardInterrupt traceback; SIGTERM during an
export left OUT.part behind), and a full disk during an export gives exit 4, one line, and no OUT.part
(before, parquet died with `ArrowInvalid: Operation on closed file` and exit 1, which the help defines as
"OUT was written").

Each stop is sent once the tool has opened the run's segment (its file descriptor is in /proc), so it
lands while the tool works, whatever the machine's speed; the segment is large enough to take a while.

A double Ctrl-C in the export (pressed twice, a few ms apart) is two real SIGINTs raised in the tool's own
process at the two moments that matter, whatever the machine's speed: the first while rows are written,
the second while the clean-up closes OUT.part (before, the second skipped the removal and OUT.part stayed,
while the tool said nothing partial was left).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.entry import run_tool
from client.export import build
from tests.conftest import REPO
from tests.test_export import TEMPLATE, cases
from tests.tokenizer_fixture import tiny_tokenizer_dir

RECORDS = 40_000


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("big") / "run"
    (run / "segments").mkdir(parents=True)
    plain = cases()[0]
    lines = (orjson.dumps({**plain, "id": f"r{i:06d}"}) + b"\n" for i in range(RECORDS))
    (run / "segments" / "host-0of1-run-00001.jsonl").write_bytes(b"".join(lines))
    return run


def _segment_open(pid: int, segment: Path) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(segment) for fd in os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return False


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell without job control starts a background command


def _stop_while_working(args: list[str], segment: Path, sig: signal.Signals, *,
                        sigint_ignored: bool = False) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_ignore_sigint if sigint_ignored else None)
    deadline = time.monotonic() + 120
    while not _segment_open(proc.pid, segment):
        assert proc.poll() is None, f"ended before it opened the segment: {proc.communicate()}"
        assert time.monotonic() < deadline, "the tool never opened the segment"
        time.sleep(0.005)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["sigint-default", "started-with-sigint-ignored"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("tool", ["audit", "status", "export"])
def test_a_stop_is_one_line_and_exit_130(tmp_path: Path, big_run: Path, tool: str, sig: signal.Signals,
                                         sigint_ignored: bool) -> None:
    segment = big_run / "segments" / "host-0of1-run-00001.jsonl"
    out = tmp_path / "train.jsonl"
    args = {"audit": ["client.audit", str(big_run)],
            "status": ["client.status", "--out", str(big_run)],
            "export": ["client.export", str(big_run), "--tokenizer", str(tiny_tokenizer_dir(TEMPLATE)), "--format",
                       "specforge-tokenized", "--out", str(out)]}[tool]
    done = _stop_while_working(args, segment, sig, sigint_ignored=sigint_ignored)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("stopped by Ctrl-C or SIGTERM; ")
    if tool == "export":
        assert not out.exists() and not out.with_name(out.name + ".part").exists()


def _file_size_limit(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("fmt", ["parquet", "specforge-tokenized", "specforge"])
def test_no_room_during_an_export_is_exit_4_and_leaves_nothing(tmp_path: Path, big_run: Path, fmt: str) -> None:
    out = tmp_path / "train.out"
    done = subprocess.run([sys.executable, "-m", "client.export", str(big_run), "--tokenizer",
                           str(tiny_tokenizer_dir(TEMPLATE)), "--format", fmt, "--out", str(out),
                           "--row-group-size", "64"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          preexec_fn=lambda: _file_size_limit(256 * 1024))
    assert done.returncode == 4, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert f"error: no room to write {out}" in done.stderr and "free space and run the export again" in done.stderr
    assert not out.exists() and not out.with_name(out.name + ".part").exists()


class _PressedTwice:
    """The real writer, with a Ctrl-C (a real SIGINT, in this process) after some rows, and another as the
    clean-up that the first one started closes the file."""

    def __init__(self, inner: build.Writer) -> None:
        self.inner = inner
        self.rows = 0
        self.closing = 0

    def add(self, *row: Any) -> None:
        self.inner.add(*row)
        self.rows += 1
        if self.rows == 50:
            signal.raise_signal(signal.SIGINT)

    def close(self) -> None:
        self.closing += 1
        signal.raise_signal(signal.SIGINT)
        self.inner.close()


@pytest.mark.parametrize("fmt", ["parquet", "specforge-tokenized"])
def test_a_double_ctrl_c_in_the_export_leaves_no_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    run = tmp_path / "run"
    (run / "segments").mkdir(parents=True)
    plain = cases()[0]
    (run / "segments" / "host-0of1-run-00001.jsonl").write_bytes(
        b"".join(orjson.dumps({**plain, "id": f"r{i:06d}"}) + b"\n" for i in range(200)))
    out = tmp_path / "train.out"
    opened: list[_PressedTwice] = []
    real_open = build.open_writer

    def open_writer(*args: Any) -> build.Writer:
        opened.append(_PressedTwice(real_open(*args)))
        return opened[-1]

    monkeypatch.setattr(build, "open_writer", open_writer)
    code = run_tool("client.export.main", "OUT was not written (nothing partial is left): run the export again",
                    [str(run), "--tokenizer", str(tiny_tokenizer_dir(TEMPLATE)), "--format", fmt, "--out", str(out),
                     "--row-group-size", "1000"])
    [writer] = opened
    assert (writer.rows, writer.closing) == (50, 1), "both presses landed where they should"
    assert code == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("stopped by Ctrl-C or SIGTERM; OUT was not written")
    assert "Traceback" not in err
    assert not out.exists() and not out.with_name(out.name + ".part").exists()
