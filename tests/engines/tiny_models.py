"""Locates and builds the cached tiny Qwen3 model directories (main venv, stdlib only).

This module owns the cache under ``.cache/tiny-qwen3/{scripted,random,qwen36}``: it runs each variant's
builder (tests/engines/tiny_qwen3.py; tiny_qwen36.py for the Qwen3.6 one) with an engine venv's python, the
variants asked for in parallel, and rebuilds a variant only when what it is built from changed (its
builders and chat template: a digest stamped into the model dir).
The build holds a lock file beside the cache, so that two pytest-xdist workers (the vLLM tests and the
SGLang tests run on different workers) never build into the same directory at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from .vllm_server import REPO_ROOT, STARTUP_TIMEOUT_S, VLLMServerError

HERE = Path(__file__).resolve().parent
BUILDER = HERE / "tiny_qwen3.py"
BUILDER_36 = HERE / "tiny_qwen36.py"
SIM = REPO_ROOT / "simulator"
_QWEN3_INPUTS = (BUILDER, SIM / "qwen3_chat_template.jinja")
# What each variant is built from: the Qwen3.6 one reuses the Qwen3 builder's tokenizer and weights code.
BUILDER_INPUTS = {"scripted": _QWEN3_INPUTS, "random": _QWEN3_INPUTS,
                  "qwen36": (*_QWEN3_INPUTS, BUILDER_36, SIM / "qwen36_chat_template.jinja")}
MODEL_CACHE = REPO_ROOT / ".cache" / "tiny-qwen3"
VARIANTS = ("scripted", "random", "qwen36")
MODEL_NAMES = {"scripted": "tiny-qwen3-scripted", "random": "tiny-qwen3-random", "qwen36": "tiny-qwen36-scripted"}
BUILDERS = {"scripted": BUILDER, "random": BUILDER, "qwen36": BUILDER_36}
STAMP = "builder.sha256"


def builder_digest(variant: str) -> str:
    h = hashlib.sha256()
    for path in BUILDER_INPUTS[variant]:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _stamp(model_dir: Path) -> str | None:
    try:
        return (model_dir / STAMP).read_text().strip()
    except OSError:
        return None


def build_tiny_models(python: Path, root: Path = MODEL_CACHE,
                      variants: tuple[str, ...] = ("scripted", "random")) -> dict[str, Path]:
    """The variants' dirs (by default the two Qwen3 ones every engine test serves), building (in parallel)
    those that are missing or stale."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker's build finishes first; then nothing is stale
        return _build_stale(python, root, variants)


def _build_stale(python: Path, root: Path, variants: tuple[str, ...]) -> dict[str, Path]:
    dirs = {v: root / v for v in variants}
    stale = [v for v, d in dirs.items() if _stamp(d) != builder_digest(v)]
    procs = {
        v: subprocess.Popen(
            [str(python), str(BUILDERS[v]), "--out", str(dirs[v]), "--variant", v],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
        )
        for v in stale
    }
    for v, proc in procs.items():
        out, _ = proc.communicate(timeout=STARTUP_TIMEOUT_S)  # torch's import alone is slow on a loaded CPU
        if proc.returncode != 0:
            raise VLLMServerError(f"building the {v} tiny model failed:\n{out.decode(errors='replace')}")
        (dirs[v] / STAMP).write_text(builder_digest(v) + "\n")
    return dirs


def load_script(model_dir: Path) -> dict[str, Any]:
    """The scripted model's script.json: exact texts, token ids and expected parsed outcomes."""
    data: dict[str, Any] = json.loads((model_dir / "script.json").read_text())
    return data
