"""The loop stop frees the slot on the real engines: when the client ends a stream (as its loop stop does),
vLLM and SGLang 0.5.23 abort the request, and the server's own running count drops to 0 long before the
reply's max_tokens. The tiny models do not loop on request, so the detector here is one that fires after a
fixed number of text chunks; the closing path is the client's own (client.wire.endpoint)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

import client.wire.endpoint as endpoint_module
from client.fleet.dispatcher import Dispatcher
from client.loops.repetition import Repetition
from client.wire.endpoint import Endpoint
from tests.engines.sglang_server import SGLangServer
from tests.engines.vllm_server import VLLMServer

MAX_TOKENS = 1800  # far more than the chunks after which the stop fires


class FiresAfter:
    """Stands in for RepetitionDetector: a loop 'found' at the 20th piece of text, armed or not (the budget
    floor is the endpoint's, tested in tests/test_loop_stop.py; here only the closing path)."""

    def __init__(self, *_: object, armed: bool = True) -> None:
        self.fed = 0
        self.armed = armed

    def feed(self, text: str) -> Repetition | None:
        self.fed += 1
        return Repetition(block=1, span=self.fed, at=self.fed, sample=text) if self.fed >= 20 else None


def _body(model: str) -> bytes:
    return orjson.dumps({"model": model, "messages": [{"role": "user", "content": "Tell a long story."}],
                         "max_tokens": MAX_TOKENS, "ignore_eos": True, "stream": True,
                         "stream_options": {"include_usage": True, "continuous_usage_stats": True}})


async def _stop_frees_the_slot(url: str, model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_module, "RepetitionDetector", FiresAfter)
    endpoint = Endpoint(url, max_in_flight=2, idle_timeout=120.0)
    dispatcher = Dispatcher([endpoint])
    dispatcher.starting(endpoint, ready=True)

    async def running() -> int | None:
        await dispatcher.prime()
        return dispatcher.live()[0].server_running

    try:
        completion, _ = await endpoint.stream_chat(_body(model), max_tokens=MAX_TOKENS, stop_loops=True)
        assert completion.finish_reason == "repetition"
        assert completion.usage["completion_tokens"] < MAX_TOKENS // 4
        async with asyncio.timeout(60):
            while (await running()) != 0:  # noqa: ASYNC110 - until the server's own count says so
                await asyncio.sleep(0.2)
    finally:
        await endpoint.aclose()


@pytest.mark.vllm
@pytest.mark.slow
async def test_vllm_frees_the_slot_of_a_stopped_stream(vllm_random: VLLMServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    await _stop_frees_the_slot(vllm_random.url, vllm_random.model_name, monkeypatch)


@pytest.mark.sglang_server
@pytest.mark.slow
async def test_sglang_frees_the_slot_of_a_stopped_stream(sglang_scripted: SGLangServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    await _stop_frees_the_slot(sglang_scripted.url, sglang_scripted.model_name, monkeypatch)

