"""A fleet of simulated SGLang servers as subprocesses on one host, driven through a small sync API.

Used by the client's `--simulate N` and by tests that need real processes to kill and restart. Each
server is `sys.executable -m simulator` on its own free port; all share the content seed (so any server
gives the same reply to the same request) and each gets its own fault seed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

from simulator.config import DEFAULT_MODEL_NAME

_PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SimServerSpec:
    """How one fleet member runs; `extra_args` are any further CLI flags, e.g. ("--fail-500", "0.05"). With
    `gpu_kind` the member plays that GPU (simulator.kinds); `max_running` None then keeps the kind's slots."""

    max_running: int | None = 64
    dp_size: int = 1
    speed: float = 1.0
    startup_delay: float = 0.0
    extra_args: tuple[str, ...] = ()
    gpu_kind: str | None = None


class SimServerExited(RuntimeError):
    """A fleet member's process ended while the fleet waited for it."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


_PR_SET_PDEATHSIG = 1


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class _Member:
    """One server process and the port it keeps across restarts."""

    def __init__(self, index: int, spec: SimServerSpec, port: int) -> None:
        self.index = index
        self.spec = spec
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: IO[bytes] | None = None

    def log_tail(self, limit: int = 2000) -> str:
        if self.log is None:
            return ""
        self.log.flush()
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - limit))
        return self.log.read().decode(errors="replace")


def _die_with_parent() -> None:
    """In the child before exec: a fleet must not outlive the process that started it (a closed terminal
    or a kill -9 of `client.run --simulate` would otherwise leave servers behind)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class SimFleet:
    """Start, stop, kill and restart simulated servers; `urls` lists them as http://host:port."""

    def __init__(self, specs: Sequence[SimServerSpec], *, host: str = "127.0.0.1", seed: int = 0,
                 model_name: str = DEFAULT_MODEL_NAME, log_dir: Path | None = None) -> None:
        self.host = host
        self.seed = seed
        self.model_name = model_name
        self.log_dir = log_dir
        self._members = [_Member(i, spec, 0) for i, spec in enumerate(specs)]

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{m.port}" for m in self._members]

    def __len__(self) -> int:
        return len(self._members)

    def _command(self, m: _Member) -> list[str]:
        s = m.spec
        return [
            sys.executable, "-m", "simulator",
            "--host", self.host, "--port", str(m.port),
            "--model-name", self.model_name,
            "--seed", str(self.seed), "--fault-seed", str(self.seed * 1000 + m.index + 1),
            *(("--gpu-kind", s.gpu_kind) if s.gpu_kind else ()),
            *(("--max-running", str(s.max_running)) if s.max_running is not None else ()),
            "--dp-size", str(s.dp_size), "--speed", repr(s.speed), "--startup-delay", repr(s.startup_delay),
            *s.extra_args,
        ]

    def _spawn(self, m: _Member) -> None:
        if m.log is None:
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                m.log = open(self.log_dir / f"sim-{m.index}.log", "a+b")  # noqa: SIM115 - lives with the member
            else:
                m.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives with the member
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        # Run from the package root so `-m simulator` cannot pick up another `simulator` in the caller's cwd.
        m.proc = subprocess.Popen(self._command(m), stdin=subprocess.DEVNULL, stdout=m.log, stderr=m.log,
                                  env=env, cwd=_PACKAGE_ROOT, start_new_session=True,
                                  preexec_fn=_die_with_parent if sys.platform == "linux" else None)

    def _wait(self, m: _Member, *, ready: bool, timeout: float) -> None:
        """Wait for /health 200 (ready) or for any HTTP answer at all (not ready)."""
        deadline = time.monotonic() + timeout
        url = f"http://{self.host}:{m.port}/health"
        while True:
            assert m.proc is not None
            if m.proc.poll() is not None:
                raise SimServerExited(f"simulated server {m.index} exited with {m.proc.returncode}:\n"
                                      f"{m.log_tail()}", m.proc.returncode)
            try:
                with urllib.request.urlopen(url, timeout=1.0) as resp:
                    if resp.status == 200 or not ready:
                        return
            except urllib.error.HTTPError:
                if not ready:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"simulated server {m.index} not {'ready' if ready else 'up'} "
                                   f"after {timeout:.0f}s:\n{m.log_tail()}")
            time.sleep(0.05)

    def _start_member(self, m: _Member, *, wait_ready: bool, timeout: float, new_port: bool) -> None:
        attempts = 3 if new_port else 1
        for attempt in range(attempts):
            if new_port:
                m.port = _free_port(self.host)
            self._spawn(m)
            try:
                self._wait(m, ready=wait_ready, timeout=timeout)
                return
            except SimServerExited as exc:
                # Exit code 1 is a failed bind: another process may have taken the free port between
                # probe and bind, so try a new one. Anything else (bad flags) will not get better.
                if exc.returncode != 1 or attempt == attempts - 1:
                    raise

    def start(self, *, wait_ready: bool = True, timeout: float = 30.0) -> None:
        """Start every member on a free port; wait for each to answer /health (200 if `wait_ready`)."""
        try:
            for m in self._members:
                self._start_member(m, wait_ready=False, timeout=timeout, new_port=True)
            if wait_ready:
                for m in self._members:
                    self._wait(m, ready=True, timeout=timeout)
        except BaseException:
            self.close()
            raise

    def stop(self, index: int) -> None:
        """SIGTERM, then wait (SIGKILL if it does not exit within 10 s)."""
        m = self._members[index]
        if m.proc is None or m.proc.poll() is not None:
            return
        m.proc.send_signal(signal.SIGTERM)
        try:
            m.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()

    def kill(self, index: int) -> None:
        """SIGKILL: the server vanishes mid-stream, as a crashed GPU node does."""
        m = self._members[index]
        if m.proc is not None and m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait()

    def restart(self, index: int, *, wait_ready: bool = True, timeout: float = 30.0) -> None:
        """Stop the member if it runs, then start it again on the same port with the same spec."""
        self.stop(index)
        self._start_member(self._members[index], wait_ready=wait_ready, timeout=timeout, new_port=False)

    def is_running(self, index: int) -> bool:
        proc = self._members[index].proc
        return proc is not None and proc.poll() is None

    def close(self) -> None:
        for m in self._members:
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
        for i, m in enumerate(self._members):
            self.stop(i)
            if m.log is not None:
                with contextlib.suppress(OSError):
                    m.log.close()
                m.log = None

    def __enter__(self) -> SimFleet:
        if not any(m.proc is not None for m in self._members):
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
