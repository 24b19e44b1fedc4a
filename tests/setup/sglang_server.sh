#!/usr/bin/env bash
# Creates or updates the separate venv that serves real SGLang 0.5.23 on the CPU for the tests.
#
# Usage: bash tests/setup/sglang_server.sh [VENV_DIR]     (default: .venv-sglang in the repo root)
#
# What goes in: tests/setup/sglang-server-requirements.txt, every package pinned, with --no-deps. sglang's
# declared requirements name CUDA kernels and GPU-only packages (flashinfer, deep-gemm, cutlass-dsl, ...)
# that its CPU path never imports; the list holds what the CPU path does import, so the venv is about
# 6 GB and installs in a few minutes instead of 11 GB. torch and torchvision are the CUDA builds sglang
# pins (2.14.1 / 0.29.1); they run on the CPU.
#
# One piece is not real: PyPI has no CPU build of sgl_kernel (building it takes 30-60+ CPU minutes), and on
# a CPU without AMX the CPU engine calls one function of it. tests/engines/sgl_kernel_stub/ stands in for
# it (its docstring says how); tests/engines/sglang_server.py puts it on the server's PYTHONPATH.
#
# The interpreter: $SGLANG_SETUP_PYTHON if set, else python3 when it is 3.11, else python3.11 on PATH (the
# wheels pinned are cp311). Idempotent: a venv that already imports the pinned sglang is left as it is.
set -euo pipefail

SGLANG_VERSION="0.5.23"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-$REPO_ROOT/.venv-sglang}"
REQUIREMENTS="$REPO_ROOT/tests/setup/sglang-server-requirements.txt"
start=$(date +%s)

log() { printf '[sglang-setup] %s\n' "$*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    PYTHON=$(PYTHON="${SGLANG_SETUP_PYTHON:-}" bash "$REPO_ROOT/tests/setup/python.sh" 3.11 3.11)
    log "creating $VENV with $PYTHON"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

installed() {
    "$PY" - "$SGLANG_VERSION" <<'PY' >/dev/null 2>&1
import importlib.metadata as md
import sys

sys.exit(0 if md.version("sglang") == sys.argv[1] and md.version("torch").startswith("2.14.1") else 1)
PY
}

if installed; then
    log "sglang==$SGLANG_VERSION already installed in $VENV"
else
    bash "$REPO_ROOT/tests/setup/disk.sh" "$(dirname "$VENV")" 8500 "SGLang $SGLANG_VERSION's server venv"
    log "installing sglang==$SGLANG_VERSION and the packages its CPU path imports (a few minutes, about 6 GB)"
    out=$(mktemp)
    trap 'rm -f "$out"' EXIT
    if ! "$PY" -m pip install --disable-pip-version-check --quiet --no-deps -r "$REQUIREMENTS" >"$out" 2>&1; then
        grep -v "^WARNING: Location" "$out" >&2 || true
        log "error: pip install -r $REQUIREMENTS failed (output above)"
        exit 1
    fi
fi

log "checking that the server's modules import"
if ! PYTHONPATH="$REPO_ROOT/tests/engines/sgl_kernel_stub" SGLANG_USE_CPU_ENGINE=1 "$PY" -W ignore - <<'PY'
import importlib.metadata as md

import sglang.srt.entrypoints.http_server  # noqa: F401  the whole server stack, sgl_kernel stub included

print(f"[sglang-setup] sglang {md.version('sglang')}, torch {md.version('torch')}")
PY
then
    log "error: sglang $SGLANG_VERSION is installed but does not import; a package is missing from"
    log "$REQUIREMENTS (the traceback above names it)"
    exit 1
fi
log "done in $(( $(date +%s) - start )) s: $VENV"
