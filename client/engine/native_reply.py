"""`client.run --continue-replies`: one prompt's reply made on SGLang's native `/generate` from its exact ids, so
that a stream that breaks is continued from the ids it delivered instead of being generated again.

SGLang's chat stream gives a reply's ids only after its finish (the `sglext` chunk), so a broken chat stream
leaves nothing to continue from. Here the prompt is rendered by the server itself (`/v1/tokenize` with the
chat request's messages, tools and template switches: the ids a chat completion would prefill), the reply is
streamed from `/generate` with the prompt's sampling draw, and every id is kept as it arrives
(`ReplyInProgress`, one per prompt, across its attempts). The next attempt, on any server, sends the prompt's
ids plus those ids with the budget left; given that prefix, generating the rest has the distribution of one
uninterrupted reply (at temperature 0 the same ids: tests/test_sglang_extend.py). The finished reply is split
by the server's own parsers (client.engine.continuation.split_reply) and records each attempt's share
(`continued`) when more than one made it.

Not on this path: the stream's loop stop (it reads the chat stream's text), the MTP and cache figures of the
`sglext` chunk. A reply whose ids are lost with the process (kill -9) is generated again by the next run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from dataclasses import dataclass, field

import orjson

from client.core.payload import RequestShape
from client.core.records import Completion, ContinuedPart, Prompt, ToolCall, Usage
from client.engine.continuation import split_reply
from client.wire.endpoint import Endpoint
from client.wire.native import Parsers, sampling_params, stream_body


@dataclass
class ReplyInProgress:
    """One prompt's reply across its attempts: the prompt's ids (rendered once), every id received so far, each
    attempt's share, and why it ended once it has."""

    prompt_ids: list[int] | None = None
    ids: list[int] = field(default_factory=list)
    parts: list[ContinuedPart] = field(default_factory=list)
    finish: str | None = None  # "stop" or "length" once the server ended it
    attempt_offset: int = 0  # attempts of earlier runs (a reply restored from OUT/partials)
    open_attempt: int | None = None  # the attempt streaming now, and where its ids began
    open_from: int = 0

    def open(self, attempt: int) -> None:
        self.open_attempt, self.open_from = attempt, len(self.ids)

    def close_attempt(self) -> None:
        if self.open_attempt is not None and len(self.ids) > self.open_from:
            self.parts.append(ContinuedPart(attempt=self.open_attempt, tokens=len(self.ids) - self.open_from))
        self.open_attempt = None

    def shares(self) -> list[ContinuedPart]:
        """Each attempt's share so far, the one streaming now included."""
        if self.open_attempt is None or len(self.ids) <= self.open_from:
            return list(self.parts)
        return [*self.parts, ContinuedPart(attempt=self.open_attempt, tokens=len(self.ids) - self.open_from)]


async def prompt_ids(endpoint: Endpoint, shape: RequestShape, prompt: Prompt, messages: list[dict[str, object]],
                     reply: ReplyInProgress) -> list[int]:
    """The prompt's ids as the server renders its chat request (once per prompt)."""
    if reply.prompt_ids is None:
        path = shape.count_path(endpoint.index)
        if path is None:  # refused at start (client.fleet.native_check); a guard, not a path
            raise RuntimeError(f"{endpoint.url} cannot render prompts")
        reply.prompt_ids = await endpoint.tokenize(path, orjson.dumps(shape.count_request(prompt, messages)))
    return reply.prompt_ids


def _call_id(prompt_id: str, index: int) -> str:
    return "call_" + hashlib.sha256(f"{prompt_id}\0{index}".encode()).hexdigest()[:24]


async def native_attempt(endpoint: Endpoint, shape: RequestShape, prompt: Prompt, messages: list[dict[str, object]],
                         reply: ReplyInProgress, *, attempt: int, max_tokens: int,
                         parsers: Parsers) -> tuple[Completion, float | None]:
    """One attempt at the prompt's reply on `endpoint`: the rest of it, then its split. AttemptError as for any
    request; the ids it received stay in `reply`."""
    started = time.monotonic()
    ids = await prompt_ids(endpoint, shape, prompt, messages, reply)
    draw = shape.draw(prompt)
    first: list[float] = []
    room = max_tokens - len(reply.ids)
    if reply.finish is None and room < 1:
        reply.finish = "length"  # the earlier attempts used the whole budget
    if reply.finish is None:
        values = dataclasses.replace(draw.setting.values, seed=draw.seed)
        reply.open(reply.attempt_offset + attempt)

        def take(new: list[int]) -> None:
            if not first:
                first.append(time.monotonic() - started)
            reply.ids.extend(new)

        try:
            stream = await endpoint.stream_generate(stream_body([*ids, *reply.ids], sampling_params(values, room)),
                                                    room, take)
        finally:
            reply.close_attempt()
        assert stream.final is not None
        reply.finish = stream.final.finish_reason
    split = await split_reply(endpoint, reply.ids, prompt.tools, draw.setting.values.enable_thinking, parsers)
    calls = tuple(ToolCall(_call_id(prompt.id, n), call.name, call.arguments) for n, call in enumerate(split.calls))
    finish = "tool_calls" if reply.finish == "stop" and calls else reply.finish
    usage: Usage = {"prompt_tokens": len(ids), "completion_tokens": len(reply.ids),
                    "total_tokens": len(ids) + len(reply.ids)}
    continued = list(reply.parts) if len(reply.parts) > 1 else None
    return Completion(split.reasoning, split.content, calls, finish, usage, None, list(ids), list(reply.ids),
                      continued=continued), (first[0] if first else None)
