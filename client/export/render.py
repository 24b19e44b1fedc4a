"""One result record -> its training tokens (prompt ids, completion ids), exactly or by re-rendering.

Exact: the record carries the server's `prompt_token_ids` / `completion_token_ids`; they are used as
they are. Re-rendered: the conversation is rendered with the tokenizer's own chat template (Jinja, as
Hugging Face and SGLang render it) twice, the prompt with the generation prompt and the prompt plus the
new assistant turn (reasoning in `reasoning_content`, tool calls with their arguments as objects, which
is how SGLang hands them to the template); the completion is the difference, cut after the end-of-turn
token where the model stopped. Each part is tokenized on its own, as the server saw the prompt and then
generated the completion. Re-rendering can drift from what the server did, so the caller checks the
counts against `usage` and never trusts a row whose counts differ. SGLang renders each tool with
`"defer_loading": null` added (`sglang_tool`); when the recorded tools miss `usage.prompt_tokens` and that
form gives it, the prompt is rendered with that form.
"""

from __future__ import annotations

import copy
import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from client.core.errors import ConfigError
from prompts.tool_arguments import arguments_object


class RenderError(ValueError):
    """This record cannot be rendered with this template; the message says why."""


@dataclass(frozen=True, slots=True)
class Tokens:
    prompt: list[int]
    completion: list[int]
    exact: bool
    tools: list[dict[str, Any]] | None = None  # re-rendered: the tools' form the prompt was rendered with


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Hugging Face's version: Jinja's own escapes <, > and & for HTML, which no chat template wants.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise TemplateError(message)


def _token_text(value: object) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class ChatTokenizer:
    """A `tokenizers` tokenizer plus the chat template and end-of-turn token of its model directory."""

    def __init__(self, tokenizer: Tokenizer, template: str | None, eos: str | None, bos: str | None) -> None:
        self.tokenizer = tokenizer
        self.eos = eos
        self.bos = bos
        self._template = None
        if template is not None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
            self._template = env.from_string(template)

    @classmethod
    def load(cls, path: Path, template_path: Path | None = None) -> ChatTokenizer:
        """From a model directory (tokenizer.json + tokenizer_config.json) or a tokenizer.json file."""
        folder = path if path.is_dir() else path.parent
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # the Rust side raises a bare Exception for every failure
            raise ConfigError(f"--tokenizer {file}: cannot load: {exc}") from exc
        config: dict[str, Any] = {}
        config_path = folder / "tokenizer_config.json"
        if config_path.is_file():
            try:
                config = orjson.loads(config_path.read_bytes())
            except orjson.JSONDecodeError as exc:
                raise ConfigError(f"{config_path}: not valid JSON: {exc}") from exc
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default") or next(iter(named.values()), None)
        jinja_file = template_path or folder / "chat_template.jinja"
        if jinja_file.is_file():
            template = jinja_file.read_text()
        elif template_path is not None:
            raise ConfigError(f"--chat-template {template_path}: no such file")
        return cls(tokenizer, template if isinstance(template, str) else None,
                   _token_text(config.get("eos_token")), _token_text(config.get("bos_token")))

    def encode(self, text: str) -> list[int]:
        # Templates write their own special tokens as text, so the post-processor must not add more.
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               add_generation_prompt: bool, enable_thinking: bool) -> str:
        if self._template is None:
            raise RenderError("the tokenizer has no chat template (tokenizer_config.json chat_template or "
                              "chat_template.jinja); pass --chat-template FILE")
        try:
            return self._template.render(messages=messages, tools=tools or None,
                                         add_generation_prompt=add_generation_prompt,
                                         enable_thinking=enable_thinking, bos_token=self.bos or "",
                                         eos_token=self.eos or "")
        except TemplateError as exc:
            raise RenderError(f"the chat template failed: {exc}") from exc


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the server hands them to the template: tool-call arguments parsed into objects."""
    out = copy.deepcopy(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                parsed = arguments_object(function["arguments"])
                if parsed is not None:
                    function["arguments"] = parsed
    return out


_SGLANG_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")


def sglang_tool(raw: dict[str, Any]) -> dict[str, Any]:
    """A tool as SGLang hands it to the template: `Tool.model_dump()` of its OpenAI layer
    (`python/sglang/srt/entrypoints/openai/protocol.py`): the function as the client wrote it (unknown keys
    dropped, `description: null` added when left out), then `"defer_loading": null` beside it. The same rule
    as the simulator's (`launch/sim/render.py`), which a test holds to the real server."""
    function = raw.get("function")
    function = function if isinstance(function, dict) else {}
    data: dict[str, Any] = {key: function.get(key) for key in _SGLANG_FUNCTION_FIELDS}
    if raw.get("defer_loading") is not None and data["defer_loading"] is None:
        data["defer_loading"] = raw["defer_loading"]
    for key in ("defer_loading", "strict"):
        if data[key] is None:
            del data[key]
    order = [*function, *(key for key in data if key not in function)]
    return {"type": raw.get("type", "function"), "function": {k: data[k] for k in order if k in data},
            "defer_loading": raw.get("defer_loading")}


