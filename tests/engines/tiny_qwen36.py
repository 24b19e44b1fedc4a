"""Builds the tiny scripted model that writes what Qwen3.6 writes, under Qwen3.6's own chat template.

This module owns the ``qwen36`` variant of the tests' tiny model (the weights' trick and the tokenizer's
training are tests/engines/tiny_qwen3.py's): its tokenizer carries the real Qwen3.6-27B template (the
replica held byte for byte to the registry file, simulator/qwen36_chat_template.jinja), and its weights
ALWAYS emit Qwen3.6's own shape of a reply, whatever the prompt and the sampling::

    <reasoning>\\n</think>\\n\\n<answer>\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nParis
    \\n</parameter>\\n<parameter=unit>\\ncelsius\\n</parameter>\\n</function>\\n</tool_call><|im_end|>

Each piece is one added token, and the pieces are cut so that the template's own rendering of what
SGLang's parsers make of the reply (reasoning and content trimmed, the call written back as XML) is the
same text, hence the same ids: a real random model would not write a valid call, and a reply the template
cannot render back is not what the export must prove. No piece repeats (each token has one successor):
the "\\n" before ``</think>`` ends the last reasoning piece, the "\\n\\n" before the call ends the answer.

Next to the model it writes ``script.json`` (texts and ids, for tests in other venvs). Runs under the
SGLang or vLLM venv's python:

    python tests/engines/tiny_qwen36.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import tiny_qwen3  # this script's own folder is on sys.path when it is run as a script

VARIANT = "qwen36"
TEMPLATE = Path(__file__).resolve().parents[2] / "simulator" / "qwen36_chat_template.jinja"
REASONING_PIECES = tiny_qwen3.REASONING_PIECES  # the last ends with the "\n" the template puts before </think>
ANSWER_PIECES = ["Let me check", " the weather for you.\n\n"]
TOOL_NAME = "get_weather"
TOOL_ARGUMENTS = {"city": "Paris", "unit": "celsius"}
CALL_PIECES = [
    "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
    "<parameter=unit>\ncelsius\n</parameter>\n</function>\n",
]
ADDED = ["\n\n", *REASONING_PIECES, *ANSWER_PIECES, *CALL_PIECES]
SCRIPT = [*REASONING_PIECES, "</think>", "\n\n", *ANSWER_PIECES, "<tool_call>", *CALL_PIECES, "</tool_call>",
          "<|im_end|>"]


def write_script_json(out: Path, tokenizer: Any) -> dict[str, Any]:
    info = tiny_qwen3.script_token_ids(tokenizer, SCRIPT)
    ids: list[int] = info["completion_ids"]
    text = "".join(SCRIPT[:-1])
    # The script's text encodes to the script's ids: what the template renders back re-encodes the same.
    if tokenizer.encode(text, add_special_tokens=False) != ids[:-1]:
        raise RuntimeError("the script's text does not encode to its own ids")
    data: dict[str, Any] = {
        "variant": VARIANT,
        "builder_version": tiny_qwen3.BUILDER_VERSION,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "think_end_token_id": tokenizer.convert_tokens_to_ids("</think>"),
        "reasoning": "".join(REASONING_PIECES),
        "answer": "".join(ANSWER_PIECES),
        "tool_name": TOOL_NAME,
        "tool_arguments": TOOL_ARGUMENTS,
        "tool_call_text": "<tool_call>" + "".join(CALL_PIECES) + "</tool_call>",
        "completion_tokens": SCRIPT,
        "completion_token_ids": ids,
        "after_think_token_ids": ids[len(REASONING_PIECES) + 2:],  # what thinking-off generation emits
    }
    (out / "script.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return data


def build(out: Path) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    tokenizer = tiny_qwen3.build_tokenizer(ADDED, TEMPLATE.read_text(encoding="utf-8"))
    chain = tiny_qwen3.script_token_ids(tokenizer, SCRIPT)["chain"]
    model = tiny_qwen3.build_model(tokenizer, VARIANT, chain)
    return tiny_qwen3.save_model_dir(out, tokenizer, model, lambda tmp: write_script_json(tmp, tokenizer))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="model directory to (re)create")
    parser.add_argument("--variant", choices=[VARIANT], default=VARIANT)
    args = parser.parse_args(argv)
    data = build(args.out)
    print(json.dumps({"out": str(args.out), **{k: data[k] for k in ("variant", "vocab_size")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
