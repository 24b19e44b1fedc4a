"""Multi-turn logic (pure): turn positions, event ids, divergence, splicing, and the history each turn
is generated on."""

from __future__ import annotations

from typing import Any

import pytest

from client.core.records import Completion, ToolCall
from client.engine.conversation import (
    Conversation,
    EventKey,
    divergence,
    event_id,
    parse_event_id,
    splice_tool_results,
    turn_positions,
)


def done(content: str = "", calls: tuple[tuple[str, str], ...] = (), reasoning: str = "r") -> Completion:
    return Completion(reasoning=reasoning, content=content,
                      tool_calls=tuple(ToolCall(id=i, name=n, arguments="{}") for i, n in calls),
                      finish_reason="tool_calls" if calls else "stop", usage={"completion_tokens": 1}, model="m")


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str, calls: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}}
                                 for i, n in calls]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


@pytest.mark.parametrize(("messages", "positions"), [
    ([user("a")], [1]),
    ([user("a"), assistant("b")], [1]),
    ([{"role": "system", "content": "s"}, user("a"), assistant("b"), user("c"), assistant("d")], [2, 4]),
    ([user("a"), assistant("b"), user("c")], [1, 3]),
    ([user("a"), assistant("", (("c1", "f"),)), tool("c1", "x")], [1, 3]),
])
def test_turn_positions(messages: list[dict[str, Any]], positions: list[int]) -> None:
    assert turn_positions(messages) == positions


@pytest.mark.parametrize(("value", "key"), [
    ("conv-1#3", EventKey("conv-1", 3, False)),
    ("conv-1#3!", EventKey("conv-1", 3, True)),
    ("a#b#12", EventKey("a#b", 12, False)),
    ("plain", None),
    ("x#", None),
])
def test_event_ids_round_trip(value: str, key: EventKey | None) -> None:
    assert parse_event_id(value) == key
    if key is not None:
        assert event_id(key.conversation_id, key.turn, last=key.last) == value


@pytest.mark.parametrize(("source_calls", "new_calls", "reason"), [
    ((), (), None),
    ((("s1", "f"),), (("n1", "f"),), None),
    ((("s1", "f"), ("s2", "g")), (("n1", "f"), ("n2", "g")), None),
    ((), (("n1", "f"),), "called f where the source called no tool"),
    ((("s1", "f"),), (), "called no tool where the source called f"),
    ((("s1", "f"),), (("n1", "g"),), "called g where the source called f"),
    ((("s1", "f"),), (("n1", "f"), ("n2", "f")), "called f, f where the source called f"),
    ((("s1", "f"), ("s2", "g")), (("n1", "g"), ("n2", "f")), "called g, f where the source called f, g"),
])
def test_divergence(source_calls: tuple[tuple[str, str], ...], new_calls: tuple[tuple[str, str], ...],
                    reason: str | None) -> None:
    assert divergence(assistant("", source_calls), done(calls=new_calls)) == reason


def test_parallel_results_are_rekeyed_by_position() -> None:
    source = assistant("", (("s1", "get_weather"), ("s2", "get_weather")))
    results = [tool("s2", "rain in Oslo"), tool("s1", "sun in Rome")]  # results may come in any order
    spliced = splice_tool_results(source, results, done(calls=(("n1", "get_weather"), ("n2", "get_weather"))))
    assert spliced == [tool("n2", "rain in Oslo"), tool("n1", "sun in Rome")]


def test_three_turns_are_generated_on_the_regenerated_history() -> None:
    source = [{"role": "system", "content": "sys"}, user("u1"), assistant("SOURCE-1"), user("u2"),
              assistant("SOURCE-2"), user("u3"), assistant("SOURCE-3")]
    conversation = Conversation("c", source)
    sent = []
    for turn in range(3):
        messages = conversation.next_request()
        sent.append(messages)
        assert conversation.advance(messages, done(f"NEW-{turn + 1}", reasoning=f"think {turn}")) is None
    assert conversation.finished
    assert [m["content"] for m in sent[2]] == ["sys", "u1", "NEW-1", "u2", "NEW-2", "u3"]
    assert all("SOURCE" not in str(m) for m in sent[2])
    assert all("reasoning_content" not in m for m in sent[2]), "earlier reasoning is dropped by default"


