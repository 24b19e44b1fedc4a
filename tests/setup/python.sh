#!/usr/bin/env bash
# Print the Python interpreter a venv should be built with, as a user would pick it:
#   1. $PYTHON when set (it must run and be within the range, else this fails and says why);
#   2. else `python3` when it is within the range;
#   3. else the newest `python3.N` on PATH within the range.
# Exits 1 with a message naming what was tried when none fits. The choice goes to stdout, a note to stderr.
#
# Usage: bash tests/setup/python.sh MIN [MAX]        e.g. `3.11` (the project), `3.11 3.14` (vLLM's wheels)
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: bash tests/setup/python.sh MIN [MAX]   (versions as 3.N)" >&2
    exit 2
fi
min_minor=${1#3.}
max_minor=${2:-3.99}
max_minor=${max_minor#3.}
range="3.$min_minor or newer"
[[ $# -eq 2 ]] && range="3.$min_minor to 3.$max_minor"

# The interpreter's minor version, or nothing when it does not run (a missing binary, or a version
# manager's shim for a version that is not active).
minor_of() {
    "$1" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else -1)' 2>/dev/null || true
}

fits() {
    local minor
    minor=$(minor_of "$1")
    [[ -n "$minor" && "$minor" -ge "$min_minor" && "$minor" -le "$max_minor" ]]
}

choose() {
    # The real interpreter, not a version manager's shim, whose meaning changes with the directory.
    local exe
    exe=$("$1" -c 'import sys; print(sys.executable)')
    echo "python: using $1 = $exe ($("$exe" -c 'import platform; print(platform.python_version())'))" >&2
    echo "$exe"
    exit 0
}

if [[ -n "${PYTHON:-}" ]]; then
    fits "$PYTHON" && choose "$PYTHON"
    found=$(minor_of "$PYTHON")
    if [[ -z "$found" ]]; then
        echo "error: PYTHON=$PYTHON does not run" >&2
    else
        echo "error: PYTHON=$PYTHON is Python 3.$found; this needs Python $range" >&2
    fi
    exit 1
fi

fits python3 && choose python3
for (( minor = max_minor < 40 ? max_minor : 40; minor >= min_minor; minor-- )); do
    fits "python3.$minor" && choose "python3.$minor"
done

echo "error: no Python $range found (tried python3 and python3.N on PATH)." >&2
echo "Install one, or name it: PYTHON=/path/to/python3.X make ..." >&2
exit 1
