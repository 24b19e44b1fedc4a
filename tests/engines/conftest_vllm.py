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

import hashlib
import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .vllm_server import REPO_ROOT, SETUP_HINT, VLLMServer, VLLMServerError, vllm_python

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

BUILDER = Path(__file__).with_name("tiny_qwen3.py")
BUILDER_INPUTS = (BUILDER, BUILDER.with_name("qwen3_chat_template.jinja"))
MODEL_CACHE = REPO_ROOT / ".cache" / "tiny-qwen3"
LOG_DIR = REPO_ROOT / ".cache" / "vllm-logs"
VARIANTS = ("scripted", "random")
MODEL_NAMES = {"scripted": "tiny-qwen3-scripted", "random": "tiny-qwen3-random"}


def builder_digest() -> str:
    h = hashlib.sha256()
    for path in BUILDER_INPUTS:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_tiny_models(python: Path, root: Path = MODEL_CACHE) -> dict[str, Path]:
    """Builds both variants (in parallel) unless an up-to-date build is already there."""
    digest = builder_digest()
    dirs = {v: root / v for v in VARIANTS}
    stale = [v for v, d in dirs.items() if _stamp(d) != digest]
    procs = {
        v: subprocess.Popen(
            [str(python), str(BUILDER), "--out", str(dirs[v]), "--variant", v],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
        )
        for v in stale
    }
    for v, proc in procs.items():
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise VLLMServerError(f"building the {v} tiny model failed:\n{out.decode(errors='replace')}")
        (dirs[v] / "builder.sha256").write_text(digest + "\n")
    return dirs


def _stamp(model_dir: Path) -> str | None:
    try:
        return (model_dir / "builder.sha256").read_text().strip()
    except OSError:
        return None


@pytest.fixture(scope="session")
def vllm_venv_python() -> Path:
    try:
        return vllm_python()
    except VLLMServerError as exc:
        pytest.fail(f"{exc}. The vLLM tests need it; {SETUP_HINT}.", pytrace=False)


@pytest.fixture(scope="session")
def tiny_model_dirs(vllm_venv_python: Path) -> dict[str, Path]:
    return build_tiny_models(vllm_venv_python)


@pytest.fixture(scope="session")
def tiny_script(tiny_model_dirs: dict[str, Path]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tiny_model_dirs["scripted"] / "script.json").read_text())
    return data


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
            server.start()
        except VLLMServerError as exc:
            pytest.fail(str(exc), pytrace=False)
        return server

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
