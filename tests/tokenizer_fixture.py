"""A tiny Qwen3-style tokenizer directory, built with `tokenizers` alone in about a second.

It is a byte-level BPE trained here on template fragments and pseudo-English, with Qwen3's special
tokens (<|endoftext|>, <|im_start|>, <|im_end|>) and its added non-special tokens (<think>, </think>,
<tool_call>, </tool_call>, <tool_response>, </tool_response>), next to a tokenizer_config.json that
carries the Qwen3-style chat template of tests/engines/qwen3_chat_template.jinja. Built once per test
session into a temporary directory (`tiny_tokenizer_dir()`).
"""

from __future__ import annotations

import atexit
import functools
import json
import random
import shutil
import tempfile
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# Qwen2's split regex, as transformers' `Qwen2Tokenizer` (models/qwen2/tokenization_qwen2.py) sets it.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
TEMPLATE_PATH = Path(__file__).resolve().parent / "engines" / "qwen3_chat_template.jinja"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
_WORDS = [
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "for", "was", "on", "are", "with", "as", "be",
    "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we",
    "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if",
    "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would",
    "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no",
    "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "its", "now", "find",
    "long", "down", "day", "did", "get", "come", "made", "may", "part", "weather", "Paris", "city", "unit",
    "celsius", "user", "assistant", "system", "tool", "function", "name", "arguments", "think", "reasoning",
    "answer", "sunny", "rain", "cloud", "temperature", "today", "tomorrow", "please", "help",
]


def _corpus() -> list[str]:
    rng = random.Random(7)
    lines = [TEMPLATE_PATH.read_text()]
    for _ in range(2000):
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14)))
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ",", ":\n", ".\n\n"]))
    for _ in range(200):
        lines.append(json.dumps({rng.choice(_WORDS): rng.choice([rng.randint(0, 999), rng.choice(_WORDS)])
                                 for _ in range(3)}))
    return lines


def build_tokenizer(out: Path) -> Path:
    """Write tokenizer.json and tokenizer_config.json (with the chat template) into `out`."""
    tok = Tokenizer(models.BPE())
    # Exactly the normalizer and pre-tokenizer that transformers' `Qwen2Tokenizer` builds for itself: both
    # trainers load a tokenizer with `AutoTokenizer`, which takes `tokenizer_class` from the config and
    # swaps in that class's own pre-tokenizer. Anything else here would tokenize differently there.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "model_max_length": 4096, "chat_template": TEMPLATE_PATH.read_text()}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return out


@functools.cache
def tiny_tokenizer_dir() -> Path:
    root = Path(tempfile.mkdtemp(prefix="tiny-qwen3-tokenizer-"))
    atexit.register(shutil.rmtree, root, True)
    return build_tokenizer(root / "tokenizer")


def load_tiny() -> Tokenizer:
    return Tokenizer.from_file(str(tiny_tokenizer_dir() / "tokenizer.json"))
