#!/usr/bin/env bash
# Creates or updates the two venvs that run the drafter trainers' own data code on the CPU for the tests:
#   .venv-specforge    specforge==0.2.0  (tests/setup/specforge-requirements.txt)
#   .venv-speculators  speculators==0.9.0, hs-connectors==0.9.0  (tests/setup/speculators-requirements.txt)
#
# Usage: bash tests/setup/trainers.sh [SPECFORGE_VENV [SPECULATORS_VENV]]   (defaults: in the repo root)
#
# What goes in: each requirements file, every package pinned, with --no-deps. The trainers declare their GPU
# stacks (SpecForge: sglang, a CUDA torch, wandb, ...; speculators: torchvision, torchaudio, ...) that their
# data paths never import; each list holds the trainer and what its data path does import, with torch==2.13.0
# (pip takes its CPU build here; asking for any other torch pulls a multi-GB CUDA build). About 1.4 GB per
# venv, almost all of it torch; a few minutes to install.
#
# The drivers that run in these venvs are tests/engines/specforge_driver.py and speculators_driver.py; each
# venv is checked by importing what its driver imports (`--check`).
#
# The interpreter: $TRAINERS_SETUP_PYTHON if set, else python3 when it is 3.11, else python3.11 on PATH (the
# wheels pinned are cp311). Idempotent: a venv whose installed list was made from the same requirements file
# (a stamp in the venv holds the file's hash) is left as it is.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SPECFORGE_VENV="${1:-$REPO_ROOT/.venv-specforge}"
SPECULATORS_VENV="${2:-$REPO_ROOT/.venv-speculators}"
TORCH_VERSION="2.13.0"
start=$(date +%s)

log() { printf '[trainers-setup] %s\n' "$*" >&2; }

# build NAME VENV REQUIREMENTS DRIVER: create the venv, install the list, check the driver's imports.
build() {
    local name=$1 venv=$2 requirements=$3 driver=$4
    local stamp="$venv/.trainers-requirements.sha256"
    local want
    want=$(sha256sum "$requirements" | cut -d' ' -f1)

    if [ ! -x "$venv/bin/python" ]; then
        local python
        python=$(PYTHON="${TRAINERS_SETUP_PYTHON:-}" bash "$REPO_ROOT/tests/setup/python.sh" 3.11 3.11)
        log "creating $venv with $python"
        "$python" -m venv "$venv"
    fi
    local py="$venv/bin/python"

    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        log "$name: $venv already has $(basename "$requirements")"
    else
        bash "$REPO_ROOT/tests/setup/disk.sh" "$(dirname "$venv")" 2500 "$name's venv"
        log "$name: installing $(basename "$requirements") into $venv (a few minutes, about 1.4 GB)"
        rm -f "$stamp"
        local out
        out=$(mktemp)
        if ! "$py" -m pip install --disable-pip-version-check --quiet --no-deps -r "$requirements" >"$out" 2>&1; then
            grep -v "^WARNING: Location" "$out" >&2 || true
            rm -f "$out"
            log "error: pip install -r $requirements failed (output above)"
            exit 1
        fi
        rm -f "$out"
    fi

    local torch
    torch=$("$py" -c 'import importlib.metadata as md; print(md.version("torch"))')
    case "$torch" in
        "$TORCH_VERSION"+cpu) ;;
        *) log "warning: $name has torch $torch, not the CPU build of $TORCH_VERSION: it works, but is several GB" ;;
    esac

    log "$name: checking that the driver's modules import"
    local versions
    if ! versions=$(HF_HUB_OFFLINE=1 "$py" -W ignore "$driver" --check); then
        log "error: $name is installed but does not import; a package is missing from"
        log "$requirements (the traceback above names it)"
        exit 1
    fi
    log "$name: $versions"
    echo "$want" >"$stamp"
}

build specforge "$SPECFORGE_VENV" "$REPO_ROOT/tests/setup/specforge-requirements.txt" \
    "$REPO_ROOT/tests/engines/specforge_driver.py"
build speculators "$SPECULATORS_VENV" "$REPO_ROOT/tests/setup/speculators-requirements.txt" \
    "$REPO_ROOT/tests/engines/speculators_driver.py"

log "done in $(( $(date +%s) - start )) s: $(du -sh "$SPECFORGE_VENV" | cut -f1) $SPECFORGE_VENV, $(du -sh "$SPECULATORS_VENV" | cut -f1) $SPECULATORS_VENV"
