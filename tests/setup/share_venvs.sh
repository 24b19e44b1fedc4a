#!/usr/bin/env bash
# Shares the files the test venvs have in common (torch, triton, numpy, ...) as hard links, so that five venvs
# take about 11 GB instead of 15. Run after each install by `make engines`.
#
# Usage: bash tests/setup/share_venvs.sh
#
# Only files of 64 KiB or more whose content, mode and owner are the same are linked; pip never writes into an
# installed file (it removes and writes new ones), so a later install or upgrade in one venv leaves the others
# as they were. Uses util-linux's `hardlink`; without it, nothing is shared and a note says so.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shopt -s nullglob
venvs=("$REPO_ROOT"/.venv "$REPO_ROOT"/.venv-*)
shopt -u nullglob
existing=()
for venv in "${venvs[@]}"; do
    [ -d "$venv" ] && existing+=("$venv")
done
if [ ${#existing[@]} -lt 2 ]; then
    exit 0
fi
if ! command -v hardlink >/dev/null 2>&1; then
    echo "[share-venvs] note: util-linux's hardlink is not installed; the venvs keep their own copies" >&2
    exit 0
fi
# Sharing only saves space: a venv it cannot link (on another file system, say) keeps its copies, and the
# install goes on.
if ! report=$(hardlink --ignore-time --minimum-size 64K "${existing[@]}" 2>&1); then
    echo "[share-venvs] note: hardlink could not share every file; the rest keep their own copies:" >&2
    printf '%s\n' "$report" | grep -v -E '^(Mode|Method|Files|Linked|Compared|Saved|Duration):' | head -5 >&2
fi
saved=$(printf '%s\n' "$report" | awk -F': *' '/^Saved/ { print $2 }')
echo "[share-venvs] ${#existing[@]} venvs: ${saved:-nothing} shared" >&2
