"""The client's whole path against a real vLLM 0.32 on the CPU: `python -m client.run` as a subprocess.

The server is the session's `vllm_scripted` (tests/engines/conftest_vllm.py): a tiny Qwen3 whose weights
always emit one fixed token sequence (reasoning, `</think>`, answer, a hermes tool call, `<|im_end|>`), so
every ResultRecord can be checked exactly against `tiny_script`: reasoning (vLLM's `reasoning` field),
content, the tool call with its arguments, finish_reason, usage and the exact token ids the client asks
for with `return_token_ids` once `/v1/models` says `owned_by: "vllm"`. Prompt ids are checked against the
ids recorded from the same requests in tests/fixtures/streams/vllm/. A last test runs the same client
against the simulated SGLang server, whose streaming chat answers 400 to `return_token_ids`, and shows
the field is never sent there.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.core.errors import ConfigError
from client.core.payload import SamplingSettings
from client.core.sampling_plan import single
from client.fleet.startup import check_max_tokens
from client.wire.endpoint import Endpoint
from simulator.fleet import SimServerSpec
from tests.conftest import read_failures, read_results, run_client, wait_until
from tests.engines.vllm_server import VLLMServer

FIXTURES = Path(__file__).parent / "fixtures" / "streams" / "vllm"
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def _recorded(name: str) -> dict[str, Any]:
    sidecar: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return sidecar


# The same requests as the recordings, so the prompt token ids must be the recorded ones.
WEATHER_TOOL: dict[str, Any] = _recorded("tool_call")["request"]["tools"][0]
MULTI_TURN: list[dict[str, Any]] = _recorded("tool_result_turn")["request"]["messages"]
PROMPT_IDS = {
    "plain": _recorded("random_model")["expected"]["prompt_token_ids"],  # same tokenizer, same messages
    "tools": _recorded("token_ids")["expected"]["prompt_token_ids"],
    "multi_turn": _recorded("tool_result_turn")["expected"]["prompt_token_ids"],
}
PLAIN = ["plain", "plain-2", "plain-3", "plain-4"]
WITH_TOOLS = ["tools", "tools-2", "multi_turn", "regenerated"]


def _prompts(path: Path) -> Path:
    """Plain prompts, prompts with the get_weather tool, a tool-result turn, and one whose last
    (assistant) turn is the one being regenerated."""
    records: list[dict[str, Any]] = []
    for name in PLAIN:
        records.append({"id": name, "messages": USER, "meta": {"kind": "plain"}})
    for name in ("tools", "tools-2"):
        records.append({"id": name, "messages": USER, "tools": [WEATHER_TOOL], "meta": {"kind": "tools"}})
    records.append({"id": "multi_turn", "messages": MULTI_TURN, "tools": [WEATHER_TOOL]})
    records.append({"id": "regenerated", "tools": [WEATHER_TOOL],
                    "messages": [*USER, {"role": "assistant", "content": "<think>\n</think>\nOK."}]})
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


@dataclass
class Run:
    code: int
    stderr: str
    records: dict[str, dict[str, Any]]
    failures: list[dict[str, Any]]
    posts: list[int]  # HTTP status of each chat POST the server logged during the run


def _access_log(server: VLLMServer, start: int) -> str:
    return server.log_path.read_bytes()[start:].decode("utf-8", "replace")


def _run_cli(server: VLLMServer, tmp: Path, *extra: str) -> Run:
    prompts = _prompts(tmp / "prompts.jsonl")
    out = tmp / "out"
    log_start = server.log_path.stat().st_size
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-in-flight", "4", "--seed", "11", "--max-tokens", "256", *extra], timeout=120)
    records = read_results(out)
    by_id = {r["id"]: r for r in records}
    assert len(by_id) == len(records), "an id was written twice"
    posts = [int(code) for code in re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})',
                                              _access_log(server, log_start))]
    return Run(result.code, result.stderr, by_id, read_failures(out), posts)


@pytest.fixture(scope="module")
def thinking_run(vllm_scripted: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run_cli(vllm_scripted, tmp_path_factory.mktemp("vllm-thinking"))


@pytest.fixture(scope="module")
def no_thinking_run(vllm_scripted: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run_cli(vllm_scripted, tmp_path_factory.mktemp("vllm-no-thinking"), "--no-thinking")


@pytest.fixture(scope="module")
def length_run(vllm_scripted: VLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run_cli(vllm_scripted, tmp_path_factory.mktemp("vllm-length"), "--max-tokens", "5")


def _assert_clean(run: Run) -> None:
    assert run.code == 0, run.stderr[-3000:]
    assert not run.failures
    assert set(run.records) == set(PLAIN + WITH_TOOLS)
    # The one-token preflight, then one POST per prompt, each answered 200: no retries, no rejected request.
    assert run.posts == [200] * (1 + len(run.records)), run.posts
    assert "preflight: 1 of 1 answering endpoint(s) took the run's request shape" in run.stderr
    assert "servers: vllm x1" in run.stderr


def _expected_usage(prompt_ids: list[int], completion: int, reasoning: int) -> dict[str, Any]:
    return {"prompt_tokens": len(prompt_ids), "total_tokens": len(prompt_ids) + completion,
            "completion_tokens": completion, "completion_tokens_details": {"reasoning_tokens": reasoning}}


def _check(record: dict[str, Any], expected: dict[str, Any]) -> None:
    """One record against the script's expected outcome for its kind of request."""
    assert record["reasoning"] == expected["reasoning"], record["id"]
    assert record["content"] == expected["content"], record["id"]
    calls = record["tool_calls"]
    assert [c["function"] for c in calls] == expected["tool_calls"], record["id"]
    for call in calls:
        assert call["type"] == "function"
        assert call["id"].startswith("chatcmpl-tool-")
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert record["finish_reason"] == expected["finish_reason"], record["id"]
    assert record["completion_token_ids"] == expected["completion_token_ids"], record["id"]
    prompt_ids = record["prompt_token_ids"]
    assert prompt_ids and all(isinstance(i, int) for i in prompt_ids), record["id"]
    assert record["usage"] == _expected_usage(prompt_ids, len(expected["completion_token_ids"]),
                                              expected["reasoning_tokens"]), record["id"]
    assert record["model"] == "tiny-qwen3-scripted"
    assert record["attempts"] == 1
    assert record["timings"]["ttft_s"] is not None
    assert record["timings"]["total_s"] >= record["timings"]["ttft_s"]


