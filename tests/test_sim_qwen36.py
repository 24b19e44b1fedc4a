"""The simulator playing Qwen3.6 (`--chat-template qwen3.6`, simulator/qwen36.py), over real sockets: it serves
Qwen3.6-27B's own chat template (its replica, held here to the real file byte for byte), and its model writes
what that model writes: reasoning then `\\n</think>\\n\\n`, tool calls as XML, text trimmed as the template
trims it, so that each reply rendered back by the template is its own ids. The text's parsing is held to
SGLang's own parsers in tests/test_sim_qwen36_parsers.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from simulator.__main__ import config_from_args
from simulator.config import SimConfig
from simulator.qwen36 import TEMPLATES
from simulator.server import SimServer
from simulator.tiny_tokenizer import tiny_tokenizer_dir
from simulator.tokens import SimTokenizer
from tests.conftest import WEATHER_TOOL
from tests.real_templates import QWEN36, template_path

SEARCH_TOOL = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "required": ["query", "limit", "exact", "filters"],
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}, "exact": {"type": "boolean"},
                   "filters": {"type": "array", "items": {"type": "string"}}}}}}
TOOLS = [WEATHER_TOOL, SEARCH_TOOL]


def test_the_template_is_qwen36s_own_byte_for_byte() -> None:
    assert TEMPLATES["qwen3.6"].read_bytes() == template_path(QWEN36).read_bytes()


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_the_tiny_tokenizer_carries_the_chosen_template(name: str) -> None:
    folder = tiny_tokenizer_dir(chat_template=name)  # type: ignore[arg-type]
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == TEMPLATES[name].read_text(encoding="utf-8")
    assert config_from_args(["--chat-template", name]).tokenizer == str(folder)
    assert config_from_args(["--chat-template", name]).chat_template == name


@asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, SimTokenizer]]:
    folder = tiny_tokenizer_dir(chat_template="qwen3.6")
    config = SimConfig(port=0, speed=1000.0, mean_tokens=30, max_gen_tokens=300, tool_call_rate=1.0,
                       tokenizer=str(folder), chat_template="qwen3.6", **settings)
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
        yield client, SimTokenizer(folder)


def _body(i: int, thinking: bool = True, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"Question {i}?"}], "tools": TOOLS,
            "parallel_tool_calls": True, "chat_template_kwargs": {"enable_thinking": thinking}, **extra}


async def _whole(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/v1/chat/completions", json={**body, "return_token_ids": True})
    assert resp.status_code == 200, resp.text
    choice: dict[str, Any] = resp.json()["choices"][0]
    return choice


async def test_a_reply_is_written_as_qwen36_writes_it() -> None:
    async with serving() as (client, tok):
        for i in range(30):
            choice = await _whole(client, _body(i, thinking=i % 3 > 0))
            message, text = choice["message"], tok.tokenizer.decode(choice["response_token_ids"],
                                                                      skip_special_tokens=False)
            assert text.endswith("<|im_end|>") and choice["finish_reason"] in ("stop", "tool_calls")
            reasoning = message["reasoning_content"]
            if i % 3:
                assert reasoning == reasoning.strip() + "\n" and reasoning.strip()
                assert text.startswith(reasoning + "</think>\n\n") and message["content"].startswith("\n\n")
            else:
                assert reasoning is None and "</think>" not in text
            calls = message.get("tool_calls") or []
            for n, call in enumerate(calls):
                args = json.loads(call["function"]["arguments"])
                params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
                                 f"\n</parameter>\n" for k, v in args.items())
                block = f"<tool_call>\n<function={call['function']['name']}>\n{params}</function>\n</tool_call>"
                assert block in text
                assert call["function"]["arguments"] == json.dumps(args, ensure_ascii=False)
                if n == 0:
                    written = message["content"].strip()
                    assert (f"{written}\n\n{block}" if written else block) in text
            # Rendered back by the template, the parsed reply is its own ids: a trainer re-renders it exactly.
            again = tok.completion_ids(_body(i, thinking=i % 3 > 0), i % 3 > 0, message, choice["finish_reason"])
            assert again.ids == choice["response_token_ids"]


async def test_the_stream_carries_the_text_between_calls() -> None:
    """qwen3_coder streams the text outside the calls as content ("\\n\\n" before the first, "\\n" before each
    next); its whole answer keeps only the text before the first call."""
    async with serving() as (client, _tok):
        found = 0
        for i in range(40):
            body = _body(i)
            choice = await _whole(client, body)
            calls = choice["message"].get("tool_calls") or []
            if len(calls) < 2:
                continue
            found += 1
            content = ""
            async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        for part in json.loads(line[6:])["choices"]:
                            content += part["delta"].get("content") or ""
            assert content == choice["message"]["content"] + "\n" * (len(calls) - 1)
        assert found


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no_thinking"])
async def test_a_reply_cut_anywhere_is_answered_within_its_cap(thinking: bool) -> None:
    async with serving() as (client, _tok):
        whole = await _whole(client, _body(3, thinking))
        total = len(whole["response_token_ids"])
        for cap in range(1, total, max(1, total // 25)):
            cut = await _whole(client, {**_body(3, thinking), "max_tokens": cap})
            assert cut["finish_reason"] == "length" and len(cut["response_token_ids"]) <= cap
            kept = cut["response_token_ids"][:-1]  # the last token may differ: the cut ends inside a word piece
            assert whole["response_token_ids"][:len(kept)] == kept


async def test_max_tokens_1_sends_one_token_even_inside_a_character() -> None:
    # A reply whose first character is several of the tiny tokenizer's tokens (a multi-byte one) is among
    # these; an engine still sends the one token it sampled, and holds the half character's text back.
    async with serving() as (client, _):
        for i in range(40):
            body = _body(i, max_tokens=1, return_output_ids_in_sglext=True)
            body["messages"][0]["content"] = f"Reply with the single word OK. ({i})"
            reply = (await client.post("/v1/chat/completions", json=body)).json()
            ids = reply["sglext"]["output_ids"][0]
            assert len(ids) == 1 and reply["usage"]["completion_tokens"] == 1, (i, reply)
