"""Every documented exit code (docs/exit-codes.md) through every tool, as the user meets it: the real
`python -m client.X` in a subprocess. One map decides them all (client.core.exit_codes.code_for, applied at
each tool's entry): a full disk is 4 wherever it is met, stdout included (`> /dev/full`), with one line and
no traceback. Before the map, a full stdout was a traceback and exit 1 (audit, export --json, estimate
--json) or 2 (status), and a --histogram on a full disk was 2 with a broken PNG left behind.

How each case gets its code, without a fixed sleep: a full disk is /dev/full (stdout) or a file size limit
(RLIMIT_FSIZE, a write past it fails with EFBIG); a stop is sent while the tool is blocked reading a segment
that is a FIFO (the test's open of its write end returns once the tool has opened it), or, for client.run,
once a silent server has accepted the run's first connection. client.run's other codes run on one simulated
server (`--simulate 1`; a 500 on every request for 1, a file size limit for 4); its 5 (segments not in S3 yet)
needs the S3 server: tests/test_s3_e2e.py, as client.status's 3 (a stale shard) is in tests/test_status_fleet.py."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO
from tests.test_export import cases
from tests.tokenizer_fixture import tiny_tokenizer_dir

pytestmark = pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs the /dev/full device")


@dataclass(frozen=True)
class Dirs:
    ok: Path  # a healthy run of three records with server ids
    damaged: Path  # the same with one unreadable line
    piped: Path  # a run whose one segment is a FIFO: a tool reading it blocks until the test writes
    prompts: Path  # the three records' prompts
    more_prompts: Path  # the same and one more: an id without a result
    other_prompts: Path  # prompts none of the results answers
    tmp: Path


def _prompt_file(path: Path, ids: list[str]) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": i, "messages": [{"role": "user", "content": "q"}]}) + b"\n"
                              for i in ids))
    return path


@pytest.fixture
def dirs(tmp_path: Path) -> Dirs:
    plain = cases()[0]
    lines = [orjson.dumps({**plain, "id": f"p{i}"}) + b"\n" for i in range(3)]
    made = {}
    for name, body in (("ok", b"".join(lines)), ("damaged", b"".join(lines) + b"{not json\n")):
        (tmp_path / name / "segments").mkdir(parents=True)
        (tmp_path / name / "segments" / "h-0of1-r-00001.jsonl").write_bytes(body)
        made[name] = tmp_path / name
    (tmp_path / "piped" / "segments").mkdir(parents=True)
    os.mkfifo(tmp_path / "piped" / "segments" / "h-0of1-r-00001.jsonl")
    ids = ["p0", "p1", "p2"]
    return Dirs(made["ok"], made["damaged"], tmp_path / "piped", _prompt_file(tmp_path / "p.jsonl", ids),
                _prompt_file(tmp_path / "more.jsonl", [*ids, "p3"]),
                _prompt_file(tmp_path / "other.jsonl", ["x0", "x1"]), tmp_path)


def _size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, no kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _tool(argv: list[str], *, stdout_full: bool = False,
          preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    if stdout_full:
        with open("/dev/full", "w") as full:
            return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, stdout=full, stderr=subprocess.PIPE,
                                  text=True, timeout=300, check=False, preexec_fn=preexec)
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False, preexec_fn=preexec)


def _stopped_reading_fifo(argv: list[str], fifo: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    opened = threading.Event()

    def writer() -> None:
        with fifo.open("wb"):  # returns once the tool opened the FIFO to read it; held open, it blocks there
            opened.set()
            proc.wait()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    while not opened.wait(0.05):
        assert proc.poll() is None, f"ended before it read the segment: {proc.communicate()}"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    thread.join(timeout=10)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _run_stopped_at_connect(tmp: Path) -> subprocess.CompletedProcess[str]:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "client.run", "--endpoints", f"http://127.0.0.1:{port}",
                                 "--prompts", str(_prompt_file(tmp / "run.jsonl", ["a"])), "--out", str(tmp / "o")],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        conn, _ = silent.accept()  # the run is at its preflight, waiting for this server's answer
        with conn:
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess([], proc.returncode, stdout, stderr)


def _bad_prompts(tmp: Path) -> Path:
    path = tmp / "bad.jsonl"
    path.write_bytes(b"{not json\n[1]\n")
    return path


def _tok() -> str:
    return str(tiny_tokenizer_dir())


# (tool, code, what it is, how it is run)
CASES: list[tuple[str, int, str, Callable[[Dirs], subprocess.CompletedProcess[str]]]] = [
    ("audit", 0, "healthy", lambda d: _tool(["client.audit", str(d.ok), "--short-tokens", "1"])),
    ("audit", 1, "broken (stubs)", lambda d: _tool(["client.audit", str(d.ok), "--short-tokens", "1000"])),
    ("audit", 2, "no such run", lambda d: _tool(["client.audit", str(d.tmp / "nowhere")])),
    ("audit", 3, "incomplete", lambda d: _tool(["client.audit", str(d.ok), "--short-tokens", "1", "--prompts",
                                                str(d.more_prompts)])),
    ("audit", 4, "table to a full stdout", lambda d: _tool(["client.audit", str(d.ok)], stdout_full=True)),
    ("audit", 4, "json to a full stdout", lambda d: _tool(["client.audit", str(d.ok), "--json"], stdout_full=True)),
    ("audit", 4, "histogram on a full disk", lambda d: _tool(
        ["client.audit", str(d.ok), "--histogram", str(d.tmp / "h.png")], preexec=_size_limit(1024))),
    ("audit", 130, "Ctrl-C", lambda d: _stopped_reading_fifo(["client.audit", str(d.piped)],
                                                               d.piped / "segments" / "h-0of1-r-00001.jsonl")),
    ("export", 0, "all exported", lambda d: _tool(["client.export", str(d.ok), "--tokenizer", _tok(), "--out",
                                                   str(d.tmp / "t.parquet")])),
    ("export", 1, "an unreadable line", lambda d: _tool(["client.export", str(d.damaged), "--tokenizer", _tok(),
                                                         "--out", str(d.tmp / "t.parquet")])),
    ("export", 2, "no tokenizer", lambda d: _tool(["client.export", str(d.ok), "--tokenizer", str(d.tmp / "none"),
                                                   "--out", str(d.tmp / "t.parquet")])),
    ("export", 3, "no row fits --max-length", lambda d: _tool(
        ["client.export", str(d.ok), "--tokenizer", _tok(), "--out", str(d.tmp / "t.parquet"), "--max-length", "2"])),
    ("export", 4, "json to a full stdout", lambda d: _tool(
        ["client.export", str(d.ok), "--tokenizer", _tok(), "--out", str(d.tmp / "t.parquet"), "--json"],
        stdout_full=True)),
    ("export", 4, "OUT on a full disk", lambda d: _tool(
        ["client.export", str(d.ok), "--tokenizer", _tok(), "--out", str(d.tmp / "t.jsonl"), "--format",
         "specforge-tokenized"], preexec=_size_limit(64))),
    ("export", 130, "Ctrl-C", lambda d: _stopped_reading_fifo(
        ["client.export", str(d.piped), "--tokenizer", _tok(), "--out", str(d.tmp / "t.parquet")],
        d.piped / "segments" / "h-0of1-r-00001.jsonl")),
    ("estimate", 0, "projected", lambda d: _tool(["client.estimate", "--from-results", str(d.ok), "--prompts",
                                                  str(d.prompts)])),
    ("estimate", 1, "no projection", lambda d: _tool(["client.estimate", "--from-results", str(d.ok), "--prompts",
                                                      str(d.other_prompts)])),
    ("estimate", 2, "no such prompts", lambda d: _tool(["client.estimate", "--from-results", str(d.ok), "--prompts",
                                                        str(d.tmp / "none.jsonl")])),
    ("estimate", 4, "json to a full stdout", lambda d: _tool(
        ["client.estimate", "--from-results", str(d.ok), "--prompts", str(d.prompts), "--json"], stdout_full=True)),
    ("estimate", 4, "table to a full stdout", lambda d: _tool(
        ["client.estimate", "--from-results", str(d.ok), "--prompts", str(d.prompts)], stdout_full=True)),
    ("estimate", 130, "Ctrl-C", lambda d: _stopped_reading_fifo(
        ["client.estimate", "--from-results", str(d.piped), "--prompts", str(d.prompts)],
        d.piped / "segments" / "h-0of1-r-00001.jsonl")),
    ("status", 0, "printed", lambda d: _tool(["client.status", str(d.ok)])),
    ("status", 2, "no such run", lambda d: _tool(["client.status", str(d.tmp / "nowhere")])),
    ("status", 4, "table to a full stdout", lambda d: _tool(["client.status", str(d.ok)], stdout_full=True)),
    ("status", 4, "json to a full stdout", lambda d: _tool(["client.status", str(d.ok), "--json"], stdout_full=True)),
    ("status", 130, "Ctrl-C", lambda d: _stopped_reading_fifo(["client.status", str(d.piped)],
                                                                d.piped / "segments" / "h-0of1-r-00001.jsonl")),
    ("run", 0, "every prompt done", lambda d: _tool(["client.run", "--simulate", "1", "--prompts", str(d.prompts),
                                                     "--out", str(d.tmp / "o")])),
    ("run", 1, "prompts failed after all attempts", lambda d: _tool(
        ["client.run", "--simulate", "1", "--sim-arg=--fail-500", "--sim-arg=1", "--max-attempts", "1", "--prompts",
         str(d.prompts), "--out", str(d.tmp / "o")])),
    ("run", 3, "no valid record", lambda d: _tool(["client.run", "--simulate", "1", "--prompts",
                                                   str(_bad_prompts(d.tmp)), "--out", str(d.tmp / "o")])),
    ("run", 4, "results on a full disk", lambda d: _tool(
        ["client.run", "--simulate", "1", "--prompts", str(d.prompts), "--out", str(d.tmp / "o")],
        preexec=_size_limit(4096))),
    ("run", 2, "unreachable fleet", lambda d: _tool(["client.run", "--endpoints", "http://127.0.0.1:9", "--prompts",
                                                     str(d.prompts), "--out", str(d.tmp / "o")])),
    ("run", 130, "Ctrl-C", lambda d: _run_stopped_at_connect(d.tmp)),
]


@pytest.mark.parametrize(("tool", "code", "what", "how"), CASES, ids=[f"{t}-{c}-{w}" for t, c, w, _ in CASES])
def test_each_documented_code_through_each_tool(dirs: Dirs, tool: str, code: int, what: str,
                                                how: Callable[[Dirs], subprocess.CompletedProcess[str]]) -> None:
    done = how(dirs)
    assert done.returncode == code, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    if code in (2, 4, 130):  # an error or a stop is said in one line, last
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith(("error: ", "stopped by Ctrl-C", "interrupted; ", "usage: ")), done.stderr[-2000:]
    if code == 4:
        assert "free space" in done.stderr.lower(), done.stderr[-2000:]


def test_a_histogram_on_a_full_disk_names_the_file_and_leaves_no_broken_png(dirs: Dirs) -> None:
    png = dirs.tmp / "lengths.png"
    done = _tool(["client.audit", str(dirs.ok), "--json", "--histogram", str(png)], preexec=_size_limit(1024))
    assert done.returncode == 4, done.stderr
    assert str(png) in done.stderr.strip().splitlines()[-1]
    assert orjson.loads(done.stdout)["verdict"]  # the report is not lost with the image
    assert sorted(p.name for p in dirs.tmp.iterdir() if "png" in p.name) == []  # no broken PNG, no part of one


def test_the_export_names_out_as_written_when_only_its_report_failed(dirs: Dirs) -> None:
    out = dirs.tmp / "t.parquet"
    done = _tool(["client.export", str(dirs.ok), "--tokenizer", _tok(), "--out", str(out), "--json"],
                 stdout_full=True)
    assert done.returncode == 4, done.stderr
    assert f"{out} was written whole" in done.stderr.strip().splitlines()[-1]
    assert out.is_file()
