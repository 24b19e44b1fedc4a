#!/usr/bin/env bash
# Disk space for the test venvs: refuses an install that cannot fit, before pip fills the disk half way.
#
# Usage: bash tests/setup/disk.sh DIR MIB WHAT
#   DIR   where the install writes (its file system is the one checked)
#   MIB   what the install needs at its peak, in MiB: the venv plus the wheels pip unpacks on the way
#   WHAT  what is being installed, for the message
#
# Exit 0 when the file system has MIB free, else 1 with a message that says how much is free, how much is
# needed, and what to do. The figures the callers pass were measured on a fresh clone (docs/development.md).
set -euo pipefail

if [ $# -ne 3 ]; then
    echo "usage: bash tests/setup/disk.sh DIR MIB WHAT" >&2
    exit 2
fi
dir=$1 need_mib=$2 what=$3
# pip unpacks wheels under TMPDIR: when that is another file system, it needs room too.
tmp_dir=${TMPDIR:-/tmp}

free_mib() { df -Pm "$1" | awk 'NR == 2 { print $4 }'; }

for checked in "$dir" "$tmp_dir"; do
    free=$(free_mib "$checked")
    if [ "$free" -lt "$need_mib" ]; then
        printf '[disk] error: installing %s needs about %s MiB free; the file system of %s has %s MiB.\n' \
            "$what" "$need_mib" "$checked" "$free" >&2
        printf '[disk] free some space (old clones of this repo with their .venv* folders, pip caches), then run `make engines` again;\n' >&2
        printf '[disk] what is already installed stays, and each step that is done is skipped.\n' >&2
        exit 1
    fi
done
