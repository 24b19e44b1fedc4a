"""Runs one real SGLang 0.5.23 server on the CPU as a subprocess, for tests.

This module owns what differs from the vLLM server (tests/engines/vllm_server.py, whose life cycle it
reuses: free port on 127.0.0.1, own process group, log file, waiting for ``/health``, stopping the group):
the venv (``bash tests/setup/sglang_server.sh`` creates ``.venv-sglang``), the command line and the
environment that make SGLang serve a tiny Qwen3 on a CPU:

- ``SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native --disable-overlap-schedule``;
- ``--sleep-on-idle``: without it an idle server busy-polls a whole core;
- ``--max-total-tokens`` and ``--max-running-requests``: without them the CPU KV pool takes most of the
  machine's memory (20 GB seen); with them a server is about 3 GB;
- ``tests/engines/sgl_kernel_stub`` first on PYTHONPATH, for the one native kernel the CPU path calls.

    with SGLangServer(model_dir, "tiny-qwen3-scripted") as srv:
        httpx.post(f"{srv.url}/v1/chat/completions", json={...})

Run by hand: ``python tests/engines/sglang_server.py --model DIR [--name NAME] [-- EXTRA ARGS]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.engines.vllm_server import REPO_ROOT, VLLMServer, VLLMServerError

VENV_ENV_VAR = "REGEN_SWARM_SGLANG_VENV"
SETUP_HINT = "run `bash tests/setup/sglang_server.sh` to create it"
KERNEL_STUB = Path(__file__).resolve().parent / "sgl_kernel_stub"
CONTEXT_LENGTH = 2048  # as the vLLM servers' --max-model-len, so too_long tests read the same

# The flags every test server gets: a Qwen3 with reasoning and Qwen tool calls, on a CPU.
BASE_ARGS: tuple[str, ...] = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--disable-overlap-schedule",
    "--sleep-on-idle",
    "--context-length", str(CONTEXT_LENGTH),
    "--max-total-tokens", "16384",
    "--max-running-requests", "8",
    "--reasoning-parser", "qwen3",
    "--tool-call-parser", "qwen",
    "--enable-metrics",
)


# Qwen3.6 as its model card serves it: the XML tool-call parser (tests/test_sglang_qwen36.py, with the tiny
# model that writes what Qwen3.6 writes under Qwen3.6's own template).
QWEN36_ARGS: tuple[str, ...] = tuple("qwen3_coder" if a == "qwen" else a for a in BASE_ARGS)


class SGLangServerError(VLLMServerError):
    """The SGLang server could not be set up, did not become ready, or died; the message has the log tail."""


def sglang_venv() -> Path:
    """The SGLang venv: $REGEN_SWARM_SGLANG_VENV, else .venv-sglang in the repo root."""
    return Path(os.environ.get(VENV_ENV_VAR) or REPO_ROOT / ".venv-sglang")


def sglang_python(venv: Path | None = None) -> Path:
    """The SGLang venv's python; raises SGLangServerError (with the set-up hint) if it is missing."""
    python = (venv or sglang_venv()) / "bin" / "python"
    if not python.exists():
        raise SGLangServerError(f"the SGLang venv is missing ({python} not found): {SETUP_HINT}")
    return python


class SGLangServer(VLLMServer):
    """One SGLang server process group (scheduler and detokenizer are its children)."""

    ENTRY_POINT = "sglang.launch_server"
    MODEL_FLAG = "--model-path"
    BASE_ARGS = BASE_ARGS

    def default_python(self) -> Path:
        return sglang_python()

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        env["SGLANG_USE_CPU_ENGINE"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KERNEL_STUB), env.get("PYTHONPATH", "")]))
        env["PYTHONWARNINGS"] = "ignore"  # SGLang warns about every GPU-only backend on import
        return env

    def _failure(self, what: str) -> str:
        return super()._failure(what).replace("vLLM server", "SGLang server", 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model_name!r}, url={self.url!r}, log={str(self.log_path)!r})"


class SGLangQwen36Server(SGLangServer):
    """A server of the tiny Qwen3.6 model: `--tool-call-parser qwen3_coder --reasoning-parser qwen3`."""

    BASE_ARGS = QWEN36_ARGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a model dir with SGLang on the CPU until Ctrl-C.")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--name", default="tiny-qwen3")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="extra SGLang args after --")
    args = parser.parse_args(argv)
    server = SGLangServer(args.model, args.name, port=args.port, extra_args=[a for a in args.extra if a != "--"])

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGHUP, _exit)
    with server:
        print(f"ready: {server.base_url} (model {server.model_name}); log {server.log_path}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