def thinking_on(record: dict[str, Any]) -> bool:
    sampling = record.get("sampling")
    return not isinstance(sampling, dict) or sampling.get("enable_thinking") is not False


def assistant_turn(record: dict[str, Any]) -> dict[str, Any]:
    """The generated turn as an OpenAI assistant message: reasoning in `reasoning_content` (thinking on),
    tool calls as recorded (arguments as JSON strings)."""
    turn: dict[str, Any] = {"role": "assistant", "content": record.get("content") or ""}
    if thinking_on(record):
        turn["reasoning_content"] = record.get("reasoning") or ""
    if record.get("tool_calls"):
        turn["tool_calls"] = record["tool_calls"]
    return turn


def has_exact_ids(record: dict[str, Any]) -> bool:
    """True when the record carries the server's own prompt and completion ids (used as they are)."""
    return isinstance(record.get("prompt_token_ids"), list) and isinstance(record.get("completion_token_ids"), list)


def render_record(record: dict[str, Any], tok: ChatTokenizer) -> Tokens:
    """The record's prompt and completion ids: exact when the server sent them, else re-rendered."""
    if has_exact_ids(record):
        return Tokens(record["prompt_token_ids"], record["completion_token_ids"], exact=True)
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RenderError("the record has no messages")
    thinking = thinking_on(record)
    history = template_messages(messages)
    tools, prompt, prompt_ids = _served_prompt(record, tok, history, thinking)
    turn = assistant_turn(record)
    truncated = record.get("finish_reason") == "length"
    if truncated and thinking and not turn["content"] and not turn.get("tool_calls"):
        # Cut off while thinking: the output is raw reasoning; no </think> was ever written.
        return Tokens(prompt_ids, tok.encode(turn["reasoning_content"]), exact=False, tools=tools)
    full = tok.render([*history, *template_messages([turn])], tools, add_generation_prompt=False,
                      enable_thinking=thinking)
    if not full.startswith(prompt):
        raise RenderError("the template does not render the prompt as a prefix of the whole conversation")
    completion = full[len(prompt):]
    if tok.eos:
        end = completion.rfind(tok.eos)
        if end >= 0:
            # The template closes the turn with a newline after the end token; the model stopped at it.
            completion = completion[:end] if truncated else completion[:end + len(tok.eos)]
    return Tokens(prompt_ids, tok.encode(completion), exact=False, tools=tools)


def _served_prompt(record: dict[str, Any], tok: ChatTokenizer, history: list[dict[str, Any]],
                   thinking: bool) -> tuple[list[dict[str, Any]] | None, str, list[int]]:
    """(tools, prompt text, prompt ids) as the server most likely rendered them: the tools as recorded,
    unless their count differs from usage.prompt_tokens and SGLang's form (`sglang_tool`) gives it."""
    recorded = record.get("tools") or None
    prompt = tok.render(history, recorded, add_generation_prompt=True, enable_thinking=thinking)
    ids = tok.encode(prompt)
    usage = record.get("usage")
    expected = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if recorded and isinstance(expected, int) and expected != len(ids):
        sglang = [sglang_tool(t) if isinstance(t, dict) else t for t in recorded]
        other = tok.render(history, sglang, add_generation_prompt=True, enable_thinking=thinking)
        other_ids = tok.encode(other)
        if len(other_ids) == expected:
            return sglang, other, other_ids
    return recorded, prompt, ids
