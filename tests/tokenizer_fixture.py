"""The tests' tiny Qwen-style tokenizer: the one the simulated fleet serves with (simulator.tiny_tokenizer,
built once per template and cached), under the names the tests import. Without an argument it carries the
simulator's default template (Qwen3.6's); `tiny_tokenizer_dir("qwen3")` is the one of the Qwen3 style, for
the tests whose server text is spelled out in that layout."""

from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer

from simulator.config import DEFAULT_CHAT_TEMPLATE, ChatTemplateName
from simulator.qwen36 import TEMPLATES
from simulator.tiny_tokenizer import ADDED, QWEN2_PRETOKENIZE_REGEX, SPECIAL, TEMPLATE_PATH, build_tokenizer
from simulator.tiny_tokenizer import tiny_tokenizer_dir as _built

__all__ = ["ADDED", "QWEN2_PRETOKENIZE_REGEX", "SPECIAL", "TEMPLATES", "TEMPLATE_PATH", "build_tokenizer",
           "load_tiny", "tiny_tokenizer_dir"]


@functools.cache
def tiny_tokenizer_dir(template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> Path:
    return _built(chat_template=template)


def load_tiny(template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> Tokenizer:
    return Tokenizer.from_file(str(tiny_tokenizer_dir(template) / "tokenizer.json"))
