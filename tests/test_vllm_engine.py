"""Proves the real-engine test infrastructure: a CPU vLLM serving the tiny Qwen3 behaves as scripted.

These tests pin what vLLM 0.32 (``--reasoning-parser qwen3 --tool-call-parser hermes``) streams for
the scripted model: reasoning in ``delta.reasoning``, the answer in ``delta.content``, the tool call in
``delta.tool_calls``, ``enable_thinking`` off, ``finish_reason`` "length", usage in a final
``choices: []`` chunk, and token ids with ``return_token_ids``. They also check that the recorded
fixtures in tests/fixtures/streams/vllm/ still fold to their sidecars. Each server starts once per
session (fixtures in tests/engines/conftest_vllm.py).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.engines.sse import DONE, chunks, events, fold
from tests.engines.vllm_server import VLLMServer, VLLMServerError, vllm_python

FIXTURES = Path(__file__).parent / "fixtures" / "streams" / "vllm"
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
USAGE = {"stream_options": {"include_usage": True}}


def stream(server: VLLMServer, **body: Any) -> bytes:
    """POSTs a streaming chat completion and returns the raw body bytes."""
    request = {"model": server.model_name, "messages": USER, "max_tokens": 64, **body, "stream": True}
    with httpx.Client(timeout=60.0) as client, client.stream(
        "POST", f"{server.url}/v1/chat/completions", json=request
    ) as resp:
        assert resp.status_code == 200, resp.read()
        return b"".join(resp.iter_raw())


# -- recorded fixtures (no server needed) ---------------------------------------------------------

RECORDED = sorted(p.stem for p in FIXTURES.glob("*.sse"))


def test_recordings_exist() -> None:
    assert {"thinking_on", "thinking_off", "tool_call", "length", "token_ids"} <= set(RECORDED)


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_stream_folds_to_its_sidecar(name: str) -> None:
    raw = (FIXTURES / f"{name}.sse").read_bytes()
    sidecar = json.loads((FIXTURES / f"{name}.json").read_text())
    got = fold(raw)
    assert got["done"]
    assert got["error"] is None
    assert {k: v for k, v in got.items() if k not in ("error", "done")} == sidecar["expected"]
    assert sidecar["request"]["stream"] is True


def test_missing_vllm_venv_names_the_setup_script(tmp_path: Path) -> None:
    with pytest.raises(VLLMServerError, match=r"bash tests/setup/vllm\.sh"):
        vllm_python(tmp_path / "no-such-venv")


# -- live scripted server ---------------------------------------------------------------------------

@pytest.mark.vllm
def test_thinking_on_streams_reasoning_then_answer(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    raw = stream(vllm_scripted, **USAGE)
    deltas = [c["choices"][0]["delta"] for c in chunks(raw) if c["choices"]]
    assert any("reasoning" in d for d in deltas)  # vLLM's field name
    assert not any("reasoning_content" in d for d in deltas)
    got = fold(raw)
    assert got["reasoning"] == tiny_script["reasoning"]
    # no tools in the request: the tool parser is off and the call text stays in the content
    assert got["content"] == "\n\n" + tiny_script["answer"] + tiny_script["tool_call_text"]
    assert got["tool_calls"] == []
    assert got["finish_reason"] == "stop"
    assert got["usage"]["completion_tokens"] == len(tiny_script["completion_token_ids"])


@pytest.mark.vllm
def test_tools_give_a_streamed_tool_call(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    raw = stream(vllm_scripted, tools=[WEATHER_TOOL], temperature=0.7, top_p=0.9, **USAGE)
    got = fold(raw)
    assert got["reasoning"] == tiny_script["reasoning"]
    assert got["content"] == "\n\n" + tiny_script["answer"]
    assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == [
        (tiny_script["tool_name"], tiny_script["tool_arguments"])
    ]
    assert json.loads(got["tool_calls"][0]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert got["finish_reason"] == "tool_calls"
    # id, type and name come first; argument fragments follow by index. How many deltas carry the call is
    # the server's timing (tokens share a delta under load), so it is not asserted here: the merge of
    # several fragments is held on recorded vLLM streams (tests/test_stream_recorded.py).
    tool_deltas = [tc for c in chunks(raw) if c["choices"] for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    assert tool_deltas[0]["id"] and tool_deltas[0]["type"] == "function"
    assert tool_deltas[0]["function"]["name"] == "get_weather"
    assert all(td["index"] == 0 for td in tool_deltas)


@pytest.mark.vllm
def test_enable_thinking_false_gives_no_reasoning(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    raw = stream(vllm_scripted, chat_template_kwargs={"enable_thinking": False}, **USAGE)
    got = fold(raw)
    exp = tiny_script["expected"]["thinking_off"]
    assert got["reasoning"] == ""
    assert got["content"] == exp["content"] == tiny_script["answer"] + tiny_script["tool_call_text"]
    assert got["finish_reason"] == "stop"
    assert got["usage"]["completion_tokens"] == len(exp["completion_token_ids"])
    assert got["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.vllm
def test_max_tokens_gives_finish_reason_length(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    got = fold(stream(vllm_scripted, max_tokens=3, **USAGE))
    assert got["finish_reason"] == "length"
    assert got["usage"]["completion_tokens"] == 3
    assert got["reasoning"] == tiny_script["reasoning"]
    assert got["content"] == ""


@pytest.mark.vllm
def test_usage_arrives_in_a_final_chunk_without_choices(vllm_scripted: VLLMServer) -> None:
    raw = stream(vllm_scripted, tools=[WEATHER_TOOL], **USAGE)
    evs = events(raw)
    assert evs[-1] == DONE
    last = json.loads(evs[-2])
    assert last["choices"] == []
    usage = last["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 2}
    assert all("usage" not in c for c in chunks(raw)[:-1])  # no continuous usage unless asked

    got = fold(stream(vllm_scripted))  # without stream_options: no usage at all
    assert got["usage"] is None


@pytest.mark.vllm
def test_return_token_ids(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    raw = stream(vllm_scripted, tools=[WEATHER_TOOL], return_token_ids=True, **USAGE)
    cs = chunks(raw)
    # prompt ids: top level of the first chunk (the role chunk) only
    assert cs[0]["prompt_token_ids"] and cs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c.get("prompt_token_ids") is None for c in cs[1:])
    # completion ids: choices[0].token_ids of every later chunk, also those with an empty delta
    got = fold(raw)
    assert got["completion_token_ids"] == tiny_script["completion_token_ids"]
    assert got["completion_token_ids"][-1] == tiny_script["eos_token_id"]
    assert got["usage"]["prompt_tokens"] == len(got["prompt_token_ids"])
    assert got["usage"]["completion_tokens"] == len(got["completion_token_ids"])
    assert any(c["choices"] and c["choices"][0]["delta"] == {} and c["choices"][0]["token_ids"] for c in cs)


@pytest.mark.vllm
def test_non_streaming_response(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    body = {"model": vllm_scripted.model_name, "messages": USER, "tools": [WEATHER_TOOL], "max_tokens": 64}
    resp = httpx.post(f"{vllm_scripted.url}/v1/chat/completions", json=body, timeout=60)
    choice = resp.json()["choices"][0]
    assert choice["message"]["reasoning"] == tiny_script["reasoning"]
    assert choice["message"]["content"] == "\n\n" + tiny_script["answer"]
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": tiny_script["tool_name"], "arguments": tiny_script["tool_arguments"]
    }
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.vllm
def test_parallel_streams_all_follow_the_script(vllm_scripted: VLLMServer, tiny_script: dict[str, Any]) -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fold(stream(vllm_scripted, **USAGE)), range(4)))
    assert {r["reasoning"] for r in results} == {tiny_script["reasoning"]}
    assert {r["finish_reason"] for r in results} == {"stop"}


@pytest.mark.vllm
def test_health_models_and_metrics(vllm_scripted: VLLMServer) -> None:
    with httpx.Client(base_url=vllm_scripted.url, timeout=10) as client:
        assert client.get("/health").status_code == 200
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == [vllm_scripted.model_name]
        metrics = client.get("/metrics").text
    assert "vllm:num_requests_running" in metrics
    assert "vllm:num_requests_waiting" in metrics


# -- live random server and failure path ------------------------------------------------------------

@pytest.mark.vllm
def test_random_model_generates_until_max_tokens(vllm_random: VLLMServer) -> None:
    got = fold(stream(vllm_random, max_tokens=16, seed=3, return_token_ids=True, **USAGE))
    assert got["done"]
    assert got["usage"]["completion_tokens"] == len(got["completion_token_ids"]) <= 16
    assert got["finish_reason"] in ("length", "stop")


@pytest.mark.vllm
def test_server_that_dies_at_start_up_raises_with_its_log(
    tiny_model_dirs: dict[str, Path], vllm_venv_python: Path, tmp_path: Path
) -> None:
    server = VLLMServer(
        tiny_model_dirs["scripted"], "broken", extra_args=["--no-such-flag"],
        python=vllm_venv_python, log_path=tmp_path / "broken.log", startup_timeout=120,
    )
    with pytest.raises(VLLMServerError, match="no-such-flag") as info:
        server.start()
    assert "exited with code" in str(info.value)
    assert server.proc is None
