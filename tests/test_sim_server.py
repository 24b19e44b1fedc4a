"""The simulated SGLang server over real sockets: stream shape, reply rules, load views, faults."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from simulator.config import SimConfig
from simulator.server import SimServer

FAST = SimConfig(port=0, speed=200.0, mean_tokens=60, max_gen_tokens=2000)
USER = [{"role": "user", "content": "Explain the capacity model in one paragraph."}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "units": {"type": "string", "enum": ["c", "f"]},
                "hourly": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["city", "days", "hourly", "tags"],
        },
    },
}


@asynccontextmanager
async def serving(**overrides: Any) -> AsyncIterator[tuple[SimServer, httpx.AsyncClient]]:
    config = dataclasses.replace(FAST, **overrides)
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=10.0) as client:
        yield srv, client


def body(messages: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "Qwen/Qwen3.6-27B", "messages": messages or USER}
    out.update(extra)
    return out


async def events(client: httpx.AsyncClient, payload: dict[str, Any]) -> list[Any]:
    """All SSE data payloads of one stream: parsed JSON, or the raw string for [DONE]."""
    out: list[Any] = []
    async with asyncio.timeout(15), client.stream("POST", "/v1/chat/completions", json=payload) as resp:
        assert resp.status_code == 200, await resp.aread()
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                out.append(data if data == "[DONE]" else json.loads(data))
    return out


def deltas(evs: list[Any]) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in evs if isinstance(e, dict) and e.get("choices")]


def text_of(evs: list[Any], field: str) -> str:
    return "".join(d.get(field) or "" for d in deltas(evs))


async def test_stream_chunk_order_and_fields() -> None:
    async with serving() as (_, client):
        evs = await events(client, body(stream=True, stream_options={"include_usage": True}))
    assert evs[-1] == "[DONE]"
    first, *middle, finish, usage_chunk, _ = evs
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert first["choices"][0]["delta"]["content"] == ""
    assert {e["id"] for e in evs[:-1]} == {first["id"]}
    assert finish["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(e["choices"][0]["finish_reason"] is None for e in middle)
    # Reasoning comes first, then content, never interleaved.
    kinds = ["r" if d["reasoning_content"] else "c" for d in deltas(middle)]
    assert kinds == sorted(kinds, reverse=True) and kinds[0] == "r" and "c" in kinds
    assert usage_chunk["choices"] == []
    usage = usage_chunk["usage"]
    assert set(usage) >= {"prompt_tokens", "completion_tokens", "total_tokens", "completion_tokens_details"}
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert 0 < usage["completion_tokens_details"]["reasoning_tokens"] < usage["completion_tokens"]
    assert usage["reasoning_tokens"] == usage["completion_tokens_details"]["reasoning_tokens"]


async def test_continuous_usage_counts_every_chunk() -> None:
    async with serving(tokens_per_chunk=3) as (_, client):
        evs = await events(client, body(stream=True, stream_options={"include_usage": True,
                                                                     "continuous_usage_stats": True}))
    # As in SGLang, the running counts ride on the deltas, not on the role or the finish chunk.
    chunks = [e for e in evs if isinstance(e, dict)]
    assert "usage" not in chunks[0] and "usage" not in chunks[-2]
    final = chunks[-1]["usage"]["completion_tokens"]
    running = [e["usage"]["completion_tokens"] for e in chunks[1:-2]]
    assert running == sorted(running) and running[-1] == final and running[0] >= 1
    # With MTP a step writes several tokens, so the count is not the number of chunks.
    assert final > len({*running}) > 1


async def test_no_usage_chunk_unless_asked() -> None:
    async with serving() as (_, client):
        evs = await events(client, body(stream=True))
    assert all(e == "[DONE]" or e["choices"] for e in evs)


async def test_reasoning_field_can_use_vllm_name() -> None:
    async with serving(reasoning_field="reasoning") as (_, client):
        evs = await events(client, body(stream=True))
        full = (await client.post("/v1/chat/completions", json=body())).json()
    assert text_of(evs, "reasoning") and not text_of(evs, "reasoning_content")
    assert "reasoning_content" not in deltas(evs)[1]
    assert full["choices"][0]["message"]["reasoning"] == text_of(evs, "reasoning")


async def test_enable_thinking_false_gives_no_reasoning() -> None:
    payload = body(stream=True, stream_options={"include_usage": True},
                   chat_template_kwargs={"enable_thinking": False})
    async with serving() as (_, client):
        evs = await events(client, payload)
    assert not text_of(evs, "reasoning_content")
    assert text_of(evs, "content")
    assert evs[-2]["usage"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
async def test_max_tokens_cuts_with_length(field: str) -> None:
    async with serving(mean_tokens=400) as (_, client):
        full = (await client.post("/v1/chat/completions", json=body())).json()
        capped: dict[str, Any] = {field: 7}
        short = (await client.post("/v1/chat/completions", json=body(None, **capped))).json()
    assert short["choices"][0]["finish_reason"] == "length"
    assert short["usage"]["completion_tokens"] == 7
    assert full["usage"]["completion_tokens"] > 7
    # A shorter cap yields a prefix of the same reply.
    assert full["choices"][0]["message"]["reasoning_content"].startswith(
        short["choices"][0]["message"]["reasoning_content"])


async def test_same_request_same_text_streamed_or_not() -> None:
    async with serving() as (_, client):
        a = await events(client, body(stream=True))
        b = await events(client, body(stream=True))
        c = (await client.post("/v1/chat/completions", json=body())).json()
        other = await events(client, body([{"role": "user", "content": "Something else entirely."}], stream=True))
    for field in ("reasoning_content", "content"):
        assert text_of(a, field) == text_of(b, field)
        assert (c["choices"][0]["message"][field] or "") == text_of(a, field)
    assert text_of(other, "reasoning_content") != text_of(a, "reasoning_content")


def _check_weather_args(arguments: str) -> None:
    args = json.loads(arguments)
    assert isinstance(args["city"], str)
    assert isinstance(args["days"], int) and 1 <= args["days"] <= 7
    assert isinstance(args["hourly"], bool)
    assert isinstance(args["tags"], list) and all(isinstance(t, str) for t in args["tags"])
    assert args.get("units", "c") in ("c", "f")


async def test_tool_call_deltas_carry_valid_json_arguments() -> None:
    seen_parallel = False
    async with serving(tool_call_rate=1.0) as (_, client):
        for i in range(12):
            msgs = [{"role": "user", "content": f"What is the weather in city number {i}?"}]
            evs = await events(client, body(msgs, stream=True, tools=[WEATHER_TOOL]))
            calls: dict[int, dict[str, Any]] = {}
            for d in deltas(evs):
                for tc in d.get("tool_calls") or []:
                    if tc["index"] not in calls:
                        assert tc["id"].startswith("call_") and tc["type"] == "function"
                        assert tc["function"] == {"name": "get_weather", "arguments": ""}
                        calls[tc["index"]] = {"arguments": ""}
                    else:
                        assert tc["id"] is None and tc["function"]["name"] is None
                        calls[tc["index"]]["arguments"] += tc["function"]["arguments"]
            assert calls and sorted(calls) == list(range(len(calls)))
            for call in calls.values():
                _check_weather_args(call["arguments"])
            assert evs[-2]["choices"][0]["finish_reason"] == "tool_calls"
            seen_parallel = seen_parallel or len(calls) > 1
        full = (await client.post("/v1/chat/completions", json=body(tools=[WEATHER_TOOL]))).json()
    assert seen_parallel
    message = full["choices"][0]["message"]
    assert full["choices"][0]["finish_reason"] == "tool_calls"
    for tc in message["tool_calls"]:
        _check_weather_args(tc["function"]["arguments"])


async def test_the_qwen_parser_loses_the_text_that_shares_a_chunk_with_a_call() -> None:
    """As SGLang 0.5.23's qwen parser streams (Qwen25Detector): the text in the same increment as
    "<tool_call>" is in no chunk, so the streamed content is a prefix of the reply's; qwen3_coder keeps it.
    Eight tokens per chunk put a reply's last words and its call's start in one chunk. The qwen parser reads
    the hermes JSON calls of the Qwen3 style, so the model played is that one (Qwen3.6's XML calls are
    qwen3_coder's)."""
    streamed: dict[tuple[str, int], tuple[str, list[str]]] = {}
    for parser in ("qwen3_coder", "qwen"):
        async with serving(tool_call_rate=1.0, tokens_per_chunk=8, tool_call_parser=parser,
                           chat_template="qwen3") as (_, client):
            for i in range(8):
                msgs = [{"role": "user", "content": f"What is the weather in city number {i}?"}]
                evs = await events(client, body(msgs, stream=True, tools=[WEATHER_TOOL]))
                names = [tc["function"]["name"] for d in deltas(evs) for tc in d.get("tool_calls") or []
                         if tc["function"]["name"]]
                streamed[parser, i] = (text_of(evs, "content"), names)
    lost = 0
    for i in range(8):
        (kept, calls), (cut, cut_calls) = streamed["qwen3_coder", i], streamed["qwen", i]
        assert calls and cut_calls == calls, i
        assert kept.startswith(cut), (i, kept, cut)
        lost += cut != kept
    assert lost > 0


async def test_tool_choice_none_means_no_calls() -> None:
    async with serving(tool_call_rate=1.0) as (_, client):
        full = (await client.post("/v1/chat/completions",
                                  json=body(tools=[WEATHER_TOOL], tool_choice="none"))).json()
    assert "tool_calls" not in full["choices"][0]["message"]  # SGLang leaves the key out when there are none


@pytest.mark.parametrize("random_chunk", [False, True])
async def test_mtp_chunks_carry_several_tokens(random_chunk: bool) -> None:
    async with serving(tokens_per_chunk=4, random_chunk=random_chunk, mean_tokens=200) as (_, client):
        evs = await events(client, body(stream=True, stream_options={"include_usage": True}))
    text_chunks = [d for d in deltas(evs) if d["reasoning_content"] or d.get("content")]
    tokens = evs[-2]["usage"]["completion_tokens"]
    assert 0 < len(text_chunks) < (tokens / 1.5 if random_chunk else tokens / 3)


async def test_omit_nulls_and_omit_done() -> None:
    async with serving(omit_nulls=True, omit_done=True) as (_, client):
        evs = await events(client, body(stream=True))
    assert "[DONE]" not in evs
    assert evs[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    for e in evs:
        assert "usage" not in e
        assert None not in e["choices"][0]["delta"].values()
        assert "logprobs" not in e["choices"][0]


async def test_request_errors() -> None:
    async with serving() as (_, client):
        bad_json = await client.post("/v1/chat/completions", content=b"{not json",
                                     headers={"content-type": "application/json"})
        no_messages = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        token_ids = await client.post("/v1/chat/completions", json=body(stream=True, return_token_ids=True))
        token_ids_ok = await client.post("/v1/chat/completions", json=body(return_token_ids=True))
        zero = await client.post("/v1/chat/completions", json=body(max_tokens=0))
        negative = await client.post("/v1/chat/completions", json=body(max_tokens=-1))
        other_model = await client.post("/v1/chat/completions", json=body(model="gpt-4o"))
        required = await client.post("/v1/chat/completions", json=body(tool_choice="required"))
        unknown_tool = await client.post("/v1/chat/completions", json=body(
            tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert bad_json.status_code == 400 and bad_json.json()["object"] == "error"
    assert no_messages.status_code == 400
    assert token_ids.status_code == 400
    err = token_ids.json()
    assert err["code"] == 400 and err["type"] == "BadRequest"
    assert "return_token_ids is not supported with streaming" in err["message"]
    assert token_ids_ok.status_code == 200
    # SGLang answers max_tokens 0 with an empty reply cut by length, and refuses a negative cap.
    assert zero.status_code == 200 and zero.json()["choices"][0]["finish_reason"] == "length"
    assert zero.json()["usage"]["completion_tokens"] == 0
    assert negative.status_code == 400 and "max_new_tokens must be at least 0" in negative.json()["message"]
    assert required.status_code == 400 and unknown_tool.status_code == 400
    assert "nope" in unknown_tool.json()["message"]
    # Real SGLang does not check the model name: it answers and echoes the name back.
    assert other_model.status_code == 200 and other_model.json()["model"] == "gpt-4o"


async def test_strict_model_answers_404() -> None:
    async with serving(strict_model=True) as (_, client):
        resp = await client.post("/v1/chat/completions", json=body(model="gpt-4o"))
        ok = await client.post("/v1/chat/completions", json=body(max_tokens=3))
        card = await client.get("/v1/models/gpt-4o")
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert ok.status_code == 200
    assert card.status_code == 404


async def test_models_server_info_and_legacy_load() -> None:
    async with serving(dp_size=2) as (_, client):
        models = (await client.get("/v1/models")).json()
        card = (await client.get("/v1/models/Qwen/Qwen3.6-27B")).json()
        info = (await client.get("/server_info")).json()
        legacy = (await client.get("/get_load")).json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "Qwen/Qwen3.6-27B" and models["data"][0]["owned_by"] == "sglang"
    assert models["data"][0]["max_model_len"] == 262144
    assert card["id"] == "Qwen/Qwen3.6-27B"
    assert info["dp_size"] == 2 and info["max_running_requests"] == 64
    assert [x["dp_rank"] for x in legacy] == [0, 1]
    assert set(legacy[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens", "num_pending_tokens",
                              "ts_tic"}


async def test_health_is_503_during_startup_delay() -> None:
    # A delay long enough that the first two requests land inside it on a loaded machine too.
    async with serving(startup_delay=4.0) as (_, client):
        early = await client.get("/health")
        chat = await client.post("/v1/chat/completions", json=body())
        for _ in range(1200):  # ready once the delay is over: within 60 s
            late = await client.get("/health")
            if late.status_code != 503:
                break
            await asyncio.sleep(0.05)
    assert early.status_code == 503 and chat.status_code == 503
    assert late.status_code == 200
