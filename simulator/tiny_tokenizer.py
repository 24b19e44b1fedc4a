"""The tiny Qwen-style tokenizer the simulated fleet serves with, built here on first use and cached.

It is a byte-level BPE of 600 tokens trained on the chat template's own text and pseudo-English, with
Qwen2's real pre-tokenizer (the split regex and NFC that transformers' `Qwen2Tokenizer` sets, so that
`AutoTokenizer`, the trainers' way, loads it the same as `tokenizers` does), Qwen3's special tokens
(<|endoftext|>, <|im_start|>, <|im_end|>) and its added non-special ones (<think>, </think>, <tool_call>,
</tool_call>, <tool_response>, </tool_response>), next to a tokenizer_config.json that carries the chat
template of the model the simulator plays (simulator.qwen36.TEMPLATES): Qwen3.6's own
(`qwen36_chat_template.jinja`) or the Qwen3 style of `qwen3_chat_template.jinja`, both beside this file.

The build needs no network and is deterministic: the same inputs give the same files. It is cached under
the user's cache directory (`$REGEN_SWARM_CACHE`, else `$XDG_CACHE_HOME/regen-swarm`, else
`~/.cache/regen-swarm`) in `tiny-qwen-tokenizer/<digest>/`, where the digest covers everything the build
reads (this file, the template, the `tokenizers` version), so each template has its own; it is built once,
under a file lock, so that the servers of a fleet starting together build it once. With `tokenizers` and
`jinja2` (the `sim` and `export` extras).

    python -m simulator.tiny_tokenizer [--chat-template qwen3.6|qwen3]   print its directory (building it if
                                                                           needed; default: the simulator's)

`client.export RUN --tokenizer sim` exports a run of the simulated fleet with it; the tests use it too.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from simulator.config import DEFAULT_CHAT_TEMPLATE, ChatTemplateName
from simulator.qwen36 import TEMPLATES

# Qwen2's split regex, as transformers' `Qwen2Tokenizer` (models/qwen2/tokenization_qwen2.py) sets it.
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# The simulator's default template; `template` arguments below name another.
TEMPLATE_PATH = TEMPLATES[DEFAULT_CHAT_TEMPLATE]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
CACHE_NAME = "tiny-qwen-tokenizer"
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


class TinyTokenizerError(RuntimeError):
    """The tokenizer cannot be built here (a missing package, an unwritable cache); the message says what
    to do."""


def _corpus(template: Path) -> list[str]:
    rng = random.Random(7)
    lines = [template.read_text(encoding="utf-8")]
    for _ in range(2000):
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 14)))
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ",", ":\n", ".\n\n"]))
    for _ in range(200):
        lines.append(json.dumps({rng.choice(_WORDS): rng.choice([rng.randint(0, 999), rng.choice(_WORDS)])
                                 for _ in range(3)}))
    return lines


def build_tokenizer(out: Path, template: Path = TEMPLATE_PATH) -> Path:
    """Write tokenizer.json and tokenizer_config.json (with the chat template) into `out`; returns `out`."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

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
    tok.train_from_iterator(_corpus(template), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "model_max_length": 4096,
              "chat_template": template.read_text(encoding="utf-8")}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return out


def cache_root() -> Path:
    """Where the project caches what it builds: $REGEN_SWARM_CACHE, else $XDG_CACHE_HOME/regen-swarm, else
    ~/.cache/regen-swarm."""
    if os.environ.get("REGEN_SWARM_CACHE"):
        return Path(os.environ["REGEN_SWARM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "regen-swarm"


def digest(template: Path = TEMPLATE_PATH) -> str:
    """A digest of everything the build reads: this file, the chat template and the `tokenizers` version."""
    import tokenizers

    h = hashlib.sha256()
    for path in (Path(__file__).resolve(), template):
        h.update(path.read_bytes())
    h.update(tokenizers.__version__.encode())
    return h.hexdigest()[:16]


def _complete(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() and (folder / "tokenizer_config.json").is_file()


def tiny_tokenizer_dir(root: Path | None = None, chat_template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> Path:
    """The tokenizer's directory, with the chat template of `chat_template` (simulator.qwen36.TEMPLATES),
    built into the cache first if it is not there. TinyTokenizerError when `tokenizers` or `jinja2` is missing
    or the cache cannot be written."""
    template = TEMPLATES[chat_template]
    try:
        import jinja2  # noqa: F401  (the simulator renders the template with it)
        import tokenizers  # noqa: F401
    except ImportError as exc:
        raise TinyTokenizerError(f"the simulated fleet's tokenizer needs the `sim` extra ({exc}); install it with "
                                 "pip install -e '.[sim]', or serve without token ids (--tokenizer none)") from exc
    base = (root or cache_root()) / CACHE_NAME
    folder = base / digest(template)
    if _complete(folder):
        return folder
    try:
        base.mkdir(parents=True, exist_ok=True)
        with (base / ".build.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process's build finishes first, and is then found
            if not _complete(folder):
                part = Path(tempfile.mkdtemp(prefix=f"{folder.name}.part-", dir=base))
                try:
                    build_tokenizer(part, template)
                    shutil.rmtree(folder, ignore_errors=True)  # a directory left incomplete by hand
                    part.rename(folder)  # whole or absent: a reader never sees half a directory
                finally:
                    with contextlib.suppress(OSError):
                        shutil.rmtree(part)
    except OSError as exc:
        raise TinyTokenizerError(f"cannot build the simulated fleet's tokenizer in {base}: {exc.strerror or exc}; "
                                 "set REGEN_SWARM_CACHE to a writable directory") from exc
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.tiny_tokenizer",
                                     description="Print the directory of the simulated fleet's tiny tokenizer, "
                                                 "building it first if needed.")
    parser.add_argument("--chat-template", choices=list(TEMPLATES), default=DEFAULT_CHAT_TEMPLATE,
                        help="the chat template it carries, the model the simulator plays (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        print(tiny_tokenizer_dir(chat_template=args.chat_template))
    except TinyTokenizerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