def test_preserve_thinking_keeps_earlier_reasoning() -> None:
    conversation = Conversation("c", [user("u1"), assistant("a"), user("u2")], preserve_thinking=True)
    conversation.advance(conversation.next_request(), done("NEW", reasoning="because"))
    assert conversation.next_request()[1] == {"role": "assistant", "content": "NEW", "reasoning_content": "because"}


def test_tool_trajectory_lines_up_and_continues() -> None:
    source = [user("weather?"), assistant("", (("s1", "get_weather"), ("s2", "get_weather"))),
              tool("s1", "sun"), tool("s2", "rain"), assistant("It is mixed."), user("thanks")]
    conversation = Conversation("c", source)
    first = conversation.next_request()
    assert first == [user("weather?")]
    conversation.advance(first, done(calls=(("n1", "get_weather"), ("n2", "get_weather"))))
    second = conversation.next_request()
    assert second[1]["tool_calls"][0]["id"] == "n1"
    assert second[2:] == [tool("n1", "sun"), tool("n2", "rain")]
    conversation.advance(second, done("Sunny and rainy."))
    third = conversation.next_request()
    assert third[-2:] == [{"role": "assistant", "content": "Sunny and rainy."}, user("thanks")]
    conversation.advance(third, done("You're welcome."))
    assert conversation.finished
    assert conversation.ended is None


def test_diverging_trajectory_ends_the_conversation() -> None:
    source = [user("weather?"), assistant("", (("s1", "get_weather"),)), tool("s1", "sun"), assistant("Sunny.")]
    conversation = Conversation("c", source)
    reason = conversation.advance(conversation.next_request(), done(calls=(("n1", "web_search"),)))
    assert reason == "called web_search where the source called get_weather"
    assert conversation.finished
    assert conversation.ended == reason


def test_the_last_turn_never_diverges() -> None:
    conversation = Conversation("c", [user("weather?")])
    assert conversation.advance(conversation.next_request(), done(calls=(("n1", "get_weather"),))) is None
    assert conversation.finished


def test_restore_from_a_written_record_continues_at_the_next_turn() -> None:
    source = [user("u1"), assistant("S1"), user("u2"), assistant("S2")]
    record = {"id": "c#1", "turn": 1, "messages": [user("u1")], "content": "NEW-1", "reasoning": "r",
              "tool_calls": [], "finish_reason": "stop", "usage": {}}
    conversation = Conversation("c", source)
    conversation.restore(record)
    assert conversation.turn == 1
    assert conversation.next_request() == [user("u1"), {"role": "assistant", "content": "NEW-1"}, user("u2")]


@pytest.mark.parametrize("finish", ["length", "repetition", None])
def test_a_turn_that_did_not_end_by_itself_ends_the_conversation(finish: str | None) -> None:
    """A reply cut by max_tokens (inside a tool call, say) or stopped as a loop is not history: the server
    refuses a cut call's arguments, and a loop would be fed back as the model's own words."""
    source = [user("weather?"), assistant("", (("s1", "get_weather"),)), tool("s1", "sun"), assistant("Sunny.")]
    conversation = Conversation("c", source)
    cut = Completion(reasoning="r", content="", tool_calls=(ToolCall(id="n1", name="get_weather", arguments='{"ci'),),
                     finish_reason=finish, usage={"completion_tokens": 9}, model="m")
    reason = conversation.advance(conversation.next_request(), cut)
    assert reason is not None and f"did not end by itself (finish_reason {finish})" in reason
    assert conversation.finished and conversation.cut_short


def test_the_last_turn_may_be_cut_without_ending_anything_early() -> None:
    conversation = Conversation("c", [user("weather?")])
    cut = Completion(reasoning="r", content="", tool_calls=(), finish_reason="length", usage={}, model="m")
    assert conversation.advance(conversation.next_request(), cut) is None
    assert conversation.finished and not conversation.cut_short


def test_restore_keeps_a_conversation_ended_at_a_cut_turn_ended() -> None:
    source = [user("u1"), assistant("S1"), user("u2"), assistant("S2")]
    record = {"id": "c#1!", "turn": 1, "messages": [user("u1")], "content": "NEW-1", "reasoning": "r",
              "tool_calls": [], "finish_reason": "length", "usage": {},
              "ended_early": "turn 1 did not end by itself (finish_reason length); a cut reply is not continued"}
    conversation = Conversation("c", source)
    conversation.restore(record)
    assert conversation.finished and conversation.cut_short
