"""Multi-turn regeneration (`--turns all`), as pure logic: which turns a conversation has, what history
each turn is generated on, and when a regenerated tool trajectory no longer lines up with the source.

The k-th generated turn sees the source's system, user and tool turns, and the model's OWN earlier
turns in place of the source's. A regenerated turn whose tool calls line up with the source's (same
function names, same count, arguments free to differ) gets the source's tool results spliced in,
matched by position and re-keyed to the new call ids. Any other mismatch ends the conversation at that
turn with a `diverged` reason: a tool result is never fed to a call it does not answer. A turn that did not
end by itself (cut by max_tokens, or stopped as a loop) ends the conversation too, with an `ended_early`
reason: a cut reply is not what the model says next, and a server refuses a tool call cut mid-arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, cast

from client.core.records import Completion, ToolCall, Usage

# The finish reasons of a turn the model ended itself; any other is not continued.
ENDED_BY_ITSELF = ("stop", "tool_calls")
Turns = Literal["last", "all"]  # --turns: the last assistant turn of each record, or every one
_EVENT_ID = re.compile(r"(.+)#(\d+)(!?)\Z", re.DOTALL)  # any JSON string is an id, line breaks too


def event_id(conversation_id: str, turn: int, *, last: bool = False) -> str:
    """The id of one generation event: `<conversation id>#<turn>`, turns counted from 1. The event that
    ends its conversation (its last turn, or the turn that diverged) carries a `!`, so the done-ID ledger
    alone tells a resumed run which conversations are over."""
    return f"{conversation_id}#{turn}{'!' if last else ''}"


@dataclass(frozen=True, slots=True)
class EventKey:
    conversation_id: str
    turn: int
    last: bool


def parse_event_id(value: str) -> EventKey | None:
    match = _EVENT_ID.match(value)
    return EventKey(match.group(1), int(match.group(2)), bool(match.group(3))) if match else None


def completion_from_record(record: dict[str, Any]) -> Completion:
    """A written ResultRecord's output, to continue its conversation after a restart."""
    calls = tuple(
        ToolCall(id=str(call.get("id", "")), name=str(call.get("function", {}).get("name", "")),
                 arguments=str(call.get("function", {}).get("arguments", "")))
        for call in record.get("tool_calls") or [])
    return Completion(reasoning=str(record.get("reasoning") or ""), content=str(record.get("content") or ""),
                      tool_calls=calls, finish_reason=record.get("finish_reason"),
                      usage=cast("Usage", record.get("usage") or {}), model=record.get("model"))


def turn_positions(messages: list[dict[str, Any]]) -> list[int]:
    """Where the generated turns go: every source assistant turn, plus one after a final user/tool turn."""
    positions = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
    if messages and messages[-1].get("role") != "assistant":
        positions.append(len(messages))
    return positions


def assistant_message(completion: Completion, *, preserve_thinking: bool) -> dict[str, Any]:
    """The regenerated turn as history for the next one. Qwen3.6's template drops earlier reasoning
    unless `preserve_thinking` is set, so it is only carried then."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.content}
    if completion.tool_calls:
        message["tool_calls"] = [call.to_wire() for call in completion.tool_calls]
    if preserve_thinking and completion.reasoning:
        message["reasoning_content"] = completion.reasoning
    return message


def _source_call_names(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls") or []
    return [str(call.get("function", {}).get("name", "")) for call in calls if isinstance(call, dict)]


def divergence(source_turn: dict[str, Any] | None, completion: Completion) -> str | None:
    """Why the regenerated turn cannot continue the source's trajectory, or None when it can."""
    source_names = _source_call_names(source_turn) if source_turn is not None else []
    new_names = [call.name for call in completion.tool_calls]
    if source_names == new_names:
        return None
    if not source_names:
        return f"called {', '.join(new_names)} where the source called no tool"
    if not new_names:
        return f"called no tool where the source called {', '.join(source_names)}"
    return f"called {', '.join(new_names)} where the source called {', '.join(source_names)}"


def splice_tool_results(source_turn: dict[str, Any], results: list[dict[str, Any]],
                        completion: Completion) -> list[dict[str, Any]]:
    """The source's tool results re-keyed to the regenerated calls, matched by position of the call."""
    old_ids = [str(call.get("id", "")) for call in source_turn.get("tool_calls") or []]
    new_ids = [call.id for call in completion.tool_calls]
    by_old = dict(zip(old_ids, new_ids, strict=True))
    spliced = []
    for position, result in enumerate(results):
        old = str(result.get("tool_call_id", ""))
        new = by_old.get(old) or (new_ids[position] if position < len(new_ids) else old)
        spliced.append({**result, "tool_call_id": new})
    return spliced


@dataclass
class Conversation:
    """The state of one conversation being regenerated: the history the next turn is generated on."""

    conversation_id: str
    source: list[dict[str, Any]]
    preserve_thinking: bool = False
    history: list[dict[str, Any]] | None = None  # messages sent so far, up to the last generated turn
    cursor: int = 0  # the next source message not yet in `history`
    turn: int = 0  # generated turns so far
    ended: str | None = None  # why it ended early: a divergence, or a turn that did not end by itself
    cut_short: bool = False  # it ended early at a turn that did not end by itself

    @property
    def positions(self) -> list[int]:
        return turn_positions(self.source)

    @property
    def finished(self) -> bool:
        return self.ended is not None or self.turn >= len(self.positions)

    def next_request(self) -> list[dict[str, Any]]:
        """The messages for turn `self.turn + 1`."""
        position = self.positions[self.turn]
        return [*(self.history or []), *self.source[self.cursor:position]]

    def restore(self, record: dict[str, Any]) -> None:
        """Continue after turn `record["turn"]`, already generated and written by an earlier run."""
        self.turn = int(record["turn"]) - 1
        self.advance(record["messages"], completion_from_record(record))
        if record.get("diverged"):
            self.ended = str(record["diverged"])
        elif record.get("ended_early"):
            self.ended, self.cut_short = str(record["ended_early"]), True

    def advance(self, sent: list[dict[str, Any]], completion: Completion) -> str | None:
        """Record turn `self.turn + 1` (generated on `sent`); returns the divergence that ends it, if any."""
        position = self.positions[self.turn]
        self.turn += 1
        source_turn = self.source[position] if position < len(self.source) else None
        results_end = position + 1
        while results_end < len(self.source) and self.source[results_end].get("role") == "tool":
            results_end += 1
        history = [*sent, assistant_message(completion, preserve_thinking=self.preserve_thinking)]
        if not self.finished and completion.finish_reason not in ENDED_BY_ITSELF:
            self.ended = (f"turn {self.turn} did not end by itself (finish_reason {completion.finish_reason}); "
                          "a cut reply is not continued")
            self.cut_short = True
            return self.ended
        if not self.finished:
            reason = divergence(source_turn, completion)
            if reason is not None:
                self.ended = reason
                return reason
            if source_turn is not None and completion.tool_calls:
                history.extend(splice_tool_results(source_turn, self.source[position + 1:results_end], completion))
        self.history = history
        self.cursor = results_end
        return None
