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
import json
import random
import shutil
import sys
import tempfile
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

CHAT_TEMPLATE = r"""{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is iterable and content is not mapping -%}
        {%- for part in content -%}
            {%- if part is mapping and part.type == 'text' -%}
                {{- part.text -}}
            {%- elif part is string -%}
                {{- part -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- set text = render_content(message.content) %}
    {%- if ns.multi_step_tool and message.role == "user" and not(text.startswith('<tool_response>') and text.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif message.reasoning is string %}
            {%- set reasoning_content = message.reasoning %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}
"""

_WORDS = (
    "the of and to in is you that it for was on are with as be this have from or one had by word but not "
    "what all were we when your can said there use an each which she do how their if will up other about "
    "out many then them these so some her would make like him into time has look two more write go see "
    "number no way could people my than first water been call who oil its now find long down day did get "
    "come made may part weather Paris city unit celsius user assistant system tool function name arguments "
    "think reasoning answer sunny rain cloud temperature today tomorrow please help question because"
).split()


def _corpus() -> list[str]:
    """Deterministic training text: template fragments, JSON, and pseudo-English sentences."""
    rng = random.Random(SEED)
    lines = [CHAT_TEMPLATE, json.dumps({"type": "function", "function": {"name": TOOL_NAME}})]
    for _ in range(3000):
        n = rng.randint(4, 16)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        lines.append(sentence.capitalize() + rng.choice([".", "?", "!", ",", ":\n", ".\n\n"]))
    for _ in range(300):
        lines.append(json.dumps({rng.choice(_WORDS): rng.randint(0, 9999) for _ in range(3)}))
    return lines


def build_tokenizer() -> Any:
    """Trains the byte-level BPE and wraps it as a transformers tokenizer with the chat template."""
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
        [AddedToken(t, special=False, normalized=False) for t in [*QWEN_ADDED, *SCRIPT_ADDED]]
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
    fast.chat_template = CHAT_TEMPLATE
    return fast


def script_token_ids(tokenizer: Any) -> dict[str, Any]:
    """The scripted completion as (token, id) pairs, and the successor map that drives lm_head."""
    newline_ids = tokenizer.encode("\n", add_special_tokens=False)
    if len(newline_ids) != 1:
        raise RuntimeError(f"'\\n' is not one token: {newline_ids}")

    def tid(token: str) -> int:
        ids = tokenizer.convert_tokens_to_ids([token])
        if ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise RuntimeError(f"token {token!r} is not in the vocabulary")
        return int(ids[0])

    completion = [
        *REASONING_PIECES, "</think>", "\n\n", *ANSWER_PIECES,
        "<tool_call>", *TOOL_JSON_PIECES, "</tool_call>", "<|im_end|>",
    ]
    completion_ids = [tid(t) for t in completion]
    chain = [newline_ids[0], *completion_ids]
    if len(set(chain)) != len(chain):
        raise RuntimeError("the script repeats a token: its successors would be ambiguous")
    return {"newline_id": newline_ids[0], "completion": completion, "completion_ids": completion_ids,
            "chain": chain}


def build_model(tokenizer: Any, variant: str) -> Any:
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
        torch_dtype="float32",
        **CONFIG,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(config)
    model.eval()
    if variant == "scripted":
        _script_weights(model, tokenizer)
    return model


def _script_weights(model: Any, tokenizer: Any) -> None:
    import torch

    info = script_token_ids(tokenizer)
    chain: list[int] = info["chain"]
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
        for cur, nxt in zip(chain[:-1], chain[1:], strict=True):
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
        tool_call_text = "<tool_call>" + "".join(TOOL_JSON_PIECES) + "</tool_call>"
        data.update({
            "reasoning": "".join(REASONING_PIECES),
            "answer": "".join(ANSWER_PIECES),
            "tool_name": TOOL_NAME,
            "tool_arguments": json.dumps(TOOL_ARGUMENTS, ensure_ascii=False),
            "tool_call_text": tool_call_text,
            # With no tools in the request the tool parser is off: the call stays in the content.
            "content_without_tools": "".join(ANSWER_PIECES) + tool_call_text,
            "completion_tokens": info["completion"],
            "completion_token_ids": info["completion_ids"],
            # reasoning pieces + </think>; the "\n\n" after </think> starts the content
            "reasoning_token_count": len(REASONING_PIECES) + 1,
        })
    (out / "script.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return data


def build(out: Path, variant: str) -> dict[str, Any]:
    """Writes the model directory atomically (build in a temp dir, then rename)."""
    import torch

    if variant not in ("random", "scripted"):
        raise ValueError(f"unknown variant {variant!r}")
    torch.set_num_threads(1)
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        tokenizer = build_tokenizer()
        model = build_model(tokenizer, variant)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp, save_jinja_files=False)
        gen = {"eos_token_id": [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                tokenizer.convert_tokens_to_ids("<|endoftext|>")],
               "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>")}
        (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
        data = write_script_json(tmp, tokenizer, variant)
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
