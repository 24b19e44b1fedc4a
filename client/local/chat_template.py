"""A model's chat template and tokenizer, from its directory: render a conversation as the server does
(Jinja, as Hugging Face and SGLang render it) and count or encode it. Used by the export's re-render and
fidelity check (client.export) and by `client.run --tokenizer DIR`, which counts prompts for
--train-window on servers that cannot count them. Needs the `[export]` extra (tokenizers, jinja2): import
this module only where those are wanted."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

import orjson
from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from client.core.errors import ConfigError, InputError
from prompts.sglang_input import content_format, template_content
from prompts.tool_arguments import arguments_object


class RenderError(InputError, ValueError):
    """This record cannot be rendered with this template; the message says why."""


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


SIM_TOKENIZER = "sim"


def tokenizer_path(path: Path) -> Path:
    """`--tokenizer` as a path: `sim` names the simulated fleet's tokenizer (launch.sim.tiny_tokenizer, built
    on first use); a path that does not exist is a ConfigError that says what to give."""
    if path.exists():
        return path
    if str(path) == SIM_TOKENIZER:
        from launch.sim.tiny_tokenizer import TinyTokenizerError, tiny_tokenizer_dir

        try:
            return tiny_tokenizer_dir()
        except TinyTokenizerError as exc:
            raise ConfigError(f"--tokenizer sim: {exc}") from exc
    raise ConfigError(f"--tokenizer {path}: no such file or directory. Give the served model's tokenizer: a folder "
                      "with its tokenizer.json and tokenizer_config.json (a model name is not read from the network; "
                      "see docs/export.md), or `sim` for a run of the simulated fleet")


class ChatTokenizer:
    """A `tokenizers` tokenizer plus the chat template and end-of-turn token of its model directory."""

    def __init__(self, tokenizer: Tokenizer, template: str | None, eos: str | None, bos: str | None) -> None:
        self.tokenizer = tokenizer
        self.eos = eos
        self.bos = bos
        self._template = None
        # How SGLang hands content-part lists to this template: joined text, or text parts it loops over.
        self.content_format = content_format(template) if template is not None else "string"
        if template is not None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
            self._template = env.from_string(template)

    @classmethod
    def load(cls, path: Path, template_path: Path | None = None) -> ChatTokenizer:
        """From a model directory (tokenizer.json + tokenizer_config.json) or a tokenizer.json file; `sim`
        (when no such path exists) is the simulated fleet's tiny tokenizer."""
        path = tokenizer_path(path)
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


def template_messages(messages: list[dict[str, Any]], content_format: str = "string") -> list[dict[str, Any]]:
    """Messages as the server hands them to the template: content-part lists flattened as SGLang flattens
    them for a template of this content format (`prompts.sglang_input`), tool-call arguments parsed into
    objects."""
    out = copy.deepcopy(messages)
    for message in out:
        if isinstance(message.get("content"), list):
            message["content"] = template_content(str(message.get("role", "")), message["content"], content_format)
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                parsed = arguments_object(function["arguments"])
                if parsed is not None:
                    function["arguments"] = parsed
    return out


def prompt_count(tok: ChatTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                 enable_thinking: bool) -> int:
    """The prompt's token count as the chat request renders it (with the generation prompt)."""
    text = tok.render(template_messages(messages, tok.content_format), tools, add_generation_prompt=True,
                      enable_thinking=enable_thinking)
    return len(tok.encode(text))
