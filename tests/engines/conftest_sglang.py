"""Pytest fixtures for real SGLang 0.5.23 on the CPU: session-scoped servers of the tiny Qwen3.

This module owns how the test session gets its SGLang servers (tests/engines/sglang_server.py). Every
fixture here needs the `sglang_server` marker (tests/conftest.py checks it); under CI=true a missing venv
fails, elsewhere the test is skipped with the way out.

Fixtures (session-scoped; a server starts once, on first use, and is stopped at the end; each is ~3 GB):
- ``sglang_venv_python``: the SGLang venv's python (``bash tests/setup/sglang_server.sh``).
- ``sglang_model_dirs``: the tiny Qwen3 dirs (``.cache/tiny-qwen3/``, shared with the vLLM tests).
- ``sglang_script``: the scripted model's ``script.json``.
- ``sglang_pair``: two running servers of the scripted model, started together (balancing tests need
  two; every other test takes ``sglang_pair[0]``).
- ``sglang_scripted``: ``sglang_pair[0]``.
- ``sglang_random``: one server of the random-weights model, whose greedy replies are not scripted (the
  continuation tests: a reply cut and continued on `/generate` must equal the whole one, id for id).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .sglang_server import SGLangServer, SGLangServerError, sglang_python
from .start_time import server_start
from .tiny_models import MODEL_NAMES, build_tiny_models, load_script
from .vllm_server import REPO_ROOT, VLLMServerError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["sglang_model_dirs", "sglang_pair", "sglang_random", "sglang_script", "sglang_scripted",
           "sglang_venv_python"]

LOG_DIR = REPO_ROOT / ".cache" / "sglang-logs"


def _missing(message: str) -> Any:
    from tests.conftest import engine_missing  # the CI rule for every engine: fail in CI, else skip

    return engine_missing(message)


@pytest.fixture(scope="session")
def sglang_venv_python() -> Path:
    try:
        return sglang_python()
    except SGLangServerError as exc:
        message = str(exc)
    return _missing(message)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def sglang_model_dirs(sglang_venv_python: Path) -> dict[str, Path]:
    try:
        with server_start():
            return build_tiny_models(sglang_venv_python)
    except VLLMServerError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def sglang_script(sglang_model_dirs: dict[str, Path]) -> dict[str, Any]:
    return load_script(sglang_model_dirs["scripted"])


@pytest.fixture(scope="session")
def sglang_pair(sglang_venv_python: Path, sglang_model_dirs: dict[str, Path]) -> Iterator[list[SGLangServer]]:
    name = MODEL_NAMES["scripted"]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    servers = [SGLangServer(sglang_model_dirs["scripted"], name, python=sglang_venv_python,
                            log_path=LOG_DIR / f"{name}-{i}.log") for i in range(2)]
    try:
        with server_start():  # their own bound, not the time limit of the test that needs them first
            for server in servers:
                server.log_path.unlink(missing_ok=True)
                server.spawn()  # both start at once: the wait is for the slower one, not the sum
            for server in servers:
                server.wait_ready()
    except VLLMServerError as exc:  # wait_ready raises the base class
        message = str(exc)
    else:
        message = ""
    if message:
        for server in servers:
            server.stop()
        pytest.fail(message, pytrace=False)
    try:
        yield servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def sglang_scripted(sglang_pair: list[SGLangServer]) -> SGLangServer:
    return sglang_pair[0]


@pytest.fixture(scope="session")
def sglang_random(sglang_venv_python: Path, sglang_model_dirs: dict[str, Path]) -> Iterator[SGLangServer]:
    name = MODEL_NAMES["random"]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    server = SGLangServer(sglang_model_dirs["random"], name, python=sglang_venv_python,
                          log_path=LOG_DIR / f"{name}.log")
    server.log_path.unlink(missing_ok=True)
    try:
        server.spawn()
        server.wait_ready()
    except VLLMServerError as exc:  # wait_ready raises the base class
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()
