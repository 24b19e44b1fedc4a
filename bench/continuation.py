"""What continuing a broken reply saves: the tokens a server generates under the simulator's `--drop-stream`
fault when a broken reply is sent again from token 0, against continued from its exact ids
(client.engine.continuation), counted by the server's own `sglang:generation_tokens_total`, on one simulated
SGLang server with ids (`--tokenizer`).

Each prompt's whole reply is asked once first, fault or not, until it comes (a chat completion with its ids:
the reference). Then each reply is streamed on `/generate`; the server drops a share of the requests
(`--drop-stream RATE`) after 0.1-0.9 of their ids, as the fault places a break. The retry is either the
whole reply again, streamed, until one attempt comes whole (`regenerate`), or the client's continuation from
the prompt's ids plus the ids held (`continue`; not streamed, so a continuation that is itself dropped is
asked again from the same ids). Both must end with the reference ids; the counter's growth over each phase
is the cost.

    python -m bench.continuation [--prompts 40] [--drop-stream 0.3] [--seed 0]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

import httpx
import orjson

from client.core.errors import AttemptError
from client.core.payload import SamplingSettings
from client.engine.continuation import Partial, continue_reply
from client.wire.endpoint import Endpoint
from simulator.config import FaultRates, SimConfig
from simulator.server import SimServer
from simulator.tiny_tokenizer import tiny_tokenizer_dir

MAX_TOKENS = 2000
GREEDY = SamplingSettings(max_tokens=MAX_TOKENS, temperature=0.0, top_p=1.0, top_k=1, min_p=0.0)
_COUNTER = re.compile(r"^sglang:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", re.M)


async def generated(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    return sum(float(v) for v in _COUNTER.findall(text))


async def streamed(client: httpx.AsyncClient, prompt: list[int]) -> tuple[list[int], bool]:
    """One streamed /generate attempt: the ids it delivered, and whether it came whole."""
    body = {"input_ids": prompt, "stream": True, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0}}
    held: list[int] = []
    try:
        async with client.stream("POST", "/generate", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    event = orjson.loads(line[6:])
                    held = event["output_ids"]
                    if event["meta_info"]["finish_reason"] is not None:
                        return held, True
    except httpx.TransportError:
        pass  # the fault cut the connection: the ids of the events before it are held
    return held, False


async def reference(client: httpx.AsyncClient, i: int) -> tuple[list[int], list[int]]:
    while True:
        try:
            r = await client.post("/v1/chat/completions", json={
                "model": "default", "max_tokens": MAX_TOKENS, "temperature": 0, "return_token_ids": True,
                "messages": [{"role": "user", "content": f"Question {i}: tell me about river {i}."}]})
        except httpx.TransportError:
            continue  # a dropped reference: asked again
        if r.status_code == 200:
            choice = r.json()["choices"][0]
            return choice["prompt_token_ids"], choice["response_token_ids"]


async def one_reply(client: httpx.AsyncClient, endpoint: Endpoint, prompt: list[int],
                    mode: str) -> tuple[list[int], int]:
    """The reply by `mode`, and how many attempts it took."""
    attempts = 1
    ids, whole = await streamed(client, prompt)
    while not whole and mode == "regenerate":
        attempts += 1
        ids, whole = await streamed(client, prompt)
    while not whole:
        attempts += 1
        try:
            stitched = await continue_reply(endpoint, Partial(prompt, ids, 1), GREEDY, MAX_TOKENS, attempts)
        except AttemptError:
            continue  # a dropped continuation holds nothing: asked again from the same ids
        ids, whole = stitched.completion_ids, True
    return ids, attempts


async def run(prompts: int, drop: float, seed: int) -> dict[str, float]:
    config = SimConfig(port=0, speed=2000.0, mean_tokens=300, max_gen_tokens=MAX_TOKENS,
                       tokenizer=str(tiny_tokenizer_dir()), seed=seed, faults=FaultRates(drop_stream=drop))
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=120) as client:
        endpoint = Endpoint(srv.url, max_in_flight=1)
        replies = [await reference(client, i) for i in range(prompts)]
        cost: dict[str, float] = {"reply_tokens": float(sum(len(ids) for _, ids in replies))}
        for mode in ("regenerate", "continue"):
            before = await generated(client)
            attempts = 0
            for prompt, ref in replies:
                ids, n = await one_reply(client, endpoint, prompt, mode)
                attempts += n
                if ids != ref:
                    raise SystemExit(f"{mode}: a reply differs from the undisturbed one")
            cost[mode] = await generated(client) - before
            cost[mode + "_attempts"] = attempts
        await endpoint.aclose()
    return cost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--drop-stream", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cost = asyncio.run(run(args.prompts, args.drop_stream, args.seed))
    reply, regen, cont = cost["reply_tokens"], cost["regenerate"], cost["continue"]
    print(f"{args.prompts} replies, {reply:.0f} ids in all, --drop-stream {args.drop_stream}; every reply equal to "
          "the undisturbed one, id for id:")
    print(f"  sent again from token 0: {regen:.0f} tokens generated ({regen / reply:.2f}x the replies), "
          f"{cost['regenerate_attempts']:.0f} attempts")
    print(f"  continued from its ids: {cont:.0f} tokens generated ({cont / reply:.2f}x the replies), "
          f"{cost['continue_attempts']:.0f} attempts")
    print(f"  saved: {regen - cont:.0f} tokens ({(regen - cont) / regen:.0%} of the retry path's work)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
