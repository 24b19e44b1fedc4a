"""The simulated server's tokenize route (simulator/tokenize.py) over real sockets: its count is the count
the same chat request's usage reports, with and without `--tokenizer`, and it refuses as SGLang 0.5.23 does."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from simulator.config import SimConfig
from simulator.server import SimServer
from tests.conftest import WEATHER_TOOL
from tests.tokenizer_fixture import load_tiny, tiny_tokenizer_dir

CONTEXT = 3000
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}
THINKING_ON = {"chat_template_kwargs": {"enable_thinking": True}}
CHATS: dict[str, dict[str, Any]] = {
    "plain": {},
    "tools": {"tools": [WEATHER_TOOL]},
    "thinking_off": THINKING_OFF,
    "thinking_on": THINKING_ON,
    "tools_thinking_off": {"tools": [WEATHER_TOOL], **THINKING_OFF},
    "tool_choice_none": {"tools": [WEATHER_TOOL], "tool_choice": "none"},
    "system_and_history": {"messages": [
        {"role": "system", "content": "Be brief."}, *USER,
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21"}], "tools": [WEATHER_TOOL]},
    "ends_with_assistant": {"messages": [*USER, {"role": "assistant", "content": "Let me check"}]},
}


@asynccontextmanager
async def serving(tokenizer: Path | None, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = SimConfig(port=0, speed=500.0, mean_tokens=10, max_gen_tokens=50, context_length=CONTEXT,
                       tokenizer=str(tokenizer) if tokenizer else None, **settings)
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=10.0) as client:
        yield client


def _request(case: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": USER, **case}


async def _chat(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/chat/completions", json={**body, "max_tokens": 1, "return_prompt_token_ids": True})
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


async def _tokenize(client: httpx.AsyncClient, body: dict[str, Any], path: str = "/v1/tokenize") -> dict[str, Any]:
    resp = await client.post(path, json=body)
    assert resp.status_code == 200, resp.text
    assert list(resp.json()) == ["tokens", "count", "max_model_len"]
    return resp.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", list(CHATS), ids=list(CHATS))
async def test_the_tokenizers_ids_are_the_chat_requests_prompt_ids(case: str) -> None:
    async with serving(tiny_tokenizer_dir()) as client:
        body = _request(CHATS[case])
        chat, tokens = await _chat(client, body), await _tokenize(client, body)
    assert tokens["tokens"] == chat["choices"][0]["prompt_token_ids"]
    assert tokens["count"] == chat["usage"]["prompt_tokens"] == len(tokens["tokens"])


@pytest.mark.parametrize("case", list(CHATS), ids=list(CHATS))
async def test_without_a_tokenizer_the_count_is_usage_prompt_tokens(case: str) -> None:
    async with serving(None) as client:
        body = _request(CHATS[case])
        chat, tokens = await _chat(client, body), await _tokenize(client, body)
    assert tokens["count"] == chat["usage"]["prompt_tokens"] == len(tokens["tokens"])
    assert all(isinstance(t, int) for t in tokens["tokens"])
    assert tokens["max_model_len"] == CONTEXT


async def test_thinking_and_tools_change_the_count_as_the_template_renders_them() -> None:
    async with serving(tiny_tokenizer_dir()) as client:
        counts = {case: (await _tokenize(client, _request(CHATS[case])))["count"]
                  for case in ("plain", "thinking_on", "thinking_off", "tools")}
    assert counts["plain"] == counts["thinking_on"]  # thinking is the template's default
    assert counts["thinking_off"] > counts["plain"]  # the empty think block it opens the reply with
    assert counts["tools"] > counts["plain"]


async def test_both_paths_answer_alike_and_a_long_prompt_is_counted_not_refused() -> None:
    long = {"messages": [{"role": "user", "content": "weather " * CONTEXT}]}
    async with serving(tiny_tokenizer_dir()) as client:
        v1, bare = await _tokenize(client, _request({})), await _tokenize(client, _request({}), "/tokenize")
        counted = await _tokenize(client, _request(long))
        refused = await client.post("/v1/chat/completions", json=_request(long))
    assert v1 == bare
    assert counted["count"] >= CONTEXT and refused.status_code == 400


async def test_max_model_len_is_the_tokenizers_else_the_context_length(tmp_path: Path) -> None:
    """SGLang reports the tokenizer's `model_max_length` (the tiny one says 4096), which --context-length does
    not change; a tokenizer without one (transformers' 1e30 sentinel) gives the context length."""
    folder = tmp_path / "tokenizer"
    shutil.copytree(tiny_tokenizer_dir(), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 4096
    async with serving(folder) as client:
        assert (await _tokenize(client, _request({})))["max_model_len"] == 4096
    config["model_max_length"] = 1000000000000000019884624838656
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    async with serving(folder) as client:
        assert (await _tokenize(client, _request({})))["max_model_len"] == CONTEXT


async def test_a_prompt_text_is_encoded_with_the_tokenizer() -> None:
    tiny = load_tiny()
    texts = ["What is the weather in Paris?", "", "sunny, 21"]
    async with serving(tiny_tokenizer_dir()) as client:
        one = await _tokenize(client, {"prompt": texts[0]})
        many = await _tokenize(client, {"prompt": texts})
    assert one["tokens"] == tiny.encode(texts[0]).ids and one["count"] == len(one["tokens"])
    assert many["tokens"] == [tiny.encode(t).ids for t in texts]
    assert many["count"] == [len(tiny.encode(t).ids) for t in texts]


async def test_without_a_tokenizer_a_prompt_text_counts_a_token_per_four_bytes() -> None:
    async with serving(None) as client:
        many = await _tokenize(client, {"prompt": ["", "abcd", "abcde", "数据"]})
    assert many["count"] == [0, 1, 2, 2] == [len(ids) for ids in many["tokens"]]


async def test_add_generation_prompt_false_renders_the_messages_as_given() -> None:
    async with serving(tiny_tokenizer_dir()) as client:
        default = await _tokenize(client, _request({}))
        bare = await _tokenize(client, _request({"add_generation_prompt": False}))
        explicit = await _tokenize(client, _request({"add_generation_prompt": True}))
    assert explicit == default
    assert default["tokens"][:bare["count"]] == bare["tokens"] and bare["count"] < default["count"]


CALL_NOT_JSON = [*USER, {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{city"}}]},
    {"role": "user", "content": "and?"}]
REFUSALS: dict[str, tuple[Any, int, str, str | None]] = {
    # name: body (bytes as sent), status, type, the message when it is SGLang's word for word
    "neither_messages_nor_prompt": ({"model": "m"}, 400, "Bad Request", None),
    "both_messages_and_prompt": ({"messages": USER, "prompt": "hi"}, 400, "Bad Request", None),
    "prompt_not_text": ({"prompt": 3}, 400, "Bad Request", None),
    "bad_role": ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "Bad Request", None),
    "not_json": (b'{"model": ', 400, "Bad Request", None),
    "not_an_object": (b"[1]", 400, "Bad Request", None),  # chat's request model crashes on it instead (a 500)
    "empty_messages": ({"messages": []}, 400, "BadRequestError", "Messages cannot be empty."),
    "required_without_tools": ({"messages": USER, "tool_choice": "required"}, 400, "BadRequestError",
                               "Tools cannot be empty if tool choice is set to required."),
    "history_arguments_not_json": ({"messages": CALL_NOT_JSON}, 400, "BadRequestError",
                                   "Assistant tool call function.arguments must be valid JSON."),
    "stream": ({"messages": USER, "stream": True}, 501, "NotImplementedError",
               "OpenAIServingTokenize does not support streaming requests"),
}


@pytest.mark.parametrize("tokenizer", [True, False], ids=["tokenizer", "no_tokenizer"])
@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
async def test_refusals(case: str, tokenizer: bool) -> None:
    body, status, err_type, message = REFUSALS[case]
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with serving(tiny_tokenizer_dir() if tokenizer else None) as client:
        resp = await client.post("/v1/tokenize", content=content, headers={"content-type": "application/json"})
    assert resp.status_code == status, resp.text
    error = resp.json()
    assert list(error) == ["object", "message", "type", "param", "code"]
    assert (error["object"], error["type"], error["param"], error["code"]) == ("error", err_type, None, status)
    if message is not None:
        assert error["message"] == message


async def test_a_body_that_is_not_json_typed_is_refused() -> None:
    async with serving(None) as client:
        resp = await client.post("/v1/tokenize", content=json.dumps({"prompt": "hi"}).encode())
    assert resp.status_code == 400 and resp.json()["type"] == "Bad Request"


async def test_the_model_is_checked_only_under_strict_model() -> None:
    body = {"model": "not-served", "prompt": "hi"}
    async with serving(None) as client:
        assert (await client.post("/v1/tokenize", json=body)).status_code == 200
    async with serving(None, strict_model=True) as client:
        resp = await client.post("/v1/tokenize", json=body)
        assert (await client.post("/v1/tokenize", json={"prompt": "hi"})).status_code == 200
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
