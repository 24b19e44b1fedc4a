"""A model's chat template and tokenizer, from its directory: render a conversation as the server does
(Jinja, as Hugging Face and SGLang render it) and count or encode it, with the lengths of a text's
prefixes' encodings read off its one encoding (what the export's template check needs for each loss-mask
span). Used by the export's re-render and fidelity check (client.export) and by `client.run --tokenizer
DIR`, which counts prompts for --train-window on servers that cannot count them. Needs the `[export]`
extra (tokenizers, jinja2): import this module only where those are wanted."""

from __future__ import annotations

import bisect
import copy
import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from client.core.errors import ConfigError, RenderError
from prompts.sglang_input import content_format, template_content
from prompts.tool_arguments import arguments_object

__all__ = ["SIM_TOKENIZER", "ChatTokenizer", "RenderError", "prompt_count", "template_messages", "tokenizer_path"]


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
    """`--tokenizer` as a path: `sim` names the simulated fleet's tokenizer (simulator.tiny_tokenizer, built
    on first use); a path that does not exist is a ConfigError that says what to give."""
    if path.exists():
        return path
    if str(path) == SIM_TOKENIZER:
        from simulator.api import TinyTokenizerError, tiny_tokenizer_dir

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
        self.template_text = template
        self._template = None
        self._added = _added_tokens(tokenizer)
        self._tails: dict[str, int] = {}
        # How SGLang hands content-part lists to this template: joined text, or text parts it loops over.
        self.content_format = content_format(template) if template is not None else "string"
        if template is not None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
            self._template = env.from_string(template)

    def __reduce__(self) -> tuple[type[ChatTokenizer], tuple[Any, ...]]:
        # For the export's worker processes: a compiled Jinja template does not pickle, its text does.
        return (ChatTokenizer, (self.tokenizer, self.template_text, self.eos, self.bos))

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

    def encode_prefixes(self, text: str, positions: Sequence[int]) -> tuple[list[int], list[int]]:
        """The ids of `text`, and for each position k in `positions` the length of `encode(text[:k])`, exactly,
        without encoding each prefix (what SpecForge does to map its loss-mask spans to tokens, and what made
        the export's template check cost a long row's text several times over).

        `tokenizers` cuts a text at every added token before anything else (normalizer, pre-tokenizer and
        model run on each piece between them on its own), so a prefix's ids are the whole text's ids up to
        the last added token that ends at or before k, then the ids of what lies between that token and k,
        encoded alone (a few characters: the newline after `<think>` or `<|im_end|>`). The added tokens are
        found in the text by their content and tied to the ids in order; when the two do not agree (or the
        tokenizer is one where this does not hold, `_cut_tokens`), each prefix is encoded whole."""
        ids = self.encode(text)
        cuts = self._cuts_in(text, ids)
        if cuts is None:
            return ids, [len(ids) if k >= len(text) else len(self.encode(text[:k])) for k in positions]
        ends = [end for end, _ in cuts]
        lengths = []
        for k in positions:
            at = bisect.bisect_right(ends, k) - 1
            if k >= len(text):
                lengths.append(len(ids))
            elif at < 0:
                lengths.append(len(self.encode(text[:k])))
            else:
                lengths.append(cuts[at][1] + self._tail(text[ends[at]:k]))
        return ids, lengths

    def encode_through(self, text: str, position: int) -> list[int] | None:
        """The first ids of `text`'s encoding: those of the text up to the end of the first added token that
        ends after `position` (encoded alone, they are where the whole text's begin: `encode_prefixes`); None
        when no added token ends after it, or the tokenizer is not one where this holds."""
        if self._added is None:
            return None
        end = next((match.end() for match in self._added.pattern.finditer(text, max(0, position - 64))
                    if match.end() > position), None)
        if end is None:
            return None
        ids = self.encode(text[:end])
        cuts = self._cuts_in(text[:end], ids)
        return ids if cuts and cuts[-1] == (end, len(ids)) else None

    def _cuts_in(self, text: str, ids: list[int]) -> list[tuple[int, int]] | None:
        """(character end, tokens up to and including it) of each added token of `text`, or None when the
        occurrences of the added tokens' contents in the text are not the added ids of `ids`, in order."""
        added = self._added
        if added is None:
            return None
        found = [(match.end(), added.ids[match.group()]) for match in added.pattern.finditer(text)]
        if sum(ids.count(token) for token in added.id_set) != len(found):
            return None
        cuts, index = [], -1
        for end, token in found:
            # The next of that id: with as many added ids in `ids` as occurrences in the text, taking each in
            # turn ties every occurrence to its id, or fails.
            try:
                index = ids.index(token, index + 1)
            except ValueError:
                return None
            if token in added.cuts:
                cuts.append((end, index + 1))
        return cuts

    def _tail(self, text: str) -> int:
        if not text:
            return 0
        known = self._tails.get(text)
        if known is None:
            known = len(self.encode(text))
            if len(text) <= 64 and len(self._tails) < 4096:  # the same few newlines, row after row
                self._tails[text] = known
        return known

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               add_generation_prompt: bool, kwargs: Mapping[str, Any] | None = None) -> str:
        """The conversation as text. `kwargs`: the request's `chat_template_kwargs` (enable_thinking,
        preserve_thinking, ...), handed to the template as its variables, as SGLang and Hugging Face's
        `apply_chat_template` hand them; None or {} leaves the template's defaults (thinking on)."""
        if self._template is None:
            raise RenderError("the tokenizer has no chat template (tokenizer_config.json chat_template or "
                              "chat_template.jinja); pass --chat-template FILE")
        try:
            return self._template.render({**(kwargs or {}), "messages": messages, "tools": tools or None,
                                          "add_generation_prompt": add_generation_prompt,
                                          "bos_token": self.bos or "", "eos_token": self.eos or ""})
        except TemplateError as exc:  # the template's own raise_exception, an undefined name, a sandbox refusal
            raise RenderError(f"the chat template failed: {exc}") from exc
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, ArithmeticError, RecursionError) as exc:
            # What a template's expression raises on data it does not expect: `|items` on a tool argument
            # that is not a JSON object, `'</think>' in content` on a None content. One conversation's
            # failure, named, never the caller's crash.
            raise RenderError(f"the chat template failed: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _AddedTokens:
    """A tokenizer's added tokens as `ChatTokenizer.encode_prefixes` finds them in a text: every content
    (longest first, as the tokenizer matches them), its id, and the ids at whose end a text splits."""

    pattern: re.Pattern[str]
    ids: dict[str, int]
    id_set: frozenset[int]
    cuts: frozenset[int]


def _added_tokens(tokenizer: Tokenizer) -> _AddedTokens | None:
    """None when a prefix's ids cannot be read off the whole text's: a pre-tokenizer that treats the text's
    first piece apart (Metaspace's `prepend_scheme: first`), or an added token whose content holds another's
    (then where one ends is not where the tokenizer cuts)."""
    if _first_piece_apart(json.loads(tokenizer.to_str()).get("pre_tokenizer")):
        return None
    added = {token: value for token, value in tokenizer.get_added_tokens_decoder().items() if value.content}
    contents = [value.content for value in added.values()]
    if not contents or len(set(contents)) != len(contents) or any(
            a != b and a in b for a in contents for b in contents):
        return None
    # A token that takes in the whitespace around it is no clean cut: what it takes depends on what follows.
    cuts = frozenset(token for token, value in added.items()
                     if not (value.lstrip or value.rstrip or value.single_word) and not value.content[-1].isspace())
    pattern = re.compile("|".join(re.escape(c) for c in sorted(contents, key=len, reverse=True)))
    return _AddedTokens(pattern, {value.content: token for token, value in added.items()}, frozenset(added), cuts)


def _first_piece_apart(node: object) -> bool:
    """A pre-tokenizer (or a sequence of them) that prepends to the text's first piece only."""
    if isinstance(node, dict):
        if node.get("type") == "Metaspace" and node.get("prepend_scheme", "always") == "first":
            return True
        return any(_first_piece_apart(value) for value in node.values())
    if isinstance(node, list):
        return any(_first_piece_apart(value) for value in node)
    return False


def template_messages(messages: list[dict[str, Any]], content_format: str = "string") -> list[dict[str, Any]]:
    """Messages as the server hands them to the template: a null content as "", content-part lists
    flattened as SGLang flattens them for a template of this content format (`prompts.sglang_input`),
    tool-call arguments parsed into objects (arguments that are not a JSON object are left as text, which
    a template may fail on: a RenderError)."""
    out = copy.deepcopy(messages)
    for message in out:
        if "content" in message and message["content"] is None:
            # SGLang (and vLLM) hand the template "" for a null content (an assistant turn of tool calls
            # only); Qwen3's template tests `'</think>' in content`, which fails on None.
            message["content"] = ""
        elif isinstance(message.get("content"), list):
            message["content"] = template_content(str(message.get("role", "")), message["content"], content_format)
        for call in message.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                parsed = arguments_object(function["arguments"])
                if parsed is not None:
                    function["arguments"] = parsed
    return out


def prompt_count(tok: ChatTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                 kwargs: Mapping[str, Any] | None = None) -> int:
    """The prompt's token count as the chat request renders it (with the generation prompt and the request's
    `chat_template_kwargs`); RenderError when the template cannot render it."""
    text = tok.render(template_messages(messages, tok.content_format), tools, add_generation_prompt=True,
                      kwargs=kwargs)
    return len(tok.encode(text))
