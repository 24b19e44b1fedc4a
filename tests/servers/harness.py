"""Start the test servers of this package as subprocesses, wait until they listen, read their request logs,
stop them. Sync API; usable from plain and async tests alike.

    with start_oddserver("gzip", "crlf", prefix="/api/x") as srv:
        srv.url                      # "http://127.0.0.1:PORT" (https with tls=...), no prefix added
        srv.log_records()            # one dict per request the server received, in order
    # or: start_server("proxies", "forward", "--refuse"); start_reverse_proxy(srv, "/api/x")

    def test_x(servers):                   # tests/conftest.py's fixture: a ServerGroup for the test;
        servers.oddserver("gzip")          # everything started through it stops at the end

Readiness is the `PORT <n>` line a server prints on stdout once it listens, read with a bounded wait (no
sleeps). A server cannot outlive the test process: its stdin is a pipe from us (it exits at end of file)
and, on Linux when started from the main thread, the kernel sends it SIGTERM when we die (PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from itertools import count
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # trustme is only needed by whoever makes the files
    from tests.servers.tlsfiles import TLSFiles

REPO = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1
_counter = count(1)


class ServerStartError(RuntimeError):
    """The server exited, or printed no `PORT <n>` line in time."""


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class RunningServer:
    """One server subprocess. `url` has no path; `log_records()` reads its JSON-lines request log."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], port: int, scheme: str, log_path: Path | None,
                 stderr_path: Path, owned_dir: Path | None) -> None:
        self.name = name
        self.proc = proc
        self.port = port
        self.scheme = scheme
        self.host = HOST
        self.log_path = log_path
        self.stderr_path = stderr_path
        self._owned_dir = owned_dir
        self._final_records: list[dict[str, Any]] | None = None
        self._final_stderr: str | None = None

    @property
    def url(self) -> str:
        return f"{self.scheme}://{HOST}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_records(self) -> list[dict[str, Any]]:
        """Every logged request so far (a record is written before its reply is sent)."""
        if self._final_records is not None:
            return list(self._final_records)
        if self.log_path is None or not self.log_path.exists():
            return []
        lines = self.log_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def stderr_text(self) -> str:
        if self._final_stderr is not None:
            return self._final_stderr
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL at once (a crash); `stop` still cleans up afterwards."""
        if self.alive:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 3.0) -> None:
        """Close its stdin (it exits at end of file); SIGKILL if it has not exited within `timeout`."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self._owned_dir is not None and self._final_records is None:
            self._final_records = self.log_records()
            self._final_stderr = self.stderr_text()
            shutil.rmtree(self._owned_dir, ignore_errors=True)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<RunningServer {self.name} {self.url} pid={self.proc.pid}>"


def _read_port(proc: subprocess.Popen[bytes], stdout: IO[bytes], timeout: float, stderr_path: Path) -> int:
    deadline = time.monotonic() + timeout
    buf = b""
    fd = stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerStartError(f"no PORT line within {timeout}s; stderr:\n{_tail(stderr_path)}")
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            continue
        data = os.read(fd, 4096)
        if not data:
            code = proc.wait(timeout=timeout)
            raise ServerStartError(f"server exited with {code} before listening; stderr:\n{_tail(stderr_path)}")
        buf += data
    line = buf.split(b"\n", 1)[0].decode(errors="replace").split()
    if len(line) != 2 or line[0] != "PORT" or not line[1].isdigit():
        raise ServerStartError(f"unexpected first stdout line {line!r}")
    return int(line[1])


def _tail(path: Path, limit: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-limit:]
    except FileNotFoundError:
        return ""


