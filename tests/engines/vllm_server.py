"""Runs one real vLLM OpenAI-compatible server on the CPU as a subprocess, for tests.

This module owns the server's life cycle: the command line (the flags a tiny Qwen3 needs on a CPU),
a free port on 127.0.0.1, its own process group, the log file, waiting for ``/health``, and stopping
the whole group (SIGTERM, then SIGKILL). It runs in the main venv (stdlib + httpx only); the server
runs with the python of the separate vLLM venv that ``bash tests/setup/vllm.sh`` creates.

    with VLLMServer(model_dir, "tiny-qwen3-scripted", extra_args=["--max-num-seqs", "8"]) as srv:
        httpx.post(f"{srv.url}/v1/chat/completions", json={...})

Run by hand: ``python tests/engines/vllm_server.py --model DIR [--name NAME] [-- EXTRA ARGS]``.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_ENV_VAR = "REGEN_SWARM_VLLM_VENV"
SETUP_HINT = "run `bash tests/setup/vllm.sh` to create it"
# How long a server may take to answer /health, while its process lives (a dead one fails at once): vLLM
# about 40 s and SGLang 40-80 s on an idle 2-core machine, vLLM 2.5 minutes beside three CPU-heavy jobs.
# The bound is generous, so that a slow start is waited for and only a hung one fails, with its log.
STARTUP_TIMEOUT_S = 900.0

# The flags every test server gets: a Qwen3 with reasoning and hermes tool calls, on a CPU.
BASE_ARGS: tuple[str, ...] = (
    "--max-model-len", "2048",
    "--reasoning-parser", "qwen3",
    "--enable-auto-tool-choice",
    "--tool-call-parser", "hermes",
    "--enforce-eager",              # no torch.compile: start-up in seconds, not minutes
    "--kv-cache-memory-bytes", "64M",  # skips the memory-fraction check that fails on shared hosts
)


class VLLMServerError(RuntimeError):
    """The server could not be set up, did not become ready, or died; the message has the log tail."""


def vllm_venv() -> Path:
    """The vLLM venv: $REGEN_SWARM_VLLM_VENV, else .venv-vllm in the repo root."""
    return Path(os.environ.get(VENV_ENV_VAR) or REPO_ROOT / ".venv-vllm")


def vllm_python(venv: Path | None = None) -> Path:
    """The vLLM venv's python; raises VLLMServerError (with the set-up hint) if it is missing."""
    venv = venv or vllm_venv()
    python = venv / "bin" / "python"
    if not python.exists():
        raise VLLMServerError(f"the vLLM venv is missing ({python} not found): {SETUP_HINT}")
    return python


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 60) -> str:
    try:
        data = path.read_bytes()[-64_000:]
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


class VLLMServer:
    """One vLLM server process group. Use as a context manager, or call start() and stop()."""

    def __init__(
        self,
        model_dir: Path | str,
        model_name: str = "tiny-qwen3",
        *,
        extra_args: Sequence[str] = (),
        python: Path | str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | str | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.model_name = model_name
        self.extra_args = list(extra_args)
        self.python = Path(python) if python else None
        self.host = host
        self.port = port or free_port(host)
        self.startup_timeout = startup_timeout
        self.env = env or {}
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"vllm-{model_name}-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL without the /v1 suffix, e.g. http://127.0.0.1:41234."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (with /v1)."""
        return f"{self.url}/v1"

    # What a subclass for another engine changes (tests/engines/sglang_server.py).
    ENTRY_POINT = "vllm.entrypoints.openai.api_server"
    MODEL_FLAG = "--model"
    BASE_ARGS = BASE_ARGS

    def default_python(self) -> Path:
        return vllm_python()

    def command(self) -> list[str]:
        python = self.python or self.default_python()
        return [
            str(python), "-m", self.ENTRY_POINT,
            self.MODEL_FLAG, str(self.model_dir),
            "--served-model-name", self.model_name,
            "--host", self.host,
            "--port", str(self.port),
            *self.BASE_ARGS,
            *self.extra_args,
        ]

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("VIRTUAL_ENV", None)
        env.update({
            "PYTHONUNBUFFERED": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        })
        env.update(self.env)
        return env

    def start(self) -> VLLMServer:
        """Spawns the server and waits until /health answers 200."""
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        if self.proc is not None:
            raise VLLMServerError("server already started")
        if not (self.model_dir / "config.json").exists():
            raise VLLMServerError(f"no model at {self.model_dir} (config.json missing)")
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(("$ " + " ".join(cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() reaches EngineCore and workers
                preexec_fn=_die_with_parent,
                env=self._environment(),
                cwd=REPO_ROOT,
            )
        atexit.register(self.stop)

    def wait_ready(self) -> None:
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self.stop()
                    raise VLLMServerError(self._failure(f"exited with code {code} during start-up"))
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    self.stop()
                    raise VLLMServerError(
                        self._failure(f"not ready after {self.startup_timeout:.0f} s")
                    )
                time.sleep(0.5)

    def _failure(self, what: str) -> str:
        return (f"vLLM server {self.model_name!r} on {self.url} {what}; log {self.log_path}, "
                f"last lines:\n{tail(self.log_path)}")

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the whole process group; SIGKILL what is left after `grace` seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        pgid = proc.pid  # start_new_session: the server leads its own group
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        # The leader may be gone while EngineCore or a worker lingers: wait for the group to empty.
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(pgid) or proc.poll() is None:
            _signal_group(pgid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"VLLMServer({self.model_name!r}, url={self.url!r}, log={str(self.log_path)!r})"


def _die_with_parent() -> None:
    """In the child: get SIGTERM if the test process dies without stopping us (Linux only).

    vLLM's API server then shuts its EngineCore and workers down itself.
    """
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a model dir with the CPU vLLM until Ctrl-C.")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--name", default="tiny-qwen3")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="extra vLLM args after --")
    args = parser.parse_args(argv)
    extra = [a for a in args.extra if a != "--"]
    server = VLLMServer(args.model, args.name, port=args.port, extra_args=extra)

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds the with-block, which stops the server group

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)
    with server:
        print(f"ready: {server.base_url} (model {server.model_name}); log {server.log_path}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
