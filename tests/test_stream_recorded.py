"""The client's SSE parser over raw streams recorded from a real vLLM 0.32 (tests/fixtures/streams/vllm/).

Each `NAME.sse` holds the body bytes exactly as the server sent them; `NAME.json` next to it holds the
request and the outcome a client must arrive at. Every recording is fed to `client.wire.sse.StreamParser`
whole and cut into pieces at awkward places (every byte, 7-byte pieces, between the two newlines of each
event separator, inside multi-byte UTF-8 characters), and the parsed completion must equal the sidecar
exactly: reasoning, content, tool calls (id, name, arguments), finish_reason, usage and token ids.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from client.core.errors import StreamDropped
from client.core.records import Completion
from client.fleet.kinds import VLLM
from client.wire.sse import StreamParser

FIXTURES = Path(__file__).parent / "fixtures" / "streams" / "vllm"
RECORDED = sorted(path.stem for path in FIXTURES.glob("*.sse"))


def _whole(data: bytes) -> list[bytes]:
    return [data]


def _every_byte(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def _sevens(data: bytes) -> list[bytes]:
    return [data[i:i + 7] for i in range(0, len(data), 7)]


def _cut_at(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(set(cuts)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def _inside_separators(data: bytes) -> list[bytes]:
    """A read boundary between the two newlines of every `\\n\\n` that ends an event."""
    cuts, start = [], 0
    while (found := data.find(b"\n\n", start)) >= 0:
        cuts.append(found + 1)
        start = found + 2
    return _cut_at(data, cuts)


def _inside_utf8(data: bytes) -> list[bytes]:
    """A read boundary after the first byte of every multi-byte UTF-8 character (and at `data: `)."""
    cuts = [i + 1 for i, byte in enumerate(data) if byte >= 0xC0]
    cuts += [i + 3 for i in range(len(data)) if data.startswith(b"data: ", i)]
    return _cut_at(data, cuts)


SPLITS: dict[str, Callable[[bytes], list[bytes]]] = {
    "whole": _whole,
    "1-byte": _every_byte,
    "7-byte": _sevens,
    "separator": _inside_separators,
    "utf8": _inside_utf8,
}


def _load(name: str) -> tuple[bytes, dict[str, Any]]:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    sidecar: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return raw, sidecar


def _parse(pieces: list[bytes]) -> tuple[StreamParser, Completion]:
    parser = StreamParser(dialect=VLLM.reply)  # the recordings are vLLM's
    for piece in pieces:
        parser.feed(piece)
    return parser, parser.completion(ended_cleanly=True)


def test_every_recording_has_a_sidecar_and_the_set_is_complete() -> None:
    assert {"thinking_on", "thinking_off", "tool_call", "tool_call_thinking_off", "length", "token_ids",
            "no_usage", "tool_result_turn", "random_model"} <= set(RECORDED)
    for name in RECORDED:
        assert (FIXTURES / f"{name}.json").is_file(), name


@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("name", RECORDED)
def test_recorded_stream_parses_to_its_sidecar(name: str, split: str) -> None:
    raw, sidecar = _load(name)
    expected = sidecar["expected"]
    pieces = SPLITS[split](raw)
    assert b"".join(pieces) == raw
    parser, completion = _parse(pieces)

    assert completion.reasoning == expected["reasoning"]
    assert completion.content == expected["content"]
    assert [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls] \
        == expected["tool_calls"]
    assert completion.finish_reason == expected["finish_reason"]
    # No usage in the stream (no stream_options): the record gets an empty usage, never a guessed one.
    assert parser.usage == expected["usage"]
    assert dict(completion.usage) == (expected["usage"] or {})
    assert completion.prompt_token_ids == expected["prompt_token_ids"]
    assert completion.completion_token_ids == expected["completion_token_ids"]
    assert completion.model == sidecar["request"]["model"]
    assert parser.done, "every recording ends with data: [DONE]"
    assert parser.whole == (expected["usage"] is not None)


WITH_IDS = [name for name in RECORDED if _load(name)[1]["expected"]["completion_token_ids"] is not None]


def test_some_recordings_carry_token_ids() -> None:
    assert {"token_ids", "tool_result_turn", "random_model"} <= set(WITH_IDS)


@pytest.mark.parametrize("name", WITH_IDS)
def test_token_counts_agree_with_the_ids(name: str) -> None:
    """Where vLLM sent ids, usage and the id lists agree: nothing was lost or counted twice."""
    expected = _load(name)[1]["expected"]
    usage = expected["usage"]
    assert usage["completion_tokens"] == len(expected["completion_token_ids"])
    assert usage["prompt_tokens"] == len(expected["prompt_token_ids"])


@pytest.mark.parametrize("name", RECORDED)
def test_stream_cut_before_its_end_is_never_whole(name: str) -> None:
    """Any prefix that stops before finish_reason fails as a dropped stream, never as a short result."""
    raw, _ = _load(name)
    cut = raw.find(b'"finish_reason":"') if b'"finish_reason":"' in raw else len(raw) // 2
    parser = StreamParser()
    parser.feed(raw[:cut])
    assert not parser.whole
    with pytest.raises(StreamDropped, match="stream ended before finish_reason"):
        parser.completion(ended_cleanly=False)


@pytest.mark.parametrize("name", ["tool_call", "tool_call_thinking_off"])
def test_recorded_tool_calls_arrive_in_several_deltas(name: str) -> None:
    """The recordings exercise the merge rule: a call's id and name first, then argument fragments by
    index, over several deltas (real vLLM on a machine that kept up; a loaded one may send fewer)."""
    raw, _ = _load(name)
    deltas = [call for line in raw.splitlines() if line.startswith(b"data: {")
              for choice in json.loads(line[6:]).get("choices", [])
              for call in choice.get("delta", {}).get("tool_calls") or []]
    assert len(deltas) > 2 and all(d["index"] == 0 for d in deltas)
    assert deltas[0]["function"]["name"] and not any(d.get("id") for d in deltas[1:])
