"""Builds a tiny Qwen3ForCausalLM model directory that a real vLLM can serve on a CPU.

This module owns the test model: its tokenizer (a small byte-level BPE trained here, with Qwen3's
special and added tokens), its Qwen3-style chat template (tools, hermes tool calls, reasoning,
``enable_thinking``) and its weights, in two variants:

- ``random``: seeded random weights, for load tests (it emits arbitrary tokens).
- ``scripted``: weights that make generation ALWAYS emit one fixed token sequence, whatever the prompt
  and whatever the sampling settings::

      <reasoning>  </think>  \\n\\n  <answer>  <tool_call>  \\n{json}\\n  </tool_call>  <|im_end|>

  Attention and MLP outputs are zeroed (o_proj, down_proj), so the residual stream at each position
  is the current token's embedding; the script's tokens get orthonormal embeddings and lm_head maps
  each one to its successor with a large margin. The last token of the generation prompt ("\\n"
  after ``<think>``, or "\\n\\n" after ``</think>`` when thinking is off) leads into the script.

Next to the model it writes ``script.json``: the scripted texts and token ids, so tests that run in
another venv can assert exactly without importing torch. Runs under the vLLM venv's python:

    python tests/engines/tiny_qwen3.py --out DIR --variant random|scripted
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

BUILDER_VERSION = 1
SEED = 1234
VOCAB_SIZE = 640  # BPE vocab incl. special tokens; added tokens come on top

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# The script, as distinct tokens. Each must have one successor, so none may repeat.
REASONING_PIECES = ["The user asks about the weather in Paris.", " I should call get_weather.\n"]
ANSWER_PIECES = ["Let me check", " the weather for you."]
TOOL_NAME = "get_weather"
TOOL_ARGUMENTS = {"city": "Paris", "unit": "celsius"}
TOOL_JSON_PIECES = [
    '\n{"name": "get_weather", "arguments": ',
    '{"city": "Paris", ',
    '"unit": "celsius"}}\n',
]
# Added tokens that are not special, as in real Qwen3 (the parsers must see them in the text).
QWEN_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
SCRIPT_ADDED = ["\n\n", *REASONING_PIECES, *ANSWER_PIECES, *TOOL_JSON_PIECES]

CONFIG = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,  # vLLM's CPU attention needs >= 32
    "max_position_embeddings": 4096,
}
ALPHA = 12.0  # lm_head scale: the scripted successor's logit is ALPHA * sqrt(hidden), all others ~0

# Qwen3-style: tools in the system turn, hermes JSON tool calls, reasoning, enable_thinking.
CHAT_TEMPLATE = (Path(__file__).resolve().parents[2] / "simulator" / "qwen3_chat_template.jinja").read_text()

_WORDS = [
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "for", "was", "on", "are", "with",
    "as", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what",
    "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which",
    "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has",
    "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my",
    "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down",
    "day", "did", "get", "come", "made", "may", "part", "weather", "Paris", "city", "unit",
    "celsius", "user", "assistant", "system", "tool", "function", "name", "arguments", "think",
    "reasoning", "answer", "sunny", "rain", "cloud", "temperature", "today", "tomorrow", "please",
    "help", "question", "because",
]


def _corpus() -> list[str]:
    """Deterministic training text (independent of the chat template file): chat markup, JSON, and
    pseudo-English sentences."""
    rng = random.Random(SEED)
    lines = [
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n",
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n',
        json.dumps({"type": "function", "function": {"name": TOOL_NAME, "description": "Get the weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}),
    ]
    for _ in range(3000):
        n = rng.randint(4, 16)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ",", ":\n", ".\n\n"]))
    for _ in range(300):
        lines.append(json.dumps({rng.choice(_WORDS): rng.randint(0, 9999) for _ in range(3)}))
    return lines


def build_tokenizer(added: list[str] = SCRIPT_ADDED, template: str = CHAT_TEMPLATE) -> Any:
    """Trains the byte-level BPE and wraps it as a transformers tokenizer with the chat template; `added`:
    the script's own tokens (another script, another template: tests/engines/tiny_qwen36.py)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in [*QWEN_ADDED, *added]]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = template
    return fast


SCRIPT = [*REASONING_PIECES, "</think>", "\n\n", *ANSWER_PIECES, "<tool_call>", *TOOL_JSON_PIECES, "</tool_call>",
          "<|im_end|>"]


def script_token_ids(tokenizer: Any, completion: list[str] = SCRIPT) -> dict[str, Any]:
    """The scripted completion as (token, id) pairs, and the successor map that drives lm_head."""
    newline_ids = tokenizer.encode("\n", add_special_tokens=False)
    if len(newline_ids) != 1:
        raise RuntimeError(f"'\\n' is not one token: {newline_ids}")

    def tid(token: str) -> int:
        ids = tokenizer.convert_tokens_to_ids([token])
        if ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise RuntimeError(f"token {token!r} is not in the vocabulary")
        return int(ids[0])

    completion_ids = [tid(t) for t in completion]
    chain = [newline_ids[0], *completion_ids]
    if len(set(chain)) != len(chain):
        raise RuntimeError("the script repeats a token: its successors would be ambiguous")
    return {"newline_id": newline_ids[0], "completion": completion, "completion_ids": completion_ids,
            "chain": chain}


