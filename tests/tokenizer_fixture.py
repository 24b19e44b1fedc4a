"""The tests' tiny Qwen3-style tokenizer: the one the simulated fleet serves with (launch.sim.tiny_tokenizer,
built once and cached), under the names the tests import."""

from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer

from launch.sim.tiny_tokenizer import ADDED, QWEN2_PRETOKENIZE_REGEX, SPECIAL, TEMPLATE_PATH, build_tokenizer
from launch.sim.tiny_tokenizer import tiny_tokenizer_dir as _built

__all__ = ["ADDED", "QWEN2_PRETOKENIZE_REGEX", "SPECIAL", "TEMPLATE_PATH", "build_tokenizer", "load_tiny",
           "tiny_tokenizer_dir"]


@functools.cache
def tiny_tokenizer_dir() -> Path:
    return _built()


def load_tiny() -> Tokenizer:
    return Tokenizer.from_file(str(tiny_tokenizer_dir() / "tokenizer.json"))
