#!/usr/bin/env bash
# The real Qwen chat templates, from a registry package, sha-pinned: llama-cpp-python 0.3.36's sdist vendors
# llama.cpp's models/templates/, which holds Qwen's own templates as the models ship them.
#
# Usage: bash tests/setup/templates.sh [DEST]        (DEST defaults to .cache/chat-templates)
#
# Writes, each checked against its sha256:
#   Qwen3-0.6B.jinja    the original Qwen3 template        (Qwen-Qwen3-0.6B.jinja in the sdist)
#   Qwen3.5-4B.jinja    Qwen's Qwen3.5 template            (Qwen3.5-4B.jinja)
#   Qwen3-Coder.jinja   Qwen3-Coder's template             (Qwen3-Coder.jinja)
#   Qwen3.6-27B.jinja   Qwen3.6-27B's chat_template.jinja: the Qwen3.5 text with its two changed lines (earlier
#                       reasoning kept under preserve_thinking; a string tool argument written as it is)
# Idempotent and offline once done: when every file is there with its sha, it exits at once without pip.
set -euo pipefail

dest=${1:-.cache/chat-templates}
readonly PACKAGE=llama-cpp-python==0.3.36
readonly SDIST_DIR=llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates
declare -A SHA=(
    [Qwen3-0.6B.jinja]=87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5
    [Qwen3.5-4B.jinja]=a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715
    [Qwen3-Coder.jinja]=d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392
    [Qwen3.6-27B.jinja]=e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259
)

all_there() {
    local name
    for name in "${!SHA[@]}"; do
        [ -f "$dest/$name" ] || return 1
        [ "$(sha256sum "$dest/$name" | cut -d' ' -f1)" = "${SHA[$name]}" ] || return 1
    done
}

if all_there; then
    exit 0
fi

py=$(command -v python3)
mkdir -p "$dest"
bash "$(dirname "$0")/disk.sh" "$dest" 200 "the chat templates (a 76 MB sdist)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "[templates] fetching $PACKAGE's sdist for the Qwen chat templates it vendors"
"$py" -m pip download -q --no-deps --no-binary :all: "$PACKAGE" -d "$work" 2>&1 | grep -v '^WARNING: Location' || true
sdist=$(ls "$work"/llama_cpp_python-0.3.36.tar.gz 2>/dev/null) \
    || { echo "[templates] error: pip could not download $PACKAGE's sdist; see pip's message above" >&2; exit 1; }
tar -xzf "$sdist" -C "$work" "$SDIST_DIR/Qwen-Qwen3-0.6B.jinja" "$SDIST_DIR/Qwen3.5-4B.jinja" "$SDIST_DIR/Qwen3-Coder.jinja"
cp "$work/$SDIST_DIR/Qwen-Qwen3-0.6B.jinja" "$dest/Qwen3-0.6B.jinja"
cp "$work/$SDIST_DIR/Qwen3.5-4B.jinja" "$dest/Qwen3.5-4B.jinja"
cp "$work/$SDIST_DIR/Qwen3-Coder.jinja" "$dest/Qwen3-Coder.jinja"
# Qwen3.6-27B's file is the Qwen3.5 text with two lines changed; each must be found exactly once.
"$py" - "$dest/Qwen3.5-4B.jinja" "$dest/Qwen3.6-27B.jinja" <<'PY'
import sys

text = open(sys.argv[1], encoding="utf-8").read()
changes = [
    ("{%- if loop.index0 > ns.last_query_index %}",
     "{%- if (preserve_thinking is defined and preserve_thinking is true) or (loop.index0 > ns.last_query_index) %}"),
    ("{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and "
     "args_value is not string) else args_value | string %}",
     "{%- set args_value = args_value | string if args_value is string else args_value | tojson | safe %}"),
]
for old, new in changes:
    if text.count(old) != 1:
        sys.exit(f"[templates] error: the Qwen3.5 template has {text.count(old)} copies of the line to change: {old}")
    text = text.replace(old, new)
with open(sys.argv[2], "w", encoding="utf-8", newline="") as out:
    out.write(text)
PY
for name in "${!SHA[@]}"; do
    got=$(sha256sum "$dest/$name" | cut -d' ' -f1)
    if [ "$got" != "${SHA[$name]}" ]; then
        echo "[templates] error: $dest/$name has sha256 $got, not the pinned ${SHA[$name]}" >&2
        rm -f "$dest/$name"
        exit 1
    fi
done
echo "[templates] the Qwen3, Qwen3.5, Qwen3-Coder and Qwen3.6 templates are in $dest"
