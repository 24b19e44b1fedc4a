"""Token ids, MTP figures and prefix-cache hits of a reply, shaped as SGLang 0.5.23 gives them.

Shapes, from the SGLang 0.5.23 sources (`python/sglang/srt/entrypoints/openai/`):
- `protocol.py`: `ChatCompletionResponseChoice.prompt_token_ids` and `.response_token_ids` (the answer to
  `return_token_ids`; left out of the JSON when None); `SglExt` (`cached_tokens_details` =
  `CachedTokensDetails{device, host}`, `spec_tokens_details` = `SpecTokensDetails` with all nine fields,
  `input_ids`, `output_ids` = one list per choice; None fields dropped).
- `serving_chat.py`: `return_token_ids` with `stream: true` is an HTTP 400; the streaming ids come in the
  `sglext` chunk after the finish chunk (`return_input_ids_in_sglext` / `return_output_ids_in_sglext`).
- `utils.py`: `spec_tokens_details_from_meta_info`, `process_cached_tokens_details_from_ret`.
- `managers/schedule_batch.py` `update_reasoning_tokens`: reasoning tokens count up to and including `</think>`.

Ids need a tokenizer: `--tokenizer DIR` (a tokenizer.json, and the chat template in chat_template.jinja, as
current transformers saves it, or in tokenizer_config.json's `chat_template`); the command line's default is
the tiny one of simulator.tiny_tokenizer.
The prompt is rendered from what SGLang gives the template (prompts.sglang_input). The reply is rendered the
way a model trained on the template writes it: the whole conversation with the new assistant turn (reasoning
in `reasoning_content`, tool-call arguments as objects); the completion is the difference, ending with the
end-of-turn token when the reply stopped by itself, cut before it when `max_tokens` cut the reply, and only
the raw reasoning when the cut came while thinking. Without a tokenizer there are no ids, and the server
ignores the fields that ask for them, like a server that has none.

MTP is drawn per request from the reply's seed: each verify step of 3 draft tokens accepts 0-3 of them
plus the bonus token. The prefix-cache hit is a seeded share of the prompt, in pages of 16 tokens.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from prompts import sglang_input as render

DRAFT_TOKENS = 3  # --speculative-num-steps 3 --speculative-eagle-topk 1: 3 draft tokens per verify step
_ACCEPT_WEIGHTS = (0.2, 0.2, 0.25, 0.35)  # accepted drafts per step, 0..3
# Tokens per verify step the draws above give on average (accepted drafts plus the bonus token): 2.75. The
# servers' live figure (`/v1/loads` speculative.accept_length, `sglang:spec_accept_length`) reports it, as
# SGLang's gauge reports completion tokens over verify steps; a reply's own figure differs only by its last,
# cut-short step.
MEAN_ACCEPT_LENGTH = 1.0 + sum(j * w for j, w in enumerate(_ACCEPT_WEIGHTS)) / sum(_ACCEPT_WEIGHTS)
THINK_END = "</think>"
_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")


class TokenizerDirError(ValueError):
    """The --tokenizer directory lacks a file it needs; the message names it."""


def chat_template(folder: Path, config: Mapping[str, Any]) -> str:
    """The chat template as transformers finds it: chat_template.jinja first, else tokenizer_config.json's
    `chat_template` (a string, or a list of named templates of which "default" is the one used)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        template = named.get("default")
    if not isinstance(template, str):
        raise TokenizerDirError(f"{folder}: no chat template (neither chat_template.jinja nor a chat_template "
                                "in tokenizer_config.json)")
    return template


def check_dir(folder: Path) -> None:
    """Raise TokenizerDirError unless `folder` has a tokenizer.json and a chat template."""
    if not (folder / "tokenizer.json").is_file():
        raise TokenizerDirError(f"{folder}: no tokenizer.json there")
    config_path = folder / "tokenizer_config.json"
    chat_template(folder, orjson.loads(config_path.read_bytes()) if config_path.is_file() else {})


@dataclass(frozen=True)
class CompletionIds:
    ids: list[int]
    reasoning_tokens: int


