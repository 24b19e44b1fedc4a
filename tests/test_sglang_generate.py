"""Continuation on real SGLang 0.5.23 (CPU, the random-weights tiny Qwen3): a greedy reply cut after k ids
and continued on `/generate` with the prompt's ids plus those k ids equals the reply made in one go, id for
id; and the simulated server's `/generate` answers in the real one's shapes (simulator/generate.py).

The random-weights model is used because its greedy replies are not scripted: what is compared is the
engine's own prefill of prompt + k ids against its decode of the same ids.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.core.payload import SamplingSettings
from client.engine.continuation import Partial, continue_reply
from client.wire.endpoint import Endpoint
from simulator.config import SimConfig
from simulator.server import SimServer
from tests.engines.sglang_server import SGLangServer

pytestmark = pytest.mark.sglang_server

MESSAGES = [{"role": "user", "content": "Write a short note about rivers and the sea."}]
MAX_TOKENS = 48
# The random model ends most replies at once; ignoring its end token lets a reply run to the cap.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": 1, "min_p": 0.0, "ignore_eos": True}


def _chat(url: str, model: str) -> tuple[list[int], list[int]]:
    r = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
        "model": model, "messages": MESSAGES, "max_tokens": MAX_TOKENS, "return_token_ids": True,
        "temperature": 0.0, "top_p": 1.0, "top_k": 1, "ignore_eos": True})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["prompt_token_ids"], choice["response_token_ids"]


def _generate(url: str, ids: list[int], max_new: int, *, stream: bool = False) -> list[dict[str, Any]]:
    """The answer as a list: one object, or the stream's events before `[DONE]`."""
    body = {"input_ids": ids, "stream": stream, "sampling_params": {**GREEDY, "max_new_tokens": max_new}}
    r = httpx.post(f"{url}/generate", json=body, timeout=300)
    assert r.status_code == 200, r.text
    if not stream:
        return [r.json()]
    events = [e[len("data: "):] for e in r.text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [orjson.loads(e) for e in events[:-1]]


def test_a_greedy_reply_continued_on_generate_equals_the_whole(sglang_random: SGLangServer) -> None:
    url = sglang_random.url
    prompt, reply = _chat(url, sglang_random.model_name)
    assert len(reply) == MAX_TOKENS, "the random model writes to the cap"
    whole = _generate(url, prompt, MAX_TOKENS)[0]["output_ids"]
    assert whole == reply, "the chat route and /generate make the same greedy reply from the same ids"
    for k in (1, 5, 17, 31, MAX_TOKENS - 1):
        rest = _generate(url, prompt + reply[:k], MAX_TOKENS - k)[0]
        assert reply[:k] + rest["output_ids"] == reply, f"cut after {k} ids"
        assert rest["meta_info"]["completion_tokens"] == MAX_TOKENS - k


async def test_the_client_continuation_equals_the_whole(sglang_random: SGLangServer) -> None:
    """The same through client.engine.continuation: the run's sampling (greedy) as SGLang's sampling_params,
    the budget left, each attempt's share. Without ignore_eos the reply ends where the model stops."""
    async with httpx.AsyncClient(timeout=300) as client:
        r = await client.post(f"{sglang_random.url}/v1/chat/completions", json={
            "model": sglang_random.model_name, "max_tokens": MAX_TOKENS, "return_token_ids": True,
            "temperature": 0.0, "top_p": 1.0, "top_k": 1, "min_p": 0.0, "seed": 3,
            "messages": [{"role": "user", "content": "Count the rivers of the north, one by one."}]})
    choice = r.json()["choices"][0]
    prompt, reply = choice["prompt_token_ids"], choice["response_token_ids"]
    assert len(reply) >= 2
    settings = SamplingSettings(max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0, top_k=1, min_p=0.0, seed=3)
    endpoint = Endpoint(sglang_random.url, max_in_flight=1)
    try:
        for k in sorted({1, len(reply) // 2, len(reply) - 1} - {0}):
            stitched = await continue_reply(endpoint, Partial(prompt, reply[:k], attempt=1), settings, MAX_TOKENS,
                                            attempt=2)
            assert stitched.completion_ids == reply, f"cut after {k} ids"
            assert stitched.continued == [{"attempt": 1, "tokens": k}, {"attempt": 2, "tokens": len(reply) - k}]
            expected = "length" if choice["finish_reason"] == "length" else "stop"
            assert stitched.finish_reason == expected
    finally:
        await endpoint.aclose()


def _shape(value: Any) -> Any:
    """A JSON value's shape: the keys of objects (recursively), the type of anything else."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return "list"
    return type(value).__name__


async def _sim_answers(tokenizer: Path, prompt: list[int]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    config = SimConfig(port=0, speed=500.0, mean_tokens=40, max_gen_tokens=400, tokenizer=str(tokenizer))
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
        answers = []
        for stream in (False, True):
            body = {"input_ids": prompt, "stream": stream, "sampling_params": {**GREEDY, "max_new_tokens": 6}}
            r = await client.post("/generate", json=body)
            events = [e[len("data: "):] for e in r.text.split("\n\n") if e.startswith("data: ")]
            answers.append([r.json()] if not stream else [orjson.loads(e) for e in events[:-1]])
        return answers[0], answers[1]


async def test_the_sim_generate_answers_in_the_real_shapes(sglang_random: SGLangServer,
                                                           sglang_model_dirs: dict[str, Path]) -> None:
    url = sglang_random.url
    prompt, _ = _chat(url, sglang_random.model_name)
    real_whole, real_stream = _generate(url, prompt, 6), _generate(url, prompt, 6, stream=True)
    sim_whole, sim_stream = await _sim_answers(sglang_model_dirs["random"], prompt)
    for real, sim in ((real_whole[0], sim_whole[0]), (real_stream[-1], sim_stream[-1])):
        assert set(sim) == set(real) - {"prompt_token_ids"} or set(sim) == set(real)
        for key in ("text", "output_ids"):
            assert _shape(sim[key]) == _shape(real[key])
        # The sim's meta_info keys are the real ones it can know (no timings, no logprobs).
        assert set(sim["meta_info"]) <= set(real["meta_info"]), set(sim["meta_info"]) - set(real["meta_info"])
        assert _shape(sim["meta_info"]["finish_reason"]) == _shape(real["meta_info"]["finish_reason"])
    # A stream: the ids so far in every event, the finish only in the last.
    for events in (real_stream, sim_stream):
        assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
        assert events[-1]["meta_info"]["finish_reason"] is not None
        assert len(events[-1]["output_ids"]) == 6
        assert all(e["output_ids"] == events[-1]["output_ids"][: len(e["output_ids"])] for e in events)
