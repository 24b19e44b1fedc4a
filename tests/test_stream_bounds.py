"""Every stream has a bound the server cannot defeat: a server that streams past max_tokens without
finishing is cut off as a RunawayStream (retried), SSE comments do not reset the idle timer, and the bytes
of one event and of one stream, after gzip, are capped (an OversizedResponse naming the cap), so a few KiB
of gzip cannot grow the client by gigabytes.

The servers are oddserver's `runaway` and `ping_only` modes and dribble's gzip modes (a few MiB decoded
against caps of one or two MiB); each test waits on the client's answer, never on wall time (the idle
timeouts only have to fire at all for the test to end).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.errors import OversizedResponse, ProtocolError, RunawayStream, StreamStalled
from client.wire.bounds import Bounds
from client.wire.endpoint import Endpoint, token_limit
from client.wire.sse import StreamParser
from tests.conftest import make_prompts, read_failures, run_client
from tests.servers import chatwire
from tests.servers.harness import ServerGroup

BODY = {"model": chatwire.MODEL, "messages": [{"role": "user", "content": "What is six times seven?"}],
        "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 16}



def test_token_limit_margin() -> None:
    assert token_limit(16) == 80  # the 64-token floor
    assert token_limit(8192) == 8192 + 819  # a tenth past a large max_tokens


async def test_runaway_stream_is_cut_off_past_max_tokens(servers: ServerGroup) -> None:
    server = servers.oddserver("runaway")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=30.0)
    try:
        with pytest.raises(RunawayStream, match=r"past max_tokens 16 \(cut off at 80\)") as caught:
            await endpoint.stream_chat(orjson.dumps(BODY), max_tokens=16)
    finally:
        await endpoint.aclose()
    assert caught.value.retryable
    assert caught.value.kind == "RunawayStream"
    assert 80 < endpoint.wire.streamed_tokens < 200  # cut off at the limit, not thousands of tokens later


async def test_comments_do_not_reset_the_idle_timer(servers: ServerGroup) -> None:
    server = servers.oddserver("ping_only")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=1.0)
    try:
        with pytest.raises(StreamStalled, match="only comments or keep-alives"):
            await endpoint.stream_chat(orjson.dumps(BODY), max_tokens=16)
    finally:
        await endpoint.aclose()


def test_run_with_a_runaway_server_ends(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("runaway")
    prompts = make_prompts(tmp_path / "prompts.jsonl", 2, with_tools_every=0)
    out = tmp_path / "out"
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "16", "--idle-timeout", "3", "--max-attempts", "2"], timeout=120)
    failures = read_failures(out)
    assert sorted(f["id"] for f in failures) == ["p000000", "p000001"], result.stderr
    assert {f["error_class"] for f in failures} == {"RunawayStream"}
    assert all(f["attempts"] == 2 for f in failures)


def test_an_unterminated_event_stops_at_the_event_cap() -> None:
    parser = StreamParser(event_bytes=1024)
    parser.feed(b'data: {"choices": []}\n\n')  # whole events leave nothing held
    parser.feed(b'data: {"pad": "' + b"x" * 1000)
    with pytest.raises(OversizedResponse, match="one event passed 1 KiB"):
        parser.feed(b"x" * 100)


def test_an_event_held_over_many_reads_is_whole_and_capped() -> None:
    # An event that spans many reads is held piece by piece: it parses as one event, and the cap counts
    # every piece held, not only the last read's.
    payload = b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"x" * 5000 + b'"}}]}\r\n\r\n'
    parser = StreamParser(event_bytes=8192)
    for i in range(0, len(payload), 100):
        parser.feed(payload[i:i + 100])
    assert parser.events == 1 and parser.live_tokens == 1
    parser = StreamParser(event_bytes=1024)
    for i in range(11):  # 1,015 bytes held
        parser.feed(b'data: {"pad": "' if i == 0 else b"x" * 100)
    with pytest.raises(OversizedResponse, match="one event passed 1 KiB"):
        parser.feed(b"x" * 100)


def test_a_stream_stops_at_the_stream_cap() -> None:
    parser = StreamParser(stream_bytes=2048)
    for _ in range(2):
        parser.feed(b": ping" + b" " * 1000 + b"\n\n")
    with pytest.raises(OversizedResponse, match="the stream passed 2 KiB"):
        parser.feed(b": ping" + b" " * 1000 + b"\n\n")


async def test_a_gzip_event_without_end_stops_at_its_cap(servers: ServerGroup) -> None:
    # 4 MiB of one event, decoded, from a few KiB of gzip; the cap is 1 MiB.
    server = servers.start("dribble", "--mode", "gzip_event", "--mib", "4")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=30.0, bounds=Bounds(event_bytes=1 << 20))
    try:
        with pytest.raises(OversizedResponse, match=r"one event passed 1 MiB \(decoded\)") as caught:
            await endpoint.stream_chat(orjson.dumps(BODY), max_tokens=16)
    finally:
        await endpoint.aclose()
    assert isinstance(caught.value, ProtocolError) and caught.value.retryable
    assert caught.value.kind == "OversizedResponse"


async def test_a_gzip_stream_of_padding_stops_at_its_cap(servers: ServerGroup) -> None:
    # Small events (comments), 4 MiB of them decoded, then a whole reply; the stream's cap is 2 MiB.
    server = servers.start("dribble", "--mode", "gzip_padding", "--mib", "4")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=30.0, bounds=Bounds(stream_bytes=2 << 20))
    try:
        with pytest.raises(OversizedResponse, match=r"the stream passed 2 MiB \(decoded\)"):
            await endpoint.stream_chat(orjson.dumps(BODY), max_tokens=16)
    finally:
        await endpoint.aclose()


async def test_a_gzip_stream_below_the_caps_is_whole(servers: ServerGroup) -> None:
    server = servers.start("dribble", "--mode", "gzip_padding", "--mib", "1")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=30.0, bounds=Bounds(stream_bytes=2 << 20))
    try:
        completion, _ = await endpoint.stream_chat(orjson.dumps(BODY), max_tokens=16)
    finally:
        await endpoint.aclose()
    assert completion.reasoning == "Thinking." and completion.finish_reason == "stop"
