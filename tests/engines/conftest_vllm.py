"""Pytest fixtures for the real CPU vLLM: tiny Qwen3 model dirs and session-scoped servers.

This module owns how the test session gets its vLLM servers. Load it from tests/conftest.py with
``pytest_plugins = ["tests.engines.conftest_vllm"]`` (or ``from tests.engines.conftest_vllm import *``).

Fixtures (all session-scoped; each server starts once, on first use, and is stopped at the end):
- ``vllm_venv_python``: the vLLM venv's python. FAILS (never skips) if ``bash tests/setup/vllm.sh``
  has not been run.
- ``tiny_model_dirs``: ``{"scripted": Path, "random": Path}``, built into ``.cache/tiny-qwen3/`` and
  rebuilt only when tiny_qwen3.py or its chat template changes.
- ``tiny_script``: the scripted model's ``script.json`` (exact reasoning, answer, tool call, token ids
  and the parsed outcome vLLM gives for each kind of request).
- ``vllm_scripted`` / ``vllm_random``: running ``VLLMServer`` objects (``.url``, ``.base_url``,
  ``.model_name``, ``.log_path``).
- ``vllm_server_factory``: ``factory(variant, extra_args=[...], name=None)`` starts another server
  (e.g. with ``--max-num-seqs 2``); all of them are stopped at session end.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .start_time import server_start
from .tiny_models import MODEL_NAMES, build_tiny_models, load_script
from .vllm_server import REPO_ROOT, VLLMServer, VLLMServerError, vllm_python

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = [
    "tiny_model_dirs",
    "tiny_script",
    "vllm_random",
    "vllm_scripted",
    "vllm_server_factory",
    "vllm_venv_python",
]

LOG_DIR = REPO_ROOT / ".cache" / "vllm-logs"


@pytest.fixture(scope="session")
def vllm_venv_python() -> Path:
    try:
        return vllm_python()
    except VLLMServerError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)  # outside the except: no chained traceback


@pytest.fixture(scope="session")
def tiny_model_dirs(vllm_venv_python: Path) -> dict[str, Path]:
    try:
        with server_start():
            return build_tiny_models(vllm_venv_python)
    except VLLMServerError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def tiny_script(tiny_model_dirs: dict[str, Path]) -> dict[str, Any]:
    return load_script(tiny_model_dirs["scripted"])


@pytest.fixture(scope="session")
def vllm_server_factory(
    vllm_venv_python: Path, tiny_model_dirs: dict[str, Path]
) -> Iterator[Callable[..., VLLMServer]]:
    servers: list[VLLMServer] = []

    def factory(
        variant: str = "scripted", extra_args: Sequence[str] = (), name: str | None = None
    ) -> VLLMServer:
        name = name or MODEL_NAMES[variant]
        server = VLLMServer(
            tiny_model_dirs[variant], name, extra_args=extra_args, python=vllm_venv_python,
            log_path=LOG_DIR / f"{name}-{len(servers)}.log",
        )
        servers.append(server)
        server.log_path.unlink(missing_ok=True)
        try:
            with server_start():  # its own bound, not the test's time limit
                return server.start()
        except VLLMServerError as exc:
            message = str(exc)
        pytest.fail(message, pytrace=False)

    try:
        yield factory
    finally:
        for server in reversed(servers):
            server.stop()


@pytest.fixture(scope="session")
def vllm_scripted(vllm_server_factory: Callable[..., VLLMServer]) -> VLLMServer:
    return vllm_server_factory("scripted")


@pytest.fixture(scope="session")
def vllm_random(vllm_server_factory: Callable[..., VLLMServer]) -> VLLMServer:
    return vllm_server_factory("random")