# -- the engine -------------------------------------------------------------------------------------

@pytest.mark.vllm
def test_vllm_models_say_owned_by_vllm(vllm_scripted: VLLMServer) -> None:
    """The client's engine detection rests on this field of vLLM 0.32's /v1/models."""
    data = httpx.get(f"{vllm_scripted.url}/v1/models", timeout=10).json()["data"]
    assert [(m["id"], m["owned_by"]) for m in data] == [("tiny-qwen3-scripted", "vllm")]


# -- thinking on (the default) ------------------------------------------------------------------------

@pytest.mark.vllm
def test_thinking_run_completes_with_one_request_per_prompt(thinking_run: Run) -> None:
    _assert_clean(thinking_run)
    assert "thinking on" in thinking_run.stderr
    assert "reconciliation: inputs 8 = done 8 + failed 0" in thinking_run.stderr


@pytest.mark.vllm
def test_reasoning_and_content_without_tools(thinking_run: Run, tiny_script: dict[str, Any]) -> None:
    expected = tiny_script["expected"]["thinking_on"]
    assert expected["reasoning"] == tiny_script["reasoning"]
    for name in PLAIN:
        record = thinking_run.records[name]
        _check(record, expected)
        # Without tools in the request vLLM leaves the call text in the content, untouched.
        assert record["content"] == "\n\n" + tiny_script["answer"] + tiny_script["tool_call_text"]
        assert record["tool_calls"] == []
        assert "tools" not in record
        assert record["meta"] == {"kind": "plain"}
        # Each request sends its own seed, drawn from --seed 11, the (default) plan and the id (docs/sampling.md).
        seed = single(SamplingSettings(max_tokens=256, seed=11)).draw(11, name, record.get("meta")).seed
        sent = {"max_tokens": 256, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0,
                "presence_penalty": 0.0, "seed": seed, "enable_thinking": True}
        assert {key: record["sampling"].get(key) for key in sent} == sent


