"""The simulator's failure shapes on request: replies that loop until max_tokens (`--loop-rate`) and a heavy
thinking tail (`--think-tail-rate`, `--think-tail-alpha`), both drawn per prompt from the content and the
seed (simulator/script.py)."""

from __future__ import annotations

import statistics
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from simulator.__main__ import config_from_args
from simulator.config import SimConfig
from simulator.script import build_script
from simulator.server import SimServer

PROMPTS = 40
MAX_TOKENS = 1500


def body(i: int, thinking: bool = True) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": f"Question {i}: how do caches work?"}],
            "max_tokens": MAX_TOKENS, "chat_template_kwargs": {"enable_thinking": thinking}}


def tail_period(text: str, repeats: int = 5, longest: int = 2000) -> int | None:
    """The smallest p such that the last `repeats` * p characters are one block of p repeated."""
    for p in range(1, min(longest, len(text) // repeats) + 1):
        span = text[-repeats * p:]
        if span[:-p] == span[p:]:
            return p
    return None


def periodic_from(text: str, period: int) -> int:
    """Where the text starts to be its tail's block over and over."""
    j = len(text) - period - 1
    while j >= 0 and text[j] == text[j + period]:
        j -= 1
    return j + 1


@asynccontextmanager
async def serving(**settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = SimConfig(**{"port": 0, "speed": 1000.0, "tokens_per_chunk": 16, "mean_tokens": 600, **settings})
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
        yield client


async def streamed(client: httpx.AsyncClient, request: dict[str, Any]) -> dict[str, Any]:
    """reasoning, content, finish_reason and usage of one streamed reply."""
    resp = await client.post("/v1/chat/completions", json={**request, "stream": True,
                                                           "stream_options": {"include_usage": True}})
    assert resp.status_code == 200, resp.text
    events = [orjson.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]
    deltas = [e["choices"][0] for e in events if e["choices"]]
    return {"reasoning": "".join(c["delta"].get("reasoning_content") or "" for c in deltas),
            "content": "".join(c["delta"].get("content") or "" for c in deltas),
            "finish": [c["finish_reason"] for c in deltas if c.get("finish_reason")][-1],
            "completion_tokens": events[-1]["usage"]["completion_tokens"]}


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no_thinking"])
async def test_a_share_of_replies_loop_until_max_tokens(thinking: bool) -> None:
    config = SimConfig(mean_tokens=600, loop_rate=0.3)
    looping = {i for i in range(PROMPTS) if build_script(body(i, thinking), thinking, config).loop}
    assert 0 < len(looping) < PROMPTS  # the seed picks some prompts, not all
    onsets: list[int] = []
    async with serving(loop_rate=0.3) as loops, serving() as plain:
        for i in range(PROMPTS):
            reply = await streamed(loops, body(i, thinking))
            if i not in looping:
                # The draw is a stream of its own: a prompt that does not loop gets the reply it always got.
                assert reply == await streamed(plain, body(i, thinking)), i
                continue
            text = reply["reasoning"] if thinking else reply["content"]
            assert (reply["finish"], reply["completion_tokens"]) == ("length", MAX_TOKENS), i
            assert bool(reply["content"]) is not thinking  # thinking never closed: no content
            period = tail_period(text)
            assert period is not None and 20 <= period <= 1500, (i, period)
            onsets.append(periodic_from(text, period))
    # A loop sets in after a normal start (a seeded share of the reply's own length), not at its first token.
    assert sum(onset > 0 for onset in onsets) >= 0.8 * len(onsets), onsets


def test_which_prompts_loop_is_seeded_and_grows_with_the_rate() -> None:
    def looping(**settings: Any) -> set[int]:
        config = SimConfig(mean_tokens=600, **settings)
        return {i for i in range(200) if build_script(body(i), True, config).loop}

    low, high = looping(loop_rate=0.1), looping(loop_rate=0.4)
    assert low < high
    assert 0.05 < len(low) / 200 < 0.15 and 0.3 < len(high) / 200 < 0.5
    assert looping(loop_rate=0.4) == high  # deterministic
    assert looping(loop_rate=0.4, seed=1) != high  # and keyed by the seed
    assert not looping()  # off by default


def test_the_heavy_thinking_tail_lengthens_reasoning_only_where_asked() -> None:
    def reasoning(thinking: bool, **settings: Any) -> list[int]:
        config = SimConfig(mean_tokens=600, max_gen_tokens=100_000, **settings)
        return [build_script(body(i, thinking), thinking, config).reasoning_tokens for i in range(400)]

    plain, heavy = reasoning(True), reasoning(True, think_tail_rate=1.0)
    heavier = reasoning(True, think_tail_rate=1.0, think_tail_alpha=0.8)
    half = reasoning(True, think_tail_rate=0.5)
    # Pareto from --mean-tokens: every draw is at least that, the median about 2^(1/alpha) times it.
    assert min(heavy) >= 600 and 1.5 * 600 < statistics.median(heavy) < 2.1 * 600
    assert statistics.median(plain) < 600 < statistics.median(heavier) / 2
    assert sum(a != b for a, b in zip(plain, half, strict=True)) in range(120, 280)  # about half of the prompts
    # Without thinking there is no reasoning to lengthen.
    assert reasoning(False, think_tail_rate=1.0) == reasoning(False) == [0] * 400
    # Off by default: with no rate the exponent changes nothing.
    assert reasoning(True, think_tail_alpha=3.0) == plain


async def test_the_options_reach_the_server_from_the_command_line() -> None:
    config = config_from_args(["--port", "0", "--tokenizer", "none", "--speed", "1000", "--tokens-per-chunk", "16",
                               "--loop-rate", "1",
                               "--think-tail-rate", "0.25", "--think-tail-alpha", "1.5"])
    assert (config.loop_rate, config.think_tail_rate, config.think_tail_alpha) == (1.0, 0.25, 1.5)
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=30.0) as client:
        reply = await streamed(client, body(0))
    assert reply["finish"] == "length" and reply["completion_tokens"] == MAX_TOKENS
    assert tail_period(reply["reasoning"]) is not None


@pytest.mark.parametrize("argv", [["--loop-rate", "1.5"], ["--think-tail-rate", "-0.1"],
                                  ["--think-tail-alpha", "0"]])
def test_bad_values_are_refused_by_name(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        config_from_args(argv)
    assert exit_info.value.code == 2
    assert f"argument {argv[0]}:" in capsys.readouterr().err


async def test_a_heavy_tail_reply_is_served_as_its_script_says() -> None:
    settings = {"mean_tokens": 50, "max_gen_tokens": 3000, "think_tail_rate": 0.5, "think_tail_alpha": 0.9}
    config = SimConfig(**settings)
    requests = [{**body(i), "max_tokens": None} for i in range(30)]
    async with serving(**settings) as client:
        served = [(await client.post("/v1/chat/completions", json=r)).json() for r in requests]
    plain = SimConfig(mean_tokens=50, max_gen_tokens=3000)
    tail = 0
    for request, answer in zip(requests, served, strict=True):
        script = build_script(request, True, config)
        tail += script.reasoning_tokens != build_script(request, True, plain).reasoning_tokens
        usage = answer["usage"]
        assert usage["reasoning_tokens"] == script.reasoning_tokens
        assert answer["choices"][0]["finish_reason"] == ("length" if script.capped else "stop")
    assert 5 <= tail <= 25
