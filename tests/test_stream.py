"""Table-driven tests of the SSE parser over byte streams, split at awkward places."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from client.core.errors import StreamDropped, StreamErrorEvent
from client.fleet.kinds import VLLM
from client.wire.sse import StreamParser


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return event({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice], **top})


USAGE = {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20,
         "completion_tokens_details": {"reasoning_tokens": 5}}
USAGE_EVENT = event({"id": "c1", "model": "m", "choices": [], "usage": USAGE})
DONE = b"data: [DONE]\n\n"


@dataclass
class Case:
    name: str
    stream: bytes
    reasoning: str = ""
    content: str = ""
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)
    finish: str | None = "stop"
    usage: dict[str, Any] | None = None
    error: type[Exception] | None = None
    ended_cleanly: bool = True
    completion_ids: list[int] | None = None


CASES = [
    Case("sglang reasoning_content then content",
         chunk({"role": "assistant", "content": ""}) + chunk({"reasoning_content": "Let me "})
         + chunk({"reasoning_content": "think."}) + chunk({"content": "Answer"}) + chunk({"content": "."})
         + chunk({}, "stop") + USAGE_EVENT + DONE,
         reasoning="Let me think.", content="Answer.", usage=USAGE),
    Case("vllm reasoning field",
         chunk({"role": "assistant"}) + chunk({"reasoning": "hmm"}) + chunk({"content": "ok"}) + chunk({}, "stop")
         + USAGE_EVENT + DONE,
         reasoning="hmm", content="ok", usage=USAGE),
    Case("multi-token MTP chunks count from usage, not chunks",
         chunk({"reasoning_content": "a b c d"}) + chunk({"content": "e f g h i"}) + chunk({}, "length")
         + USAGE_EVENT + DONE,
         reasoning="a b c d", content="e f g h i", finish="length", usage=USAGE),
    Case("tool call deltas merged by index, two calls",
         chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "get_weather", "arguments": ""}}]})
         + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]})
         + chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                  "function": {"name": "search", "arguments": '{"q"'}}]})
         + chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]})
         + chunk({"tool_calls": [{"index": 1, "function": {"arguments": ': "x"}'}}]})
         + chunk({}, "tool_calls") + USAGE_EVENT + DONE,
         tool_calls=[("call_a", "get_weather", '{"city": "Paris"}'), ("call_b", "search", '{"q": "x"}')],
         finish="tool_calls", usage=USAGE),
    Case("two entries with the same index in one delta",
         chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "f", "arguments": '{"a"'}},
                               {"index": 0, "function": {"arguments": ": 1}"}}]})
         + chunk({}, "tool_calls") + USAGE_EVENT + DONE,
         tool_calls=[("c0", "f", '{"a": 1}')], finish="tool_calls", usage=USAGE),
    Case("missing null fields (no finish_reason key until the end)",
         event({"choices": [{"index": 0, "delta": {"content": "x"}}]})
         + event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + USAGE_EVENT + DONE,
         content="x", usage=USAGE),
    Case("no [DONE], clean end after usage",
         chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT,
         content="x", usage=USAGE),
    Case("no [DONE] and no usage, clean end after finish_reason",
         chunk({"content": "x"}) + chunk({}, "stop"),
         content="x", usage={}),
    Case("CRLF framing and a keep-alive comment",
         (b": ping\r\n\r\n" + chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT + DONE)
         .replace(b"\n\n", b"\r\n\r\n"),
         content="x", usage=USAGE),
    Case("lone CR line endings (legal SSE)",
         (chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT + DONE).replace(b"\n", b"\r"),
         content="x", usage=USAGE),
    Case("mixed CRLF, CR and LF endings",
         chunk({"content": "a"}).replace(b"\n\n", b"\r\r") + chunk({"content": "b"}).replace(b"\n\n", b"\r\n\n")
         + chunk({}, "stop").replace(b"\n\n", b"\n\r\n") + USAGE_EVENT + DONE,
         content="ab", usage=USAGE),
    Case("comment lines, event: and id: lines inside events",
         b": keep-alive\n\n" + b": ping\nevent: message\nid: 1\n" + chunk({"content": "x"})
         + b"event: message\n" + chunk({}, "stop") + b"retry: 1000\n" + USAGE_EVENT + b": bye\n\n" + DONE,
         content="x", usage=USAGE),
    Case("JSON split over several data: lines joins with newlines",
         b"".join(b"data: " + line + b"\n" for line in orjson.dumps(
             {"choices": [{"index": 0, "delta": {"content": "x"}}]}, option=orjson.OPT_INDENT_2).split(b"\n"))
         + b"\n" + b"data:" + orjson.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
         + b"\n\n" + USAGE_EVENT + DONE,
         content="x", usage=USAGE),
    Case("usage only on the finish chunk, no [DONE]",
         chunk({"content": "x"}) + chunk({}, "stop", usage=USAGE),
         content="x", usage=USAGE),
    Case("an event with no data is ignored",
         b"event: ping\n\n" + b"data:\n\n" + chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT,
         content="x", usage=USAGE),
    Case("last event without its blank line",
         chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT.rstrip(b"\n"),
         content="x", usage=USAGE),
    Case("error event mid-stream is a failed attempt",
         chunk({"content": "x"}) + event({"error": {"message": "boom", "type": "InternalServerError", "code": 500}}),
         error=StreamErrorEvent),
    Case("stream cut before finish_reason",
         chunk({"content": "x"}), error=StreamDropped, ended_cleanly=False),
    Case("stream cut between finish and usage",
         chunk({"content": "x"}) + chunk({}, "stop"), error=StreamDropped, ended_cleanly=False),
    Case("connection lost after the stream was whole is still whole",
         chunk({"content": "x"}) + chunk({}, "stop") + USAGE_EVENT + b'data: {"trunc',
         content="x", usage=USAGE, ended_cleanly=False),
    Case("malformed event",
         b"data: {not json}\n\n", error=StreamDropped),
    Case("token ids per choice",
         event({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None, "token_ids": [5, 6]}]})
         + chunk({}, "stop") + USAGE_EVENT + DONE,
         content="x", usage=USAGE, completion_ids=[5, 6]),
]


def split_points(data: bytes) -> list[list[bytes]]:
    """Whole, byte by byte at the start, in 7-byte pieces and byte by byte throughout (every CR, LF and
    separator split between reads, every event held over many): framing must not depend on chunking."""
    return [[data], [data[:1], data[1:2], data[2:]], [data[i:i + 7] for i in range(0, len(data), 7)],
            [data[i:i + 1] for i in range(len(data))]]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_parser(case: Case) -> None:
    for pieces in split_points(case.stream):
        parser = StreamParser(dialect=VLLM.reply)  # vLLM's ids per choice; the other cases carry none
        if case.error is not None:
            with pytest.raises(case.error):
                for piece in pieces:
                    parser.feed(piece)
                parser.completion(ended_cleanly=case.ended_cleanly)
            continue
        for piece in pieces:
            parser.feed(piece)
        result = parser.completion(ended_cleanly=case.ended_cleanly)
        assert result.reasoning == case.reasoning
        assert result.content == case.content
        assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == case.tool_calls
        assert result.finish_reason == case.finish
        assert dict(result.usage) == (case.usage if case.usage is not None else {})
        assert result.completion_token_ids == case.completion_ids


MTP_CHUNKS = [chunk({"role": "assistant", "content": ""}, usage={"completion_tokens": 0}),
              chunk({"reasoning_content": "abc"}, usage={"completion_tokens": 3}),
              chunk({"content": "def"}, usage={"completion_tokens": 6}),
              chunk({"content": "ghi"}, finish="stop", usage={"completion_tokens": 9})]


@pytest.mark.parametrize(("chunks", "live"), [
    # Per-chunk usage (SGLang, vLLM's continuous_usage_stats), 3 tokens per chunk (MTP): the live count is
    # the tokens, from the first chunk on; counting chunks would say 1, 2, 3.
    (MTP_CHUNKS, [0, 3, 6, 9]),
    # No usage until the end: one token per output chunk, then the final usage puts it right.
    ([chunk({"role": "assistant"}), chunk({"content": "abc"}), chunk({"content": "def"}, finish="stop"),
      event({"choices": [], "usage": {"completion_tokens": 6}})], [0, 1, 2, 6]),
], ids=["usage-per-chunk", "usage-at-the-end"])
def test_live_tokens_count_tokens_as_the_chunks_come(chunks: list[bytes], live: list[int]) -> None:
    parser = StreamParser()
    seen = []
    for data in chunks:
        parser.feed(data)
        seen.append(parser.live_tokens)
    assert seen == live
