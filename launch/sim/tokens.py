"""Token ids, MTP figures and prefix-cache hits of a non-streaming reply, shaped as SGLang 0.5.23 gives them.

Shapes, from the SGLang 0.5.23 sources:
- `python/sglang/srt/entrypoints/openai/protocol.py`: `ChatCompletionRequest.return_token_ids`,
  `return_cached_tokens_details`, `return_spec_tokens_details`; `ChatCompletionResponseChoice.token_ids`
  and `.prompt_token_ids` (left out of the JSON when None); `ChatCompletionResponse.sglext` (`SglExt`:
  `cached_tokens_details` = `CachedTokensDetails{device, host}`, `spec_tokens_details` =
  `SpecTokensDetails{spec_accept_rate, spec_accept_length, spec_verify_ct, spec_num_correct_drafts,
  spec_num_proposed_drafts, spec_correct_drafts_histogram, ...}`, None fields dropped);
  `UsageInfo.prompt_tokens_details` = `PromptTokensDetails{cached_tokens}`.
- `python/sglang/srt/entrypoints/openai/serving_chat.py`: `return_token_ids` with `stream: true` is an
  HTTP 400; the non-streaming response fills `token_ids` from the output ids and `prompt_token_ids` from
  the input ids.
- `python/sglang/srt/entrypoints/openai/utils.py`: `spec_tokens_details_from_meta_info`,
  `process_cached_tokens_details_from_ret` (what the meta info becomes in `sglext`).

Ids need a tokenizer: `--tokenizer DIR` (a tokenizer.json next to a tokenizer_config.json whose
`chat_template` is the model's; the tests build a tiny one). The reply is rendered with that template
the way a model trained on it writes it: the prompt with the generation prompt, then the whole
conversation with the new assistant turn (reasoning in `reasoning_content`, tool-call arguments as
objects); the completion is the difference, ending with the end-of-turn token when the reply stopped by
itself, cut before it when `max_tokens` cut the reply, and only the raw reasoning when the cut came while
thinking. Without `--tokenizer` the server ignores `return_token_ids`, like a server that has no ids.

MTP is drawn per request from the reply's seed: each verify step of 3 draft tokens accepts 0-3 of them
plus the bonus token. The prefix-cache hit is a seeded share of the prompt, in pages of 16 tokens.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

DRAFT_TOKENS = 3  # --speculative-num-steps 3 --speculative-eagle-topk 1: 3 draft tokens per verify step
_ACCEPT_WEIGHTS = (0.2, 0.2, 0.25, 0.35)  # accepted drafts per step, 0..3


@dataclass(frozen=True)
class RenderedIds:
    prompt: list[int]
    completion: list[int]
    reasoning_tokens: int


class SimTokenizer:
    """A `tokenizers` tokenizer and its chat template (Jinja, rendered as Hugging Face does)."""

    def __init__(self, folder: Path) -> None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config = orjson.loads((folder / "tokenizer_config.json").read_bytes())
        eos = config.get("eos_token")
        self.eos = eos.get("content") if isinstance(eos, dict) else eos
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda value, **kw: json.dumps(value, ensure_ascii=False, **kw)
        self.template = env.from_string(config["chat_template"])

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _render(self, messages: list[Any], tools: Any, generation: bool, thinking: bool) -> str:
        return str(self.template.render(messages=messages, tools=tools or None, add_generation_prompt=generation,
                                        enable_thinking=thinking, bos_token="", eos_token=self.eos or ""))

    def ids(self, body: dict[str, Any], thinking: bool, message: dict[str, Any], finish: str) -> RenderedIds:
        """The prompt's ids and the reply's, the reply given as the response's `message`."""
        history = _template_messages(body.get("messages") or [])
        tools = body.get("tools")
        prompt = self._render(history, tools, True, thinking)
        reasoning = message.get("reasoning_content") or message.get("reasoning") or ""
        content = message.get("content") or ""
        calls = message.get("tool_calls") or []
        truncated = finish == "length"
        if truncated and thinking and not content and not calls:
            completion = reasoning
        else:
            turn: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                turn["reasoning_content"] = reasoning
            if calls:
                turn["tool_calls"] = calls
            full = self._render([*history, *_template_messages([turn])], tools, False, thinking)
            completion = full[len(prompt):]
            end = completion.rfind(self.eos) if self.eos else -1
            if end >= 0:
                completion = completion[:end] if truncated else completion[:end + len(self.eos or "")]
        return RenderedIds(self.encode(prompt), self.encode(completion), len(self.encode(reasoning)))


def _template_messages(messages: list[Any]) -> list[Any]:
    """As SGLang hands messages to the template: tool-call arguments parsed into objects where they parse."""
    out = orjson.loads(orjson.dumps(messages))
    for message in out:
        for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                try:
                    parsed = orjson.loads(function["arguments"])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(parsed, dict):
                    function["arguments"] = parsed
    return out  # type: ignore[no-any-return]


def spec_details(seed: int, completion_tokens: int) -> dict[str, Any]:
    """SGLang's `SpecTokensDetails` for one request: verify steps drawn until the reply's tokens are out."""
    rng = random.Random(seed ^ 0x5EC)
    histogram = [0] * (DRAFT_TOKENS + 1)
    produced = steps = 0
    while produced < completion_tokens:
        accepted = rng.choices(range(DRAFT_TOKENS + 1), weights=_ACCEPT_WEIGHTS)[0]
        accepted = min(accepted, completion_tokens - produced - 1)
        histogram[accepted] += 1
        produced += accepted + 1
        steps += 1
    correct = sum(j * n for j, n in enumerate(histogram))
    proposed = DRAFT_TOKENS * steps
    return {
        "spec_accept_rate": correct / proposed if proposed else 0.0,
        "spec_accept_length": completion_tokens / steps if steps else 0.0,
        "spec_verify_ct": steps,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_correct_drafts_histogram": histogram,
    }


def cached_tokens(seed: int, prompt_tokens: int) -> int:
    """A seeded prefix-cache hit, in whole pages of 16, never the whole prompt."""
    share = random.Random(seed ^ 0xCAC4E).random() * 0.9
    return int(prompt_tokens * share) // 16 * 16
