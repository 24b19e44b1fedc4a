"""Every request has a total deadline a trickling server cannot push back: the idle timer restarts at each
byte, so a `/v1/tokenize` that sends one byte at a time would hold the prompt count (and with it the
run's start-up and a prompt's slot) for ever, and a stream that sends one token at a time would hold its
slot far longer than any server generates.

The server is tests/servers/dribble.py; each test waits on the client's answer. The trickle lasts far
longer than the deadline, and ends with a whole answer, so a client without the deadline gets that answer
instead of the error (and the test fails), never hangs.
"""

from __future__ import annotations

import orjson
import pytest

from client.core.errors import StreamStalled
from client.wire.bounds import Bounds
from client.wire.endpoint import Endpoint, token_limit
from tests.servers.harness import ServerGroup

COUNT_BODY = orjson.dumps({"model": "dribble-model", "messages": [{"role": "user", "content": "Hi"}]})
CHAT_BODY = orjson.dumps({"model": "dribble-model", "messages": [{"role": "user", "content": "Hi"}],
                          "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 16})


def test_a_stream_deadline_grows_with_the_tokens_it_may_generate() -> None:
    bounds = Bounds()
    assert bounds.stream_deadline(None, 300.0) is None  # no max_tokens: the idle timer and the byte caps
    assert bounds.stream_deadline(token_limit(8192), 300.0) == 300.0 + 9011  # a token a second, at the least
    assert Bounds(seconds_per_token=0.5).stream_deadline(100, 10.0) == 60.0


async def test_a_trickled_count_ends_at_its_deadline(servers: ServerGroup) -> None:
    # One byte every 0.1 s for 20 s: the 1 s idle limit never fires.
    server = servers.start("dribble", "--mode", "tokenize", "--interval", "0.1", "--count", "200")
    endpoint = Endpoint(server.url, max_in_flight=1)
    try:
        with pytest.raises(StreamStalled, match=r"within 1s \(the request's total deadline"):
            await endpoint.count_prompt("/v1/tokenize", COUNT_BODY, limit_s=1.0)
    finally:
        await endpoint.aclose()


async def test_a_count_that_comes_whole_in_time_is_taken(servers: ServerGroup) -> None:
    server = servers.start("dribble", "--mode", "tokenize", "--interval", "0", "--count", "5")
    endpoint = Endpoint(server.url, max_in_flight=1)
    try:
        assert await endpoint.count_prompt("/v1/tokenize", COUNT_BODY, limit_s=30.0) == 3
    finally:
        await endpoint.aclose()


async def test_a_stream_of_trickled_tokens_ends_at_its_deadline(servers: ServerGroup) -> None:
    # 60 tokens (below the runaway cut-off of 80), one every 0.2 s: 12 s, every token well inside the idle
    # timeout (3 s: a loaded machine's stall of the dribbling server stays below it); the deadline is
    # 3 s + 80 x 0.01 s.
    server = servers.start("dribble", "--mode", "slow_tokens", "--interval", "0.2", "--count", "60")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=3.0, bounds=Bounds(seconds_per_token=0.01))
    try:
        with pytest.raises(StreamStalled, match=r"within 4s \(the request's total deadline") as caught:
            await endpoint.stream_chat(CHAT_BODY, max_tokens=16)
    finally:
        await endpoint.aclose()
    assert caught.value.retryable


async def test_a_stream_that_finishes_in_time_is_whole(servers: ServerGroup) -> None:
    server = servers.start("dribble", "--mode", "slow_tokens", "--interval", "0", "--count", "5")
    endpoint = Endpoint(server.url, max_in_flight=1, idle_timeout=30.0)
    try:
        completion, _ = await endpoint.stream_chat(CHAT_BODY, max_tokens=16)
    finally:
        await endpoint.aclose()
    assert completion.content == " word" * 5
    assert completion.finish_reason == "stop"
