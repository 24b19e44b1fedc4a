"""Real vLLM on the CPU: the token ids the client records from a stream are vLLM's own, the ids the same
request gets without streaming (`return_token_ids`, asked with httpx), with a fixed seed, sampling at
temperature 1 from the random-weight tiny Qwen3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.core.payload import FieldPolicy, SamplingSettings, build_payload
from client.core.records import Prompt
from client.fleet.kinds import VLLM
from client.wire.endpoint import Endpoint
from tests.conftest import read_results, run_client
from tests.engines.vllm_server import VLLMServer

PROMPTS = [
    [{"role": "user", "content": "Write about the weather in Paris today."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is a city?"}],
]


def _payload(server: VLLMServer, messages: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    prompt = Prompt(id="x", messages=messages, tools=None, meta=None, source="test", line=0)
    settings = SamplingSettings(max_tokens=24, temperature=1.0, top_p=1.0, top_k=None, min_p=None, seed=seed)
    policy = FieldPolicy(frozenset({"chat_template_kwargs", "return_token_ids"}), "vllm")
    return build_payload(prompt, messages, settings, model=server.model_name, id_fields={"return_token_ids": True},
                         policy=policy)


@pytest.mark.vllm
@pytest.mark.parametrize("seed", [3, 11])
async def test_streamed_ids_are_the_ids_vllm_gives_without_streaming(vllm_random: VLLMServer, seed: int) -> None:
    endpoint = Endpoint(vllm_random.url, index=0, max_in_flight=2, dialect=VLLM.reply)
    try:
        for messages in PROMPTS:
            payload = _payload(vllm_random, messages, seed)
            streamed, _ = await endpoint.stream_chat(orjson.dumps(payload))
            body = {key: value for key, value in payload.items() if key != "stream_options"}
            async with httpx.AsyncClient(timeout=120) as client:
                whole = (await client.post(f"{vllm_random.url}/v1/chat/completions",
                                           json={**body, "stream": False})).json()
            choice = whole["choices"][0]
            assert streamed.completion_token_ids and streamed.prompt_token_ids
            assert choice["token_ids"] == streamed.completion_token_ids
            assert whole["prompt_token_ids"] == streamed.prompt_token_ids
            assert len(streamed.completion_token_ids) == whole["usage"]["completion_tokens"]
            assert choice["finish_reason"] == streamed.finish_reason
    finally:
        await endpoint.aclose()


@pytest.mark.vllm
@pytest.mark.parametrize(("mode", "with_ids"), [("on", True), ("off", False)])
def test_token_ids_option_on_vllm_keeps_streaming(vllm_scripted: VLLMServer, tmp_path: Path, mode: str,
                                                  with_ids: bool) -> None:
    """vLLM streams its ids: `on` records them without leaving streaming, `off` never asks for them."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"q{i}", "messages": PROMPTS[i % 2]}) + b"\n" for i in range(3)))
    out = tmp_path / "out"
    result = run_client(["--endpoints", vllm_scripted.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "64", "--token-ids", mode], timeout=120)
    assert result.code == 0, result.stderr[-3000:]
    assert (f"--token-ids {mode}: 1 endpoint(s) asked for ids" if with_ids
            else f"--token-ids {mode}: 1 not asked") in result.stderr
    records = read_results(out)
    assert len(records) == 3
    for record in records:
        assert ("completion_token_ids" in record) is with_ids
        assert record["timings"]["ttft_s"] is not None  # still streamed
        if with_ids:
            assert len(record["completion_token_ids"]) == record["usage"]["completion_tokens"]
