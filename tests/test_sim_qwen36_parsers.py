"""The simulator playing Qwen3.6 (`--chat-template qwen3.6`) held to SGLang 0.5.23's own output parsers.

A real server started with `--reasoning-parser qwen3 --tool-call-parser qwen3_coder` turns the model's text
into `reasoning_content`, `content` and `tool_calls`, streamed and whole. Here the simulated model's text is
its reply's own ids (`return_token_ids`) decoded as SGLang's detokenizer does (special tokens skipped), and
SGLang's `ReasoningParser("qwen3")` and `FunctionCallParser(..., "qwen3_coder")`, imported from its venv
(tests/engines/sglang_parsers.py, `serving_chat.py`'s steps), parse that text whole and token by token. The
simulator's answers, whole and streamed (deltas put together per field and per call), must equal theirs on
every one of REPLIES generated replies with tools (and so must the split of the simulator's text routes,
`/v1/detokenize`, `/separate_reasoning` and `/parse_function_call`, which stitch a continued reply):
several tool schemas (strings, enums, integers, numbers, booleans, arrays, objects, nulls, no arguments,
unicode), one to three calls, thinking on and off, `tool_choice` auto, required, named and none, single
and multi-turn prompts, and one in eight cut by
`max_tokens` in its reasoning or content. Not held: a reply cut inside a call. SGLang's whole answer then keeps
the complete calls only (or, with none complete, what its fallback reads of the open one), where the
simulator reports the open call's arguments as far as they went.

Each reply that stopped by itself is also a fixed point of the template: the parsed reply rendered back into
the conversation by the chat template (the replica of Qwen3.6's own, simulator/qwen36_chat_template.jinja)
gives the server's ids exactly, as a trainer re-rendering the data would.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from simulator.fleet import SimFleet, SimServerSpec
from simulator.tiny_tokenizer import tiny_tokenizer_dir
from simulator.tokens import SimTokenizer
from tests.conftest import WEATHER_TOOL

pytestmark = [pytest.mark.sglang_server, pytest.mark.slow]

REPLIES = 240
DRIVER = Path(__file__).resolve().parent / "engines" / "sglang_parsers.py"


def _tool(name: str, properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": properties}
    params["required"] = list(properties) if required is None else required
    return {"type": "function", "function": {"name": name, "description": f"{name} tool", "parameters": params}}


TOOLS = [
    WEATHER_TOOL,
    _tool("search", {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50},
                     "exact": {"type": "boolean"}}),
    _tool("compute", {"x": {"type": "number"}, "y": {"type": "number", "minimum": -5, "maximum": 5},
                      "op": {"type": "string", "enum": ["add", "mul"]}}),
    _tool("order", {"items": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["name", "qty"]}},
                    "note": {"type": "string", "maxLength": 12},
                    "meta": {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]}}),
    _tool("ping", {}),
    _tool("label", {"tags": {"type": "array", "items": {"type": "string"}}, "level": {"type": "integer"},
                    "parent": {"type": "null"}}, required=["tags"]),
    _tool("translate", {"text": {"type": "string"}, "target": {"type": "string", "enum": ["fr", "中文", "de"]}}),
]


def _case(i: int) -> dict[str, Any]:
    """The i-th request: its tools, thinking switch, tool_choice and conversation follow from i."""
    tools = [TOOLS[(i + k) % len(TOOLS)] for k in range(1 + i % 3)]
    body: dict[str, Any] = {"model": "m", "tools": tools,
                            "messages": [{"role": "user", "content": f"Request {i}: use the tools as needed."}]}
    if i % 4 == 3:
        body["chat_template_kwargs"] = {"enable_thinking": False}
    if i % 10 == 4:
        body["tool_choice"] = "required"
    elif i % 10 == 7:
        body["tool_choice"] = {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
    elif i % 20 == 9:
        body["tool_choice"] = "none"
    if i % 5 == 1:  # a tool loop: the reply follows a call and its result
        body["messages"] += [
            {"role": "assistant", "content": "", "reasoning_content": "I should look.",
             "tool_calls": [{"id": f"call_{i}", "type": "function",
                             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "sunny, 21"}]
    if i % 2:
        body["parallel_tool_calls"] = True
    return body


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spec = SimServerSpec(max_running=16, speed=1000.0, extra_args=(
        "--chat-template", "qwen3.6", "--tool-call-rate", "0.85", "--mean-tokens", "40",
        "--max-gen-tokens", "400"))
    with SimFleet([spec], log_dir=tmp_path_factory.mktemp("sim-logs")) as fleet:
        yield fleet.urls[0]


class Parsers:
    """SGLang's parsers in their venv: one case in, one answer out (tests/engines/sglang_parsers.py)."""

    def __init__(self, python: Path) -> None:
        self.proc = subprocess.Popen([str(python), str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8")

    def parse(self, case: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(orjson.dumps(case).decode() + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the SGLang parser driver ended (exit {self.proc.poll()}); its stderr is above"
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def parsers(sglang_venv_python: Path) -> Iterator[Parsers]:
    driver = Parsers(sglang_venv_python)
    try:
        yield driver
    finally:
        driver.close()


def _increments(tok: SimTokenizer, ids: list[int]) -> list[str]:
    """The text as SGLang's detokenizer hands it to the parsers: token by token, special tokens skipped, a step
    that ends inside a character held back until the character is whole."""
    out: list[str] = []
    sent = ""
    for n in range(1, len(ids) + 1):
        text = tok.tokenizer.decode(ids[:n], skip_special_tokens=True)
        if text.endswith("\ufffd"):
            continue
        out.append(text[len(sent):])
        sent = text
    return out


def _whole(message: dict[str, Any]) -> dict[str, Any]:
    calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
             for c in message.get("tool_calls") or []]
    return {"reasoning": message.get("reasoning_content"), "content": message["content"], "calls": calls}


def _streamed(url: str, body: dict[str, Any]) -> dict[str, Any]:
    reasoning, content = "", ""
    calls: dict[int, dict[str, Any]] = {}
    with httpx.Client(timeout=120) as client, client.stream(
            "POST", f"{url}/v1/chat/completions", json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = orjson.loads(line[len("data:"):])
            for choice in chunk.get("choices") or []:
                delta = choice["delta"]
                reasoning += delta.get("reasoning_content") or ""
                content += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    entry = calls.setdefault(call["index"], {"name": None, "arguments": ""})
                    if call["function"].get("name"):
                        entry["name"] = call["function"]["name"]
                    entry["arguments"] += call["function"].get("arguments") or ""
    return {"reasoning": reasoning or None, "content": content, "calls": [calls[i] for i in sorted(calls)]}


def _text_routes(url: str, ids: list[int], tools: list[dict[str, Any]], thinking: bool) -> dict[str, Any]:
    """The reply split by the simulator's text routes as client.extend.stitch calls them: `/v1/detokenize`,
    `/separate_reasoning` (the text behind `<think>` when thinking is on, as the chat's forced reasoning reads
    it) and `/parse_function_call`."""
    with httpx.Client(base_url=url, timeout=60) as client:
        text = client.post("/v1/detokenize", json={"tokens": ids}).json()["text"]
        split = client.post("/separate_reasoning", json={"text": ("<think>" if thinking else "") + text,
                                                         "reasoning_parser": "qwen3"}).json()
        parsed = client.post("/parse_function_call", json={"text": split["text"], "tools": tools,
                                                           "tool_call_parser": "qwen3_coder"}).json()
    calls = [{"name": c["name"], "arguments": c["parameters"]} for c in parsed["calls"]]
    return {"reasoning": split["reasoning_text"] or None, "content": parsed["normal_text"], "calls": calls}


def _ask(url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(f"{url}/v1/chat/completions", json={**body, "return_token_ids": True}, timeout=120)
    assert resp.status_code == 200, resp.text
    choice: dict[str, Any] = resp.json()["choices"][0]
    return choice


def test_replies_parse_as_sglang_parses_them(sim_url: str, parsers: Parsers) -> None:
    tok = SimTokenizer(tiny_tokenizer_dir(chat_template="qwen3.6"))
    seen = {"calls": 0, "thinking": 0, "content_before_calls": 0, "stopped": 0, "cut": 0}
    call_start = tok.tokenizer.token_to_id("<tool_call>")
    for i in range(REPLIES):
        body = _case(i)
        thinking = body.get("chat_template_kwargs", {}).get("enable_thinking", True)
        if i % 8 == 6:  # cut by max_tokens somewhere in the reasoning or the content (see the module docstring)
            ids = _ask(sim_url, body)["response_token_ids"]
            before = ids.index(call_start) if call_start in ids else len(ids)
            body["max_tokens"] = 1 + (i * 7) % max(1, before - 1)
        choice = _ask(sim_url, body)
        ids = choice["response_token_ids"]
        case = {"text": _increments(tok, ids), "tools": body["tools"], "tool_choice": body.get("tool_choice"),
                "thinking": thinking}
        real = parsers.parse(case)
        sim_whole = _whole(choice["message"])
        assert sim_whole == real["whole"], (i, case["text"])
        if body.get("tool_choice") != "none":  # tool parsing on: what a continued reply is split with
            assert _text_routes(sim_url, ids, body["tools"], thinking) == real["whole"], (i, case["text"])
        streamed = _streamed(sim_url, body)
        del real["streamed"]["deltas"]
        assert streamed == real["streamed"], (i, case["text"])
        if choice["finish_reason"] != "length":
            seen["stopped"] += 1
            again = tok.completion_ids(body, thinking, choice["message"], choice["finish_reason"])
            assert again.ids == ids, (i, "the template does not write the reply back as it was generated")
        else:
            seen["cut"] += 1
        seen["calls"] += bool(sim_whole["calls"])
        seen["thinking"] += thinking
        seen["content_before_calls"] += bool(sim_whole["calls"] and sim_whole["content"].strip())
    # The generated set covers what it claims to.
    print(f"{REPLIES} replies with tools, all equal to SGLang's parsers: {seen}")
    assert seen["calls"] >= REPLIES // 2 and seen["thinking"] >= REPLIES // 2, seen
    assert seen["content_before_calls"] >= 20 and seen["stopped"] >= REPLIES // 2 and seen["cut"] >= 20, seen
