"""The tiny test tokenizer loads the same through transformers' `AutoTokenizer` (how SpecForge and speculators
load a tokenizer) as through `tokenizers` (how the simulator, the export and the tests load it).

transformers takes `tokenizer_class: Qwen2Tokenizer` from the config and builds Qwen2's own normalizer and
pre-tokenizer around the vocabulary; a tiny tokenizer trained with another pre-tokenizer then splits text
differently there (the first one agreed on 56 of 629 texts, and no re-rendered row matched). Every
fidelity figure of the trainers' tests is only as true as this agreement.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.engines.trainers import SPECFORGE, trainer_python
from tests.tokenizer_fixture import TEMPLATE_PATH, load_tiny, tiny_tokenizer_dir

pytestmark = pytest.mark.trainers

SCRIPT = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.load(open(sys.argv[2]))
print(json.dumps({"class": type(tok).__name__,
                  "ids": [tok(text, add_special_tokens=False)["input_ids"] for text in texts]}))
"""


def _texts() -> list[str]:
    """Template fragments, prose, code, numbers, whitespace runs, and Unicode that NFC changes."""
    template = TEMPLATE_PATH.read_text()
    words = ["The user asks about the weather in Paris.", "Let me check.\n\n", "x = 12345 + 0.5e-3;",
             "def f(a, b):\n    return a+b  # sum", "   leading and trailing   ", "\n\n\n", "tabs\tand\tmore",
             "naïve café", "nai\u0308ve cafe\u0301", "日本語のテキスト", "emoji 👍🏽 ok", "don't can't I'm we'll",
             '{"city": "Paris", "unit": "celsius"}', "<think>\nreasoning\n</think>\n\nanswer<|im_end|>",
             "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "ALLCAPS and MiXeD", "1,234,567.89", "a\r\nb\rc"]
    lines = [line for line in template.splitlines() if line.strip()]
    return [*words, *lines, template, " ".join(words)]


def test_autotokenizer_and_tokenizers_agree(specforge_venv: Path, tmp_path: Path) -> None:
    texts = _texts()
    path = tmp_path / "texts.json"
    path.write_text(json.dumps(texts))
    done = subprocess.run([str(trainer_python(SPECFORGE)), "-c", SCRIPT, str(tiny_tokenizer_dir()), str(path)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["class"] == "Qwen2TokenizerFast" or answer["class"].startswith("Qwen2Tokenizer")
    ours = [load_tiny().encode(text, add_special_tokens=False).ids for text in texts]
    disagree = [text for text, a, b in zip(texts, answer["ids"], ours, strict=True) if a != b]
    assert disagree == [], f"{len(disagree)} of {len(texts)} texts tokenize differently"
