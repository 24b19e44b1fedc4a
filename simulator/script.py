"""The deterministic script of one reply: how long it thinks, what it says, which tools it calls.

Everything here is a pure function of the request content (messages, tools, thinking switch) and the
server seed, hashed with blake2b, so the same request always gets the same reply on any simulated server,
and a shorter `max_tokens` gives a prefix of the longer reply. One "token" is one short word piece.
Token positions are laid out as: reasoning, then content, then each tool call (one token for the call's
markup, then one token per argument fragment).

Two failure shapes of real thinking models can be asked for, both drawn per prompt from the content and
the seed (a draw of their own, so the rest of a reply is the same whatever their rates, and a prompt that
loops at one --loop-rate loops at every larger one):
- a loop (`--loop-rate`): the reply starts as usual, then repeats one passage (an opener such as
  "\n\nWait," and 11-119 more word pieces) until max_tokens or --max-gen-tokens cut it, thinking never
  closed (content, without thinking), no tool calls: Qwen3's repetition failure;
- a heavy thinking tail (`--think-tail-rate`): the reasoning length is drawn from a Pareto distribution
  that starts at --mean-tokens with exponent --think-tail-alpha (1.2: a median of 1.8x and a mean of 6x
  --mean-tokens before the cap), so long thinkers reach the cap far more often than the body's tail does.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import orjson

from simulator import qwen36
from simulator.config import ChatTemplateName, SimConfig
from simulator.text import WORDS, TextSource

# Heavy-tailed length model: a lognormal body holds most replies, a Pareto tail holds the long thinkers.
# The constants keep the mixture mean close to `mean_tokens` before the context cap trims the tail.
_TAIL_SHARE = 0.1
_BODY_SIGMA = 0.9
_BODY_MEAN_SHARE = 0.7
_TAIL_ALPHA = 1.6
_NO_THINK_SHARE = 0.35
# A loop repeats one passage of this many word pieces (its opener included); it sets in after this share of
# the reply's own length.
_LOOP_BLOCK = (12, 120)
_LOOP_ONSET = (0.05, 0.5)

Phase = Literal["reasoning", "content", "tool_start", "tool_args"]


def prompt_content(messages: Any, tools: Any) -> tuple[bytes, bytes]:
    """The request content that the digest and, without a tokenizer, the prompt count are made of."""
    m = orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)
    t = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS) if tools else b""
    return m, t


def estimated_prompt_tokens(content: tuple[bytes, bytes]) -> int:
    """Without a tokenizer: a token per 4 bytes of the content's JSON, at least one."""
    return max(1, (len(content[0]) + len(content[1])) // 4)


def request_digest(messages: Any, tools: Any, thinking: bool, seed: int) -> tuple[bytes, int]:
    """(32-byte digest of the request content keyed by the seed, prompt_tokens estimate)."""
    content = m, t = prompt_content(messages, tools)
    h = hashlib.blake2b(digest_size=32, key=str(seed).encode()[:64])
    h.update(m)
    h.update(b"\x00tools\x00")
    h.update(t)
    h.update(b"\x00think=1" if thinking else b"\x00think=0")
    return h.digest(), estimated_prompt_tokens(content)


@dataclass(frozen=True)
class ToolCallScript:
    """One tool call: its id, function name and arguments JSON cut into token-sized fragments."""

    id: str
    name: str
    fragments: tuple[str, ...]
    # Qwen3.6 (simulator.qwen36): the text the model writes at each of the call's positions, and the text
    # before its header ("\n\n" or "\n"), which SGLang streams as content.
    raw: tuple[str, ...] = ()
    lead: str = ""

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)

    @property
    def tokens(self) -> int:
        return 1 + len(self.fragments)


@dataclass(frozen=True)
class Script:
    """The whole reply before any `max_tokens` cut."""

    prompt_tokens: int
    reasoning_tokens: int
    content_tokens: int
    tool_calls: tuple[ToolCallScript, ...]
    capped: bool  # the reply ran into the context cap (--max-gen-tokens)
    text_seed: int
    # (position, characters): that position's text keeps only its first characters. A reply cut where a
    # tokenizer's count reaches max_tokens ends inside a word piece (simulator.app).
    trim: tuple[int, int] | None = None
    # (onset, block): from the phase's `onset`-th token on (reasoning, or content without thinking), one
    # passage of `block` tokens repeats to the end of the reply.
    loop: tuple[int, int] | None = None
    # The model played: Qwen3.6 trims its reasoning and content as its template does (simulator.qwen36).
    style: ChatTemplateName = "qwen3"

    @property
    def total_tokens(self) -> int:
        return self.reasoning_tokens + self.content_tokens + sum(c.tokens for c in self.tool_calls)

    def cut(self, max_tokens: int | None) -> tuple[int, str]:
        """(tokens actually generated, finish_reason) under the request's `max_tokens`."""
        total = self.total_tokens
        if max_tokens is not None and max_tokens < total:
            return max_tokens, "length"
        if self.capped:
            return total, "length"
        return total, "tool_calls" if self.tool_calls else "stop"

    def reasoning_in(self, upto: int) -> int:
        """Reasoning tokens among the first `upto` generated tokens."""
        return min(upto, self.reasoning_tokens)