def start_server(module: str, *args: str, log: bool | str | Path = True, tls: TLSFiles | None = None,
                 workdir: str | Path | None = None, timeout: float | None = None,
                 env: dict[str, str] | None = None) -> RunningServer:
    """Run `python -m tests.servers.<module> ARGS...` (module "oddserver", "proxies", or a dotted path) and
    return once it listens. `log=True` logs requests to a file in `workdir` (a temporary directory, removed
    by `stop()`, when not given); a path logs there; False turns the log off. `tls` serves https."""
    dotted = module if "." in module else f"tests.servers.{module}"
    owned = None
    if workdir is None:
        owned = Path(tempfile.mkdtemp(prefix="testsrv-"))
        workdir = owned
    base = Path(workdir)
    base.mkdir(parents=True, exist_ok=True)
    stem = f"{dotted.rsplit('.', 1)[-1]}-{next(_counter)}"
    log_path = None if log is False else base / f"{stem}.jsonl" if log is True else Path(log)
    stderr_path = base / f"{stem}.stderr"
    argv = [sys.executable, "-m", dotted, *args, "--parent-pipe"]
    if log_path is not None:
        argv += ["--log", str(log_path)]
    if tls is not None:
        argv += ["--tls-cert", str(tls.server_cert), "--tls-key", str(tls.server_key)]
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), full_env.get("PYTHONPATH")) if p)
    # PDEATHSIG fires when the spawning *thread* exits, so only use it from the main thread.
    deathsig = sys.platform == "linux" and threading.current_thread() is threading.main_thread()
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=REPO,
                                env=full_env, start_new_session=True,
                                preexec_fn=_die_with_parent if deathsig else None)
    assert proc.stdout is not None
    from tests.engines.start_time import SMALL_SERVER_START_S, server_start  # pytest, only where a test runs it

    try:
        with server_start():  # its own bound, while it lives (a dead one ends the read); not the test's limit
            port = _read_port(proc, proc.stdout, SMALL_SERVER_START_S if timeout is None else timeout, stderr_path)
    except BaseException:
        proc.kill()
        proc.wait()
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise
    finally:
        proc.stdout.close()  # nothing else is printed
    return RunningServer(stem, proc, port, "https" if tls is not None else "http", log_path, stderr_path, owned)


def start_oddserver(*modes: str, prefix: str | None = None, extra: Sequence[str] = (),
                    **kw: Any) -> RunningServer:
    """An oddserver in `modes` (none = "normal"); `extra` are more CLI flags, e.g. ("--health-delay", "1")."""
    args = [a for m in modes for a in ("--mode", m)]
    if prefix:
        args += ["--prefix", prefix]
    return start_server("oddserver", *args, *extra, **kw)


def start_reverse_proxy(upstream: RunningServer | int, prefix: str, **kw: Any) -> RunningServer:
    """Serves `prefix`/... from the upstream (a RunningServer over http, or a port on 127.0.0.1)."""
    port = upstream.port if isinstance(upstream, RunningServer) else upstream
    return start_server("proxies", "reverse", "--prefix", prefix, "--upstream", f"http://{HOST}:{port}", **kw)


def start_forward_proxy(*, refuse: bool = False, auth: str | None = None, **kw: Any) -> RunningServer:
    args = ["forward", *(["--refuse"] if refuse else []), *(["--auth", auth] if auth else [])]
    return start_server("proxies", *args, **kw)


class ServerGroup:
    """Starts servers (logs and stderr in `workdir`, e.g. pytest's tmp_path) and stops them all on exit."""

    def __init__(self, workdir: str | Path | None = None) -> None:
        self.workdir = workdir
        self.servers: list[RunningServer] = []

    def _keep(self, server: RunningServer) -> RunningServer:
        self.servers.append(server)
        return server

    def start(self, module: str, *args: str, **kw: Any) -> RunningServer:
        kw.setdefault("workdir", self.workdir)
        return self._keep(start_server(module, *args, **kw))

    def oddserver(self, *modes: str, **kw: Any) -> RunningServer:
        kw.setdefault("workdir", self.workdir)
        return self._keep(start_oddserver(*modes, **kw))

    def reverse_proxy(self, upstream: RunningServer | int, prefix: str, **kw: Any) -> RunningServer:
        kw.setdefault("workdir", self.workdir)
        return self._keep(start_reverse_proxy(upstream, prefix, **kw))

    def forward_proxy(self, **kw: Any) -> RunningServer:
        kw.setdefault("workdir", self.workdir)
        return self._keep(start_forward_proxy(**kw))

    def close(self) -> None:
        for server in self.servers:  # let them all start exiting at once
            if server.proc.stdin is not None and not server.proc.stdin.closed:
                server.proc.stdin.close()
        for server in reversed(self.servers):
            server.stop()
        self.servers.clear()

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
