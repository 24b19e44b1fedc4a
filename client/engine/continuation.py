"""Continue, never regenerate: a reply that broke after k exact completion ids is finished on SGLang's native
`/generate` from the prompt's ids plus those k ids, instead of being generated again from token 0.

Given the prompt's ids and a partial reply's exact ids, generating the rest has the same distribution as one
uninterrupted reply (at temperature 0, the same ids: tests/test_sglang_generate.py on real SGLang 0.5.23).
The continuation asks for the budget left (`max_new_tokens = max_tokens - k`) with the run's sampling, and
the stitched reply records which attempt made how many of its tokens (`continued`, a ResultRecord field,
docs/data-contracts.md).

Where the partial's ids come from decides when this applies: SGLang's chat stream gives the ids only in the
`sglext` chunk after the finish chunk, so a broken chat stream holds none, while a reply generated on
`/generate` holds every id it has received. Ids that are missing (`--token-ids off`, a server without ids,
a chat stream cut before its ids) leave the old path: the prompt is sent again from token 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.core.payload import SamplingSettings
from client.core.records import ContinuedPart
from client.wire.endpoint import Endpoint
from client.wire.native import (
    DETOKENIZE_PATH,
    PARSE_FUNCTION_CALL_PATH,
    SEPARATE_REASONING_PATH,
    ParsedCall,
    Parsers,
    detokenize_body,
    generate_body,
    parse_detokenized,
    parse_function_call_body,
    parse_function_calls,
    parse_separated,
    sampling_params,
    separate_reasoning_body,
)

THINK_START = "<think>"


@dataclass(frozen=True, slots=True)
class Partial:
    """What a broken attempt leaves: the prompt's ids, the exact completion ids received, and which attempt
    it was; kept in memory until the continuation ends the reply."""

    prompt_ids: list[int]
    ids: list[int]  # every completion id so far, the earlier attempts' included
    attempt: int
    parts: tuple[ContinuedPart, ...] = ()  # the earlier attempts' shares, when this partial was continued

    @property
    def shares(self) -> list[ContinuedPart]:
        earlier = sum(part["tokens"] for part in self.parts)
        return [*self.parts, ContinuedPart(attempt=self.attempt, tokens=len(self.ids) - earlier)]


@dataclass(frozen=True, slots=True)
class Stitched:
    """The reply end to end: exact ids from every attempt, the continuation's text, why it ended."""

    prompt_ids: list[int]
    completion_ids: list[int]
    text: str  # the continuation's own text; the partial's text is the broken attempt's
    finish_reason: str  # "stop" or "length"
    matched: int | None
    continued: list[ContinuedPart]


async def continue_reply(endpoint: Endpoint, partial: Partial, settings: SamplingSettings, max_tokens: int,
                         attempt: int) -> Stitched:
    """Finish `partial` on `endpoint` as attempt number `attempt`; AttemptError as for any request."""
    room = max_tokens - len(partial.ids)
    if room < 1:
        # The partial already used the whole budget: the reply ended at its cap, as max_tokens ends one.
        return Stitched(partial.prompt_ids, list(partial.ids), "", "length", None, partial.shares)
    body = generate_body([*partial.prompt_ids, *partial.ids], sampling_params(settings, room))
    generated = await endpoint.generate(body, room)
    shares = [*partial.shares, ContinuedPart(attempt=attempt, tokens=len(generated.output_ids))]
    return Stitched(partial.prompt_ids, [*partial.ids, *generated.output_ids], generated.text,
                    generated.finish_reason, generated.matched, shares)


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    content: str
    calls: list[ParsedCall]


async def split_reply(endpoint: Endpoint, ids: list[int], tools: list[dict[str, Any]] | None, thinking: bool,
                      parsers: Parsers) -> Split:
    """The whole reply's text, made and split by the server as its chat completions do: `/v1/detokenize` of
    every id (special tokens skipped, as the chat stream's text is), `/separate_reasoning` with its reasoning
    parser and, when the prompt had tools, `/parse_function_call` with its tool-call parser. The qwen3
    reasoning parser reads a text without `<think>` as all content; a chat completion with thinking on forces
    it into the reasoning (the template opened the think block in the prompt), so the text goes with `<think>`
    in front when thinking was on: the parser strips it, which is the same split."""
    where = endpoint.url
    text = parse_detokenized(await endpoint.post_document(DETOKENIZE_PATH, detokenize_body(ids)), where)
    reasoning, rest = "", text
    if parsers.reasoning is not None:
        forced = THINK_START + text if thinking else text
        answer = await endpoint.post_document(SEPARATE_REASONING_PATH,
                                              separate_reasoning_body(forced, parsers.reasoning))
        reasoning, rest = parse_separated(answer, where)
    calls: list[ParsedCall] = []
    if parsers.tool_call is not None and tools:
        answer = await endpoint.post_document(PARSE_FUNCTION_CALL_PATH,
                                              parse_function_call_body(rest, tools, parsers.tool_call))
        rest, calls = parse_function_calls(answer, where)
    return Split(reasoning, rest, calls)
