"""Internal records (frozen dataclasses) and the ResultRecord wire shape written to the segments.

The field order of `ResultRecord` is part of the contract: `id` comes first so the done-ID scan can
read it without parsing the whole line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import orjson


class WireToolCall(TypedDict):
    id: str
    type: str
    function: dict[str, str]


class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    reasoning_tokens: int
    completion_tokens_details: dict[str, Any]
    prompt_tokens_details: dict[str, Any]


class Spec(TypedDict, total=False):
    """The server's own speculative-decoding (MTP) figures for one request (SGLang
    `return_spec_tokens_details`): tokens per verify step, accepted share of the drafts, and the counts."""

    accept_length: float
    accept_rate: float
    verify_ct: int
    draft_tokens: int
    accepted_tokens: int
    accepted_histogram: list[int]


class Timings(TypedDict):
    queued_s: float
    ttft_s: float | None
    total_s: float


class ContinuedPart(TypedDict):
    """One attempt's share of a continued reply: `tokens` completion ids made by attempt number `attempt`."""

    attempt: int
    tokens: int


class ResultRecord(TypedDict):
    id: str
    messages: list[dict[str, Any]]
    tools: NotRequired[list[dict[str, Any]]]
    sampling: dict[str, Any]
    reasoning: str
    content: str
    tool_calls: list[WireToolCall]
    finish_reason: str | None
    usage: Usage
    prompt_token_ids: NotRequired[list[int]]
    completion_token_ids: NotRequired[list[int]]
    spec: NotRequired[Spec]
    model: str | None
    endpoint: str
    timings: Timings
    attempts: int
    created: float
    continued: NotRequired[list[ContinuedPart]]  # a reply continued after a broken attempt
    conversation_id: NotRequired[str]
    turn: NotRequired[int]
    diverged: NotRequired[str]
    ended_early: NotRequired[str]  # --turns all: the turn did not end by itself; the conversation ends here
    meta: NotRequired[dict[str, Any]]
    prompt_sha256: NotRequired[str]
    train_window: NotRequired[dict[str, int]]  # --train-window: size, the prompt's count, the max_tokens sent


def prompt_sha256(messages: Any, tools: Any, meta: Any) -> str:
    """The digest of a PromptRecord's content (messages, tools, meta; keys sorted, so key order and spacing
    are not edits). A result records its prompt's, so a later edit of a done prompt can be told."""
    canonical = orjson.dumps({"messages": messages, "tools": tools, "meta": meta}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class LineProblem:
    """What is wrong with one line of an input or results file (line 0: the whole file or object), named
    as `FILE:LINE: problem`: a bad prompt record, an unreadable result line, a damaged segment."""

    where: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.where}:{self.line}: {self.problem}" if self.line else f"{self.where}: {self.problem}"


class FailureRecord(TypedDict):
    id: str
    error_class: str
    last_error: str
    attempts: int
    endpoint: str | None
    created: float
    train_window: NotRequired[int]  # fills_window: the window the prompt alone filled


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str

    def to_wire(self) -> WireToolCall:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True, slots=True)
class Completion:
    """One whole completion, as parsed from the server's stream events."""

    reasoning: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str | None
    usage: Usage
    model: str | None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    spec: Spec | None = None
    continued: list[ContinuedPart] | None = None  # made by more than one attempt (client.engine.native_reply)

    @property
    def completion_tokens(self) -> int:
        return int(self.usage.get("completion_tokens", 0))


@dataclass(frozen=True, slots=True)
class Prompt:
    """A validated PromptRecord as the swarm needs it; `line` locates it for error messages."""

    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    meta: dict[str, Any] | None
    source: str
    line: int