def build_model(tokenizer: Any, variant: str, chain: list[int] | None = None) -> Any:
    """Random weights, or (variant "scripted") weights that walk `chain` (default: this module's script)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(SEED)
    vocab = len(tokenizer)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_act="silu",
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        dtype="bfloat16",
        **CONFIG,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(config)
    model.eval()
    if variant != "random":
        _script_weights(model, chain or script_token_ids(tokenizer)["chain"])
    return model.to(torch.bfloat16)  # what vLLM runs on the CPU anyway


def _script_weights(model: Any, chain: list[int]) -> None:
    import torch

    hidden = model.config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.model.embed_tokens.weight
        # Orthonormal directions for the chain's tokens: no cross-talk between them.
        gen = torch.Generator().manual_seed(SEED)
        q, _ = torch.linalg.qr(torch.randn(hidden, len(chain), generator=gen))
        for k, token_id in enumerate(chain):
            emb[token_id] = q[:, k] * 0.5
        model.model.norm.weight.fill_(1.0)
        head = model.lm_head.weight
        head.zero_()
        for cur, nxt in itertools.pairwise(chain):
            direction = emb[cur] / emb[cur].norm()
            head[nxt] += ALPHA * direction


def write_script_json(out: Path, tokenizer: Any, variant: str) -> dict[str, Any]:
    info = script_token_ids(tokenizer)
    data: dict[str, Any] = {
        "variant": variant,
        "builder_version": BUILDER_VERSION,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "think_end_token_id": tokenizer.convert_tokens_to_ids("</think>"),
    }
    if variant == "scripted":
        reasoning = "".join(REASONING_PIECES)
        answer = "".join(ANSWER_PIECES)
        tool_call_text = "<tool_call>" + "".join(TOOL_JSON_PIECES) + "</tool_call>"
        tool_calls = [{"name": TOOL_NAME, "arguments": json.dumps(TOOL_ARGUMENTS, ensure_ascii=False)}]
        ids = info["completion_ids"]
        after_think = ids[len(REASONING_PIECES) + 2:]  # what thinking-off generation emits
        data.update({
            "reasoning": reasoning,
            "answer": answer,
            "tool_name": TOOL_NAME,
            "tool_arguments": tool_calls[0]["arguments"],
            "tool_call_text": tool_call_text,
            "completion_tokens": info["completion"],
            "completion_token_ids": ids,
            # What vLLM 0.32 (--reasoning-parser qwen3 --tool-call-parser hermes) returns, by request
            # kind. With thinking on, the "\n\n" after </think> is the start of the content; with no
            # tools in the request the tool parser is off and the call stays in the content text.
            "expected": {
                "thinking_on": {
                    "reasoning": reasoning, "content": "\n\n" + answer + tool_call_text,
                    "tool_calls": [], "finish_reason": "stop", "completion_token_ids": ids,
                    "reasoning_tokens": len(REASONING_PIECES),
                },
                "thinking_on_tools": {
                    "reasoning": reasoning, "content": "\n\n" + answer,
                    "tool_calls": tool_calls, "finish_reason": "tool_calls", "completion_token_ids": ids,
                    "reasoning_tokens": len(REASONING_PIECES),
                },
                "thinking_off": {
                    "reasoning": "", "content": answer + tool_call_text,
                    "tool_calls": [], "finish_reason": "stop", "completion_token_ids": after_think,
                    "reasoning_tokens": 0,
                },
                "thinking_off_tools": {
                    "reasoning": "", "content": answer,
                    "tool_calls": tool_calls, "finish_reason": "tool_calls",
                    "completion_token_ids": after_think, "reasoning_tokens": 0,
                },
            },
        })
    (out / "script.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return data


def build(out: Path, variant: str) -> dict[str, Any]:
    """Builds one variant's model directory."""
    import torch

    if variant not in ("random", "scripted"):
        raise ValueError(f"unknown variant {variant!r}")
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, variant)
    return save_model_dir(out, tokenizer, model, lambda tmp: write_script_json(tmp, tokenizer, variant))


def save_model_dir(out: Path, tokenizer: Any, model: Any,
                   write_script: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """Writes the model directory atomically (build in a temp dir, then rename); `write_script` writes its
    script.json into the temp dir and returns what it wrote."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp, save_jinja_files=False)
        gen = {"eos_token_id": [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                tokenizer.convert_tokens_to_ids("<|endoftext|>")],
               "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>")}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        data = write_script(tmp)
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="model directory to (re)create")
    parser.add_argument("--variant", choices=["random", "scripted"], required=True)
    args = parser.parse_args(argv)
    data = build(args.out, args.variant)
    print(json.dumps({"out": str(args.out), **{k: data[k] for k in ("variant", "vocab_size")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