class SimTokenizer:
    """A `tokenizers` tokenizer and its chat template (Jinja, rendered as Hugging Face does)."""

    def __init__(self, folder: Path) -> None:
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        check_dir(folder)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config = orjson.loads(config_path.read_bytes()) if config_path.is_file() else {}
        # apply_chat_template passes the special tokens the tokenizer has to the template.
        self.special: dict[str, str] = {}
        for name in _SPECIAL_TOKENS:
            token = config.get(name)
            token = token.get("content") if isinstance(token, Mapping) else token
            if isinstance(token, str):
                self.special[name] = token
        # transformers' model_max_length; unset, it is a 1e30 sentinel, which SGLang's tokenize route replaces
        # by the context length (as does a value orjson could not write).
        limit = config.get("model_max_length")
        self.model_max_length = limit if isinstance(limit, int) and -(2**63) <= limit < 2**64 else None
        self.eos = self.special.get("eos_token")
        self.eos_id = self.tokenizer.token_to_id(self.eos) if self.eos else None
        self.think_end_id = self.tokenizer.token_to_id(THINK_END)
        source = chat_template(folder, config)
        self.content_format = render.content_format(source)
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda value, **kw: json.dumps(value, ensure_ascii=False, **kw)
        env.globals["raise_exception"] = _raise
        self.template = env.from_string(source)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def _render(self, messages: list[Any], tools: Any, generation: bool, kwargs: Mapping[str, Any]) -> str:
        return str(self.template.render(messages=messages, tools=tools, add_generation_prompt=generation,
                                        **{**self.special, **kwargs}))

    def _render_prompt(self, messages: list[Any], tools: Any, generation: bool, kwargs: Mapping[str, Any]) -> str:
        """As SGLang renders: on any failure once more with bare functions as tools (some templates want
        those), and a template error then is the client's (a 400)."""
        try:
            return self._render(messages, tools, generation, kwargs)
        except Exception:
            flat = [t.get("function", t) for t in tools] if tools else None
            try:
                return self._render(messages, flat, generation, kwargs)
            except Exception as exc:
                raise render.TemplateInputError(str(exc)) from exc

    @staticmethod
    def _kwargs(body: Mapping[str, Any]) -> dict[str, Any]:
        """The template's extra arguments: `reasoning_effort` when given, then `chat_template_kwargs`."""
        effort = body.get("reasoning_effort")
        kwargs = body.get("chat_template_kwargs")
        return {**({"reasoning_effort": effort} if effort is not None else {}),
                **(kwargs if isinstance(kwargs, Mapping) else {})}

    def prompt_ids(self, body: Mapping[str, Any], generation: bool | None = None,
                   add_special_tokens: bool = False) -> list[int]:
        """The request's prompt ids; raises render.TemplateInputError where SGLang answers 400.

        `generation` is the tokenize route's `add_generation_prompt`: None renders as for a chat completion;
        given, the messages are rendered as they are (a trailing assistant turn stays one) with that flag."""
        history = render.messages(body.get("messages") or [], self.content_format,
                                  last_assistant_as_user=generation is None)
        tools = render.tools(body.get("tools"), body.get("tool_choice"))
        text = self._render_prompt(history, tools, generation is not False, self._kwargs(body))
        return self.encode(text, add_special_tokens)

    def completion_ids(self, body: Mapping[str, Any], thinking: bool, message: Mapping[str, Any],
                       finish: str) -> CompletionIds:
        """The reply's ids, the reply given as the response's `message`."""
        history = render.messages(body.get("messages") or [], self.content_format)
        tools = render.tools(body.get("tools"), body.get("tool_choice"))
        kwargs = self._kwargs(body)
        prompt = self._render_prompt(history, tools, True, kwargs)
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
            full = self._render_prompt([*history, self._reply_turn(turn)], tools, False, kwargs)
            completion = full[len(prompt):]
            end = completion.rfind(self.eos) if self.eos else -1
            if end >= 0:
                completion = completion[:end] if truncated else completion[:end + len(self.eos or "")]
        ids = self.encode(completion)
        return CompletionIds(ids, self.reasoning_tokens(ids, thinking))

    def text_ids(self, text: str, thinking: bool, stopped: bool) -> CompletionIds:
        """The ids of a reply given as the text the model wrote (simulator.qwen36), with the end-of-turn
        token when it stopped by itself."""
        ids = self.encode(text)
        if stopped and self.eos_id is not None:
            ids.append(self.eos_id)
        return CompletionIds(ids, self.reasoning_tokens(ids, thinking))

    def _reply_turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        """The reply as an assistant turn. A reply cut by max_tokens inside a tool call has arguments that are
        not JSON yet: SGLang's output ids are simply what it generated, so they are rendered as the text they
        are rather than refused as a request's history would be (render.message)."""
        try:
            return render.message(turn, self.content_format)
        except render.TemplateInputError:
            rest = render.message({k: v for k, v in turn.items() if k != "tool_calls"}, self.content_format)
            return {**rest, "tool_calls": [render.tool_call(call) for call in turn.get("tool_calls") or []]}

    def reasoning_tokens(self, ids: list[int], thinking: bool) -> int:
        """SGLang's count: the tokens up to and including the first `</think>`, all of them while thinking."""
        if not thinking:
            return 0
        if self.think_end_id is not None and self.think_end_id in ids:
            return ids.index(self.think_end_id) + 1
        return len(ids)


def _raise(message: str) -> None:
    from jinja2 import TemplateError

    raise TemplateError(message)


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
    # The cap and block figures belong to adaptive drafting; a fixed EAGLE run reports them as zero/empty.
    return {
        "spec_accept_rate": correct / proposed if proposed else 0.0,
        "spec_accept_length": completion_tokens / steps if steps else 0.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": correct,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": steps,
        "spec_correct_drafts_histogram": histogram,
        "spec_cap_lens_histogram": [],
    }


def cached_tokens(seed: int, prompt_tokens: int) -> int:
    """A seeded prefix-cache hit, in whole pages of 16, never the whole prompt."""
    share = random.Random(seed ^ 0xCAC4E).random() * 0.9
    return int(prompt_tokens * share) // 16 * 16