@pytest.mark.vllm
def test_tool_call_with_its_arguments(thinking_run: Run, tiny_script: dict[str, Any]) -> None:
    expected = tiny_script["expected"]["thinking_on_tools"]
    for name in WITH_TOOLS:
        record = thinking_run.records[name]
        _check(record, expected)
        assert record["tools"] == [WEATHER_TOOL]
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in record["tool_calls"]] \
            == [(tiny_script["tool_name"], tiny_script["tool_arguments"])]
    ids = [thinking_run.records[name]["tool_calls"][0]["id"] for name in WITH_TOOLS]
    assert len(set(ids)) == len(ids), "each call keeps the id its own stream gave it"


@pytest.mark.vllm
def test_exact_token_ids(thinking_run: Run, tiny_script: dict[str, Any]) -> None:
    records = thinking_run.records
    for record in records.values():
        assert record["completion_token_ids"] == tiny_script["completion_token_ids"]
        assert record["completion_token_ids"][-1] == tiny_script["eos_token_id"]
    # The prompt ids are those vLLM gave for the very same requests when the fixtures were recorded.
    for name in PLAIN:
        assert records[name]["prompt_token_ids"] == PROMPT_IDS["plain"], name
    assert records["tools"]["prompt_token_ids"] == records["tools-2"]["prompt_token_ids"] == PROMPT_IDS["tools"]
    assert records["multi_turn"]["prompt_token_ids"] == PROMPT_IDS["multi_turn"]
    assert records["multi_turn"]["messages"] == MULTI_TURN


@pytest.mark.vllm
def test_last_assistant_turn_is_regenerated_not_sent(thinking_run: Run) -> None:
    record = thinking_run.records["regenerated"]
    assert record["messages"] == USER
    assert record["prompt_token_ids"] == PROMPT_IDS["tools"]


# -- thinking off ------------------------------------------------------------------------------------

@pytest.mark.vllm
def test_no_thinking_is_honoured(no_thinking_run: Run, thinking_run: Run, tiny_script: dict[str, Any]) -> None:
    run = no_thinking_run
    _assert_clean(run)
    assert "thinking off" in run.stderr
    for name in PLAIN:
        record = run.records[name]
        _check(record, tiny_script["expected"]["thinking_off"])
        assert record["reasoning"] == ""
        assert record["content"] == tiny_script["answer"] + tiny_script["tool_call_text"]
        assert record["sampling"]["enable_thinking"] is False
    for name in WITH_TOOLS:
        _check(run.records[name], tiny_script["expected"]["thinking_off_tools"])
    # The template closed the think block in the prompt: `<think>` "\n" became `<think>` "\n\n" `</think>` "\n\n".
    newline2, think_end = tiny_script["completion_token_ids"][3], tiny_script["think_end_token_id"]
    assert tiny_script["completion_tokens"][2:4] == ["</think>", "\n\n"]
    for name in PLAIN + WITH_TOOLS:
        on, off = thinking_run.records[name]["prompt_token_ids"], run.records[name]["prompt_token_ids"]
        assert off == [*on[:-1], newline2, think_end, newline2], name


# -- truncation ---------------------------------------------------------------------------------------

@pytest.mark.vllm
def test_small_max_tokens_gives_finish_reason_length(length_run: Run, tiny_script: dict[str, Any]) -> None:
    _assert_clean(length_run)
    assert "truncated" in length_run.stderr
    assert re.search(r"\b8 truncated \(finish_reason length\)", length_run.stderr), length_run.stderr[-1000:]
    ids = tiny_script["completion_token_ids"][:5]  # two reasoning tokens, </think>, "\n\n", "Let me check"
    assert tiny_script["completion_tokens"][4] == "Let me check"
    for name in PLAIN + WITH_TOOLS:
        record = length_run.records[name]
        assert record["finish_reason"] == "length", name
        assert record["reasoning"] == tiny_script["reasoning"]
        assert record["content"] == "\n\nLet me check"
        assert record["tool_calls"] == []
        assert record["completion_token_ids"] == ids
        assert record["usage"] == _expected_usage(record["prompt_token_ids"], 5, 2)
        assert record["sampling"]["max_tokens"] == 5


