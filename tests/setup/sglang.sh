#!/usr/bin/env bash
# Install just enough of SGLang 0.5.23 into a venv for the tests to build SGLang's own argument parser
# (sglang.srt.server_args.ServerArgs.add_cli_args) on a machine without a GPU.
#
# Usage: bash tests/setup/sglang.sh PATH/TO/VENV/bin/python
#
# Why not `pip install sglang`: its dependency tree pulls CUDA torch and kernels (several GB). The parser
# only needs the modules that `sglang.srt.server_args` imports at load time, so the heavy packages go in
# with --no-deps (sglang, a CPU torch, triton, which sglang.srt.utils imports at module level) and the few
# pure-Python ones it touches are installed normally. Idempotent: when the parser already builds, it exits
# at once without calling pip.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: bash tests/setup/sglang.sh PATH/TO/VENV/bin/python" >&2
    exit 2
fi
py=$1
if [[ ! -x "$py" ]]; then
    echo "error: '$py' is not an executable Python; pass the venv's interpreter, e.g. .venv/bin/python" >&2
    exit 2
fi

readonly SGLANG_VERSION=0.5.23

probe() {
    "$py" -W ignore - "$SGLANG_VERSION" <<'PY' >/dev/null 2>&1
import argparse
import importlib.metadata
import sys

if importlib.metadata.version("sglang") != sys.argv[1]:
    sys.exit(1)
from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
parser.parse_args(["--model-path", "probe"])
PY
}

if probe; then
    echo "sglang $SGLANG_VERSION argument parser: already importable"
    exit 0
fi

started=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pip_install() {
    # pip's resolver report lists every dependency left out on purpose; show pip's output only on failure.
    if ! "$py" -m pip install --disable-pip-version-check "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "error: pip install $* failed (output above)" >&2
        exit 1
    fi
}
bash "$(dirname "${BASH_SOURCE[0]}")/disk.sh" "$(dirname "$py")" 2500 "SGLang $SGLANG_VERSION's argument parser"
# Pinned, without their declared dependencies (which name CUDA builds and GPU kernels).
pip_install --no-deps "sglang==$SGLANG_VERSION" "torch==2.13.0" "triton==3.8.0" "ipython==9.18.1"
# What those import at module level on the way to server_args; most are already in the project venv.
pip_install numpy pillow starlette msgspec pyzmq tqdm traitlets pygments pybase64 orjson psutil requests \
    packaging pydantic aiohttp typing_extensions

if ! probe; then
    echo "error: sglang $SGLANG_VERSION was installed but its argument parser still does not build;" >&2
    echo "run this to see the missing module, then add it to tests/setup/sglang.sh:" >&2
    echo "  $py -c 'import sglang.srt.server_args'" >&2
    exit 1
fi
echo "sglang $SGLANG_VERSION argument parser: installed in $((SECONDS - started))s"