def _draw_length(rng: random.Random, mean: float) -> int:
    if rng.random() < _TAIL_SHARE:
        body_mean_part = (1 - _TAIL_SHARE) * _BODY_MEAN_SHARE
        tail_mean = (1 - body_mean_part) * mean / _TAIL_SHARE
        x_min = tail_mean * (_TAIL_ALPHA - 1) / _TAIL_ALPHA
        x = x_min * rng.paretovariate(_TAIL_ALPHA)
    else:
        mu = math.log(_BODY_MEAN_SHARE * mean) - _BODY_SIGMA**2 / 2
        x = rng.lognormvariate(mu, _BODY_SIGMA)
    return max(1, int(x))


def _tool_function(tool: Any) -> tuple[str, Mapping[str, Any]]:
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else {}
    if not isinstance(fn, Mapping):
        fn = {}
    name = fn.get("name")
    params = fn.get("parameters")
    return (name if isinstance(name, str) else "tool"), (params if isinstance(params, Mapping) else {})


def _schema_type(schema: Mapping[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "null")
    if isinstance(t, str):
        return t
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _integer_value(schema: Mapping[str, Any], rng: random.Random, depth: int) -> int:
    lo = int(schema.get("minimum", 0))
    hi = int(schema.get("maximum", max(lo, 0) + 100))
    return rng.randint(lo, max(lo, hi))


def _number_value(schema: Mapping[str, Any], rng: random.Random, depth: int) -> float:
    lo = float(schema.get("minimum", 0.0))
    hi = float(schema.get("maximum", lo + 100.0))
    return round(rng.uniform(lo, max(lo, hi)), 2)


def _array_value(schema: Mapping[str, Any], rng: random.Random, depth: int) -> list[Any]:
    lo = int(schema.get("minItems", 1))
    hi = max(lo, min(int(schema.get("maxItems", 3)), 3))
    n = rng.randint(lo, hi) if depth < 4 else lo  # deep nesting: the fewest items, so the value stays small
    return [value_for(schema.get("items", {}), rng, depth + 1) for _ in range(n)]


def _object_value(schema: Mapping[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    props = schema.get("properties")
    if not isinstance(props, Mapping) or depth >= 4:
        return {}
    required = schema.get("required")
    needed = set(required) if isinstance(required, list) else set()
    return {k: value_for(v, rng, depth + 1) for k, v in props.items() if k in needed or rng.random() < 0.3}


def _string_value(schema: Mapping[str, Any], rng: random.Random, depth: int) -> str:
    text = " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))
    max_len = schema.get("maxLength")
    return text[: int(max_len)] if isinstance(max_len, int) else text


_ValueOf: TypeAlias = Callable[[Mapping[str, Any], random.Random, int], Any]
# Schema type -> its value; any other type is a string.
_VALUE_OF_KIND: dict[str, _ValueOf] = {
    "integer": _integer_value,
    "number": _number_value,
    "boolean": lambda _schema, rng, _depth: rng.random() < 0.5,
    "null": lambda _schema, _rng, _depth: None,
    "array": _array_value,
    "object": _object_value,
}


def value_for(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A value that validates against the common subset of JSON Schema that tool definitions use."""
    if not isinstance(schema, Mapping):
        return " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    if "const" in schema:
        return schema["const"]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return value_for(options[0], rng, depth + 1)
    make: _ValueOf = _VALUE_OF_KIND.get(_schema_type(schema), _string_value)
    return make(schema, rng, depth)


def _fragments(text: str, rng: random.Random) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(text):
        n = rng.randint(2, 6)
        out.append(text[i : i + n])
        i += n
    return tuple(out) or ("{}",)


_DIRECTIVE = re.compile(r"\[\[sim:calls ([A-Za-z0-9_,\- ]+)\]\]")


def directed_calls(messages: Any) -> list[str] | None:
    """A test hook: `[[sim:calls NAME,NAME]]` (or `[[sim:calls none]]`) in a user or tool turn after the
    last assistant turn fixes which tools this reply calls, so multi-turn tests can make a regenerated
    trajectory line up with its source or diverge from it on purpose."""
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if not isinstance(message, Mapping) or message.get("role") == "assistant":
            break
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        match = _DIRECTIVE.search(content) if isinstance(content, str) else None
        if match:
            names = [name.strip() for name in match.group(1).split(",") if name.strip()]
            return [] if names == ["none"] else names
    return None


def _pick_calls(tools: Sequence[Any], tool_choice: Any, parallel: bool, rng: random.Random) -> list[Any]:
    if isinstance(tool_choice, Mapping):
        wanted = tool_choice.get("function", {}).get("name")
        named = [t for t in tools if _tool_function(t)[0] == wanted]
        return named[:1] or list(tools[:1])
    r = rng.random()
    n = 1 if (not parallel or r < 0.7) else (2 if r < 0.9 else 3)
    return [rng.choice(tools) for _ in range(n)]


def build_script(body: Mapping[str, Any], thinking: bool, config: SimConfig) -> Script:
    """The reply this server gives to this request body, before `max_tokens`."""
    messages = body.get("messages")
    tools_raw = body.get("tools")
    tools: list[Any] = list(tools_raw) if isinstance(tools_raw, list) else []
    digest, prompt_tokens = request_digest(messages, tools, thinking, config.seed)
    rng = random.Random(int.from_bytes(digest[:16], "little"))
    text_seed = int.from_bytes(digest[16:], "little")

    tool_choice = body.get("tool_choice", "auto")
    calls_wanted, directed_tools = _wanted_calls(messages, tools, tool_choice, config.tool_call_rate, rng)
    reasoning, content = _lengths(thinking, config.mean_tokens, rng)
    calls: list[ToolCallScript] = []
    if calls_wanted:
        # After thinking the first content token is the "\n\n" that follows </think> (ReplyCursor), so a
        # call straight after the reasoning still streams that one content delta, as SGLang does.
        content = max(int(thinking), rng.randint(0, 24))
        chosen = directed_tools if directed_tools is not None else _pick_calls(
            tools, tool_choice, body.get("parallel_tool_calls", True) is not False, rng)
        if config.chat_template == "qwen3.6":
            written = content > int(thinking)  # after thinking the first content position is "\n\n" alone
            calls = [qwen36.call_script(*_call_args(tool, rng), i, written, rng) for i, tool in enumerate(chosen)]
        else:
            calls = [_call_script(tool, rng) for tool in chosen]

    # Loops and the heavy tail draw from their own stream, so the draws above stay what they were without.
    failure = random.Random(int.from_bytes(hashlib.blake2b(digest, digest_size=16, person=b"sim-failure").digest(),
                                           "little"))
    loop_draw, tail_draw = failure.random(), failure.random()
    if thinking and tail_draw < config.think_tail_rate:
        reasoning = max(1, int(config.mean_tokens * failure.paretovariate(config.think_tail_alpha)))
    cap = config.max_gen_tokens
    if loop_draw < config.loop_rate:
        onset = int((reasoning if thinking else content) * failure.uniform(*_LOOP_ONSET))
        loop = (onset, failure.randint(*_LOOP_BLOCK))
        reasoning, content = (cap, 0) if thinking else (0, cap)
        return Script(prompt_tokens, reasoning, content, (), True, text_seed, loop=loop, style=config.chat_template)
    capped = reasoning + content + sum(c.tokens for c in calls) > cap
    if capped:
        # Hitting the context limit in practice means thinking that never closed: all reasoning.
        reasoning, content, calls = (cap, 0, []) if thinking else (0, cap, [])
    return Script(prompt_tokens, reasoning, content, tuple(calls), capped, text_seed, style=config.chat_template)


def _wanted_calls(messages: Any, tools: list[Any], tool_choice: Any, rate: float,
                  rng: random.Random) -> tuple[bool, list[Any] | None]:
    """(whether the reply calls tools, the tools a `[[sim:calls ...]]` directive names or None without one).
    The rate is drawn only when the request leaves the choice to the model, as the draws after depend on it."""
    forced = tool_choice == "required" or isinstance(tool_choice, Mapping)
    wanted = bool(tools) and tool_choice != "none" and (forced or rng.random() < rate)
    directed = directed_calls(messages)
    if directed is None:
        return wanted, None
    by_name = {_tool_function(t)[0]: t for t in tools}
    named = [by_name[name] for name in directed if name in by_name]
    return bool(named), named


def _lengths(thinking: bool, mean_tokens: int, rng: random.Random) -> tuple[int, int]:
    """(reasoning, content) tokens; without thinking the reply is shorter and all content."""
    mean = mean_tokens if thinking else max(1, int(mean_tokens * _NO_THINK_SHARE))
    length = _draw_length(rng, mean)
    if not thinking:
        return 0, length
    reasoning = max(1, round(length * rng.betavariate(4.0, 2.0)))
    return reasoning, max(1, length - reasoning)


def _call_args(tool: Any, rng: random.Random) -> tuple[str, Any]:
    name, params = _tool_function(tool)
    return name, value_for(params, rng)


def _call_script(tool: Any, rng: random.Random) -> ToolCallScript:
    name, params = _tool_function(tool)
    args = orjson.dumps(value_for(params, rng)).decode()
    call_id = "call_" + rng.getrandbits(96).to_bytes(12, "little").hex()
    return ToolCallScript(call_id, name, _fragments(args, rng))


@dataclass(frozen=True)
class Piece:
    """A run of generated tokens of one phase; tool pieces name their call by index."""

    phase: Phase
    text: str
    call: int = -1


def _shaped(source: TextSource, start: int, end: int, lo: int, hi: int) -> str:
    """Positions [start, end) of a text that spans [lo, hi), its first piece left-trimmed and its last
    right-trimmed, as Qwen3.6's template writes a reasoning or a content (simulator.qwen36)."""
    out = ""
    if start < end and start == lo:
        piece = source.take(1)
        out += qwen36.first_piece(piece) if hi - lo > 1 else qwen36.first_piece(qwen36.last_piece(piece))
        start += 1
    last = end == hi and start < end
    out += source.take(end - start - last)
    if last:
        out += qwen36.last_piece(source.take(1))
    return out


class ReplyCursor:
    """Walks a script's token positions in order and turns each span of new tokens into pieces.

    A reply that thought opens its content with "\\n\\n", as Qwen3 writes `</think>\\n\\n` and SGLang's
    qwen3 reasoning parser passes the newlines on as content."""

    def __init__(self, script: Script) -> None:
        self.script = script
        loop = script.loop
        self._reasoning = TextSource(script.text_seed, loop if script.reasoning_tokens else None)
        self._content = TextSource(script.text_seed ^ 0x5EED, None if script.reasoning_tokens else loop)
        self.position = 0

    def _take(self, source: TextSource, start: int, end: int, lo: int, hi: int, tail: str = "") -> str:
        """The text of positions [start, end) of a reasoning or a content that spans [lo, hi); Qwen3.6 ends a
        reasoning with the "\n" it writes before </think>."""
        if self.script.style != "qwen3.6":
            return source.take(end - start)
        text = _shaped(source, start, end, lo, hi)
        return text + tail if end == hi and end > start else text

    def advance(self, upto: int) -> list[Piece]:
        trim = self.script.trim
        if trim is None or not self.position <= trim[0] < min(upto, self.script.total_tokens):
            return self._advance(upto)
        at, chars = trim
        pieces = self._advance(at)
        last = self._advance(at + 1)[-1]
        last = Piece(last.phase, last.text[:chars], last.call)
        if pieces and (pieces[-1].phase, pieces[-1].call) == (last.phase, last.call):
            pieces[-1] = Piece(last.phase, pieces[-1].text + last.text, last.call)
        else:
            pieces.append(last)
        return pieces + self._advance(upto)

    def _advance(self, upto: int) -> list[Piece]:
        s = self.script
        start, end = self.position, min(upto, s.total_tokens)
        if end <= start:
            return []
        self.position = end
        pieces: list[Piece] = []
        r_end = s.reasoning_tokens
        c_end = r_end + s.content_tokens
        if start < r_end:
            pieces.append(Piece("reasoning", self._take(self._reasoning, start, min(end, r_end), 0, r_end, "\n")))
        if start < c_end and end > r_end:
            first = max(start, r_end)
            opens = first == r_end and r_end > 0  # this span holds the first content token after thinking
            text = self._take(self._content, first + opens, min(end, c_end), r_end + (r_end > 0), c_end)
            pieces.append(Piece("content", "\n\n" + text if opens else text))
        offset = c_end
        for i, call in enumerate(s.tool_calls):
            lo, hi = offset, offset + call.tokens
            offset = hi
            if end <= lo or start >= hi:
                continue
            if start <= lo:
                pieces.append(Piece("tool_start", call.lead, i))
            a = max(start, lo + 1) - lo - 1
            b = min(end, hi) - lo - 1
            if b > a:
                pieces.append(Piece("tool_args", "".join(call.fragments[a:b]), i))
        return pieces