# -- a --max-tokens the context cannot hold -----------------------------------------------------------

@pytest.mark.vllm
async def test_max_tokens_beyond_the_context_is_caught_before_sending(vllm_scripted: VLLMServer) -> None:
    """vLLM refuses every request whose max_tokens exceeds max_model_len (2048 here; the CLI default is
    8192): the start-up check names the problem instead of a run that fails every prompt."""
    async with httpx.AsyncClient(timeout=30) as client:
        refused = await client.post(f"{vllm_scripted.url}/v1/chat/completions", json={
            "model": vllm_scripted.model_name, "messages": USER, "max_tokens": 8192, "stream": True})
    assert refused.status_code == 400
    assert "cannot be greater than max_model_len=2048" in refused.text
    endpoint = Endpoint(vllm_scripted.url, index=0, max_in_flight=1)
    try:
        await check_max_tokens([endpoint], vllm_scripted.model_name, 256)
        with pytest.raises(ConfigError, match=r"--max-tokens 8192 does not fit .*\(max_model_len 2048\)"):
            await check_max_tokens([endpoint], vllm_scripted.model_name, 8192)
        await check_max_tokens([endpoint], "another-model", 8192)  # only the model being run is checked
    finally:
        await endpoint.aclose()


async def test_max_tokens_check_passes_on_a_long_context_sglang(fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=40.0)])
    endpoint = Endpoint(fleet.urls[0], index=0, max_in_flight=1)
    try:
        model = (await endpoint.models())[0]
        await check_max_tokens([endpoint], model, 8192)  # 262,144 tokens of context
        with pytest.raises(ConfigError, match="max_model_len 262144"):
            await check_max_tokens([endpoint], model, 262144)
    finally:
        await endpoint.aclose()


# -- SGLang: the field is never sent ------------------------------------------------------------------

def test_return_token_ids_is_never_sent_to_sglang(tmp_path: Path, fleet_factory: Any) -> None:
    # --tokenizer none: a server that gives no ids, so the records show that none came by another path either.
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "40", "--log-level", "debug",
                                                     "--tokenizer", "none"))])
    url = fleet.urls[0]
    models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    assert {m["owned_by"] for m in models} == {"sglang"}
    # The simulated server refuses the field as SGLang 0.5.23 does, so one stray field fails the run.
    refused = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
        "model": models[0]["id"], "messages": USER, "stream": True, "return_token_ids": True})
    assert refused.status_code == 400
    assert "return_token_ids" in refused.text

    prompts = _prompts(tmp_path / "prompts.jsonl")
    out = tmp_path / "out"
    result = run_client(["--endpoints", url, "--prompts", str(prompts), "--out", str(out),
                         "--max-in-flight", "4", "--max-tokens", "64"], timeout=120)
    assert result.code == 0, result.stderr[-3000:]
    assert not read_failures(out)
    records = read_results(out)
    assert {r["id"] for r in records} == set(PLAIN + WITH_TOOLS)
    for record in records:
        assert "prompt_token_ids" not in record
        assert "completion_token_ids" not in record
        assert record["usage"]["completion_tokens"] > 0
    log = tmp_path / "sim-logs-0" / "sim-0.log"

    def logged_posts() -> list[str]:
        return re.findall(r'"POST /v1/chat/completions HTTP/1.1" (\d{3})', log.read_text(errors="replace"))

    # The server logs a streamed request once its answer has ended, which can come after the client has it.
    wait_until(lambda: len(logged_posts()) >= len(records) + 2, "every request in the server's log", timeout=300)
    posts = logged_posts()
    assert posts.count("400") == 1, "only the test's own probe was refused"
    assert posts.count("200") == len(records) + 1, "every prompt, plus the client's one preflight request"
