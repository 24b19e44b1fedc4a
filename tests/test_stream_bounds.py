"""Every stream has a bound the server cannot defeat: a server that streams past max_tokens without
finishing is cut off as a RunawayStream (retried), and SSE comments do not reset the idle timer.

The servers are oddserver's `runaway` and `ping_only` modes; each test waits on the client's answer,
never on wall time (the idle timeouts only have to fire at all for the test to end).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.errors import RunawayStream, StreamStalled
from client.wire.endpoint import Endpoint, token_limit
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
