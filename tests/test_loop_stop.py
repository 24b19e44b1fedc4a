"""The loop stop (`--loop-stop on`, the default): a reply whose tail repeats one block exactly is ended by the
client once it has used 90% of its max_tokens and the repeats cover the rule's floor (8,192 characters of
prose), kept with finish_reason `repetition`, and its server slot is freed; a varied long reply, or a long
table of numbers, is never stopped (tests/test_loop_precision.py holds the rule to a labelled corpus). The
parser is tested on recorded event bytes, the endpoint and the run against the simulator with `--loop-rate`
(simulator), over real sockets."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.loop_corpus import by_name
from client.loops.repetition import RepetitionDetector, stop_floor
from client.results.reader import iter_records
from client.wire.endpoint import LOOP_FINISH_REASON, Endpoint
from client.wire.http1 import Headers
from client.wire.sse import StreamParser
from client.wire.transport import StreamResponse
from simulator.config import SimConfig
from simulator.script import build_script
from simulator.server import SimServer
from tests.conftest import make_prompts, run_client
from tests.scripted_transport import ScriptedTransport, sse_reply

REPO = Path(__file__).resolve().parent.parent
PROSE = "\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])[:30_000]

MAX_TOKENS = 6000


def sse(pieces: list[str], *, usage_every: bool = True) -> bytes:
    events = []
    for n, piece in enumerate(pieces, 1):
        chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {"reasoning_content": piece}}]}
        if usage_every:
            chunk["usage"] = {"prompt_tokens": 11, "completion_tokens": n}
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    return b"".join(events)


LOOP = ["Let me", " check", " the", " cache", " again", ".", " Wait,", " the", " key", " is", " stale", ".\n"]


@pytest.mark.parametrize(("pieces", "loops"), [
    (LOOP * 300, True),  # one block of 12 pieces, over and over
    ([f"Step {i}: try the next key and check whether it is stale.\n" for i in range(400)], True),  # a counter
    ([PROSE[i:i + 40] for i in range(0, len(PROSE), 40)], False),  # long, varied prose (code blocks, tables)
    ([f"| {i} | {i * i} | {i % 7} |\n" for i in range(600)], False),  # a long table of numbers
    (["-" * 40 + "\n"] * 20, False),  # a short repeated rule line
], ids=["block", "counter", "varied", "numeric-table", "short-rule"])
def test_the_parser_finds_a_loop_and_only_a_loop(pieces: list[str], loops: bool) -> None:
    parser = StreamParser(RepetitionDetector())
    parser.feed(sse(pieces))
    assert (parser.loop is not None) == loops
    if loops:
        stopped = parser.stopped(LOOP_FINISH_REASON)
        assert stopped.finish_reason == "repetition"
        assert stopped.usage["completion_tokens"] == len(pieces)  # the last running usage
        assert stopped.usage["prompt_tokens"] == 11
        assert stopped.reasoning == "".join(pieces)


def test_without_a_watch_the_parser_never_looks() -> None:
    parser = StreamParser()
    parser.feed(sse(LOOP * 300))
    assert parser.loop is None


def _body(i: int, max_tokens: int = MAX_TOKENS) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"Question {i}: how do caches work?"}],
            "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "chat_template_kwargs": {"enable_thinking": True}}


async def _running(endpoint: Endpoint) -> int:
    document = await endpoint.get_json("/v1/loads")
    return sum(int(rank["num_running_reqs"]) for rank in document["loads"])


async def test_the_stop_ends_the_request_on_the_server_and_frees_its_slot() -> None:
    # Slow enough that the looping reply would stream for minutes: the slot is freed only by the stop.
    config = SimConfig(port=0, speed=2.0, tokens_per_chunk=4, mean_tokens=600, loop_rate=1.0)
    async with SimServer(config) as server:
        endpoint = Endpoint(server.url, max_in_flight=2, idle_timeout=60.0)
        try:
            request = asyncio.create_task(endpoint.stream_chat(orjson.dumps(_body(1)), max_tokens=MAX_TOKENS,
                                                               stop_loops=True))
            while await _running(endpoint) == 0 and not request.done():  # noqa: ASYNC110 - the server's count
                await asyncio.sleep(0.05)
            completion, _ = await request
            assert completion.finish_reason == "repetition"
            # Stopped only once the reply has used most of its budget, and before its end.
            assert stop_floor(MAX_TOKENS) <= completion.usage["completion_tokens"] < MAX_TOKENS
            async with asyncio.timeout(30):
                while await _running(endpoint) > 0:  # noqa: ASYNC110 - until the server's own count drops
                    await asyncio.sleep(0.05)
        finally:
            await endpoint.aclose()


async def test_a_varied_long_reply_runs_to_its_end() -> None:
    config = SimConfig(port=0, speed=1000.0, tokens_per_chunk=16, mean_tokens=3000, loop_rate=0.0)
    async with SimServer(config) as server:
        endpoint = Endpoint(server.url, max_in_flight=2, idle_timeout=60.0)
        try:
            for i in range(6):
                completion, _ = await endpoint.stream_chat(orjson.dumps(_body(i)), max_tokens=MAX_TOKENS,
                                                           stop_loops=True)
                assert completion.finish_reason in ("stop", "length")
        finally:
            await endpoint.aclose()


def _looping_ids(prompts: Path, rate: float) -> set[str]:
    config = SimConfig(mean_tokens=300, loop_rate=rate)
    looping = set()
    for line in prompts.read_text().splitlines():
        record = json.loads(line)
        body = {"messages": record["messages"], "max_tokens": MAX_TOKENS,
                "chat_template_kwargs": {"enable_thinking": True}}
        if record.get("tools"):
            body["tools"] = record["tools"]
        if build_script(body, True, config).loop:
            looping.add(record["id"])
    return looping


@pytest.mark.slow
@pytest.mark.parametrize("loop_stop", ["on", "off"])
def test_a_run_stops_the_looping_replies_and_keeps_them(tmp_path: Path, loop_stop: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 24)
    out = tmp_path / "out"
    result = run_client(["--simulate", "2", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", str(MAX_TOKENS), "--loop-stop", loop_stop,
                         "--sim-arg=--loop-rate", "--sim-arg=0.3", "--sim-arg=--mean-tokens", "--sim-arg=300",
                         # a token per word piece, as the loop lengths above are counted (no tokenizer's ids)
                         "--sim-arg=--tokenizer", "--sim-arg=none"])
    assert result.code == 0, result.stderr
    records = {record["id"]: record for _, record in iter_records(str(out))}
    assert len(records) == 24
    stopped = {i for i, r in records.items() if r["finish_reason"] == "repetition"}
    looping = _looping_ids(prompts, 0.3)
    assert looping, "the seed gives this prompt set some loops"
    if loop_stop == "on":
        assert stopped == looping
        assert all(stop_floor(MAX_TOKENS) <= records[i]["usage"]["completion_tokens"] < MAX_TOKENS for i in stopped)
        assert f"{len(looping)} stopped as loops" in result.stderr
    else:
        assert not stopped
        assert all(records[i]["finish_reason"] == "length" for i in looping)


class _EventByEvent(ScriptedTransport):
    """Feeds the scripted reply one SSE event a read, as a server streams it."""

    async def post(self, path: str, body: bytes, feed: Callable[[bytes], bool | None], *, idle_timeout: float,
                   expect_type: str | None = None) -> StreamResponse:
        answer = self.answers.popleft()
        assert isinstance(answer, bytes)
        for event in answer.split(b"\n\n"):
            if event:
                feed(event + b"\n\n")
        return StreamResponse(200, Headers([("content-type", "text/event-stream")]))


def _words(name: str) -> str:
    return " ".join(by_name(name).text.split())


@pytest.mark.parametrize(("text", "budget", "finish"), [
    (_words("runbook_450"), None, "stop"),  # asked for, counters moving: streamed whole, even when it just fits
    (_words("count_to_1000_words"), None, "stop"),
    (_words("lorem_ipsum_40"), 16_384, "stop"),  # repeated exactly, well inside its budget
    (" ".join(["Wait, let me check the cache key again."] * 1500), None, "repetition"),  # a loop to max_tokens
], ids=["runbook-just-fits", "count-just-fits", "lorem", "loop"])
async def test_a_streamed_reply_is_cut_only_when_it_loops_past_the_floor(text: str, budget: int | None,
                                                                         finish: str) -> None:
    words = len(text.split(" "))
    max_tokens = budget if budget is not None else words + (0 if finish == "repetition" else 1)
    reply = sse_reply(text, finish="length" if finish == "repetition" else "stop")
    endpoint = Endpoint("http://scripted", max_in_flight=1, transport=_EventByEvent(deque([reply])))
    completion, _ = await endpoint.stream_chat(orjson.dumps(_body(0, max_tokens)), max_tokens=max_tokens,
                                               stop_loops=True)
    assert completion.finish_reason == finish
    if finish == "stop":
        assert completion.content == text  # whole, not cut
    else:
        assert stop_floor(max_tokens) <= completion.usage["completion_tokens"] < max_tokens
