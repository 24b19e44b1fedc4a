"""One cut record continued and stitched into its extended ResultRecord.

The continuation (client.engine.continuation) sends the prompt's ids plus the reply's exact ids to SGLang's
`/generate` with the record's own sampling and the budget the new limit leaves. The whole reply's text is
then made and split by the server itself, as its chat completions do: `/v1/detokenize` of every id (special
tokens skipped, as the chat stream's text is), `/separate_reasoning` with the server's reasoning parser, and,
when the prompt had tools, `/parse_function_call` with its tool-call parser. The qwen3 reasoning parser
reads a text without `<think>` as all content; a chat completion with thinking on forces it into the
reasoning instead (the template opened the think block in the prompt), so the text is sent with `<think>`
in front when the record's thinking was on: the parser strips it, which is the same split.

The record keeps everything of the old one but what the extension changed: the reply (ids, text split,
finish reason, usage), `continued` (the tokens of each attempt), `train_window` and `sampling.max_tokens`
(the new limits), `created`, and `attempts` (one more). The old `spec` (MTP figures of the first part only)
is dropped rather than left to describe a reply it no longer covers.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any, cast

from client.core.payload import SamplingSettings
from client.core.records import ContinuedPart, ResultRecord, WireToolCall
from client.engine.continuation import Partial, Split, Stitched, continue_reply, split_reply
from client.extend.select import Decision
from client.wire.endpoint import Endpoint
from client.wire.native import Parsers


def sampling_of(record: Mapping[str, Any]) -> SamplingSettings:
    """The record's own draw as SamplingSettings (what its first attempt was sent with)."""
    block = record.get("sampling")
    values = block if isinstance(block, Mapping) else {}
    defaults = SamplingSettings()

    def number(name: str, default: float | None) -> float | None:
        value = values.get(name, default)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default

    top_k = values.get("top_k")
    seed = values.get("seed")
    return SamplingSettings(
        max_tokens=int(values.get("max_tokens") or defaults.max_tokens),
        temperature=number("temperature", defaults.temperature) or 0.0,
        top_p=number("top_p", defaults.top_p) or defaults.top_p,
        top_k=top_k if type(top_k) is int else None,
        min_p=number("min_p", None),
        presence_penalty=number("presence_penalty", 0.0) or 0.0,
        seed=seed if type(seed) is int else None,
        enable_thinking=values.get("enable_thinking", True) is not False)


def partial_of(record: Mapping[str, Any]) -> Partial:
    """The record's reply as a partial one: its ids, and the attempts that made them."""
    ids = list(record["completion_token_ids"])
    earlier = record.get("continued")
    if isinstance(earlier, list) and earlier:
        parts = tuple(cast("ContinuedPart", dict(part)) for part in earlier[:-1])
        last = earlier[-1]
        return Partial(list(record["prompt_token_ids"]), ids, int(last["attempt"]), parts)
    return Partial(list(record["prompt_token_ids"]), ids, 1)


async def continue_record(endpoint: Endpoint, record: Mapping[str, Any], decision: Decision) -> Stitched:
    """The reply's continuation on `endpoint`: the new ids and the attempts' shares. AttemptError as for any
    request."""
    partial = partial_of(record)
    return await continue_reply(endpoint, partial, sampling_of(record), decision.budget, partial.attempt + 1)


async def split_record(endpoint: Endpoint, ids: list[int], record: Mapping[str, Any], parsers: Parsers) -> Split:
    """The whole reply's text split by the server's parsers, with the record's tools and thinking."""
    tools = record.get("tools")
    return await split_reply(endpoint, ids, tools if isinstance(tools, list) else None,
                             sampling_of(record).enable_thinking, parsers)


def _call_id(record_id: str, index: int) -> str:
    return "call_" + hashlib.sha256(f"{record_id}\0{index}".encode()).hexdigest()[:24]


def extended_record(record: Mapping[str, Any], decision: Decision, stitched: Stitched, split: Split,
                    endpoint: Endpoint) -> ResultRecord:
    out: dict[str, Any] = {key: value for key, value in record.items() if key != "spec"}
    calls: list[WireToolCall] = [
        {"id": _call_id(str(record["id"]), n), "type": "function",
         "function": {"name": call.name, "arguments": call.arguments}}
        for n, call in enumerate(split.calls)]
    finish = stitched.finish_reason
    if finish == "stop" and calls:
        finish = "tool_calls"  # as SGLang's chat completion reports a reply that ends in calls
    prompt_tokens = len(stitched.prompt_ids)
    out.update(
        reasoning=split.reasoning, content=split.content, tool_calls=calls, finish_reason=finish,
        usage={"prompt_tokens": prompt_tokens, "completion_tokens": len(stitched.completion_ids),
               "total_tokens": prompt_tokens + len(stitched.completion_ids)},
        completion_token_ids=stitched.completion_ids, endpoint=endpoint.url,
        attempts=int(record.get("attempts") or 1) + 1, created=time.time(), continued=stitched.continued)
    sampling = dict(record.get("sampling") or {})
    sampling["max_tokens"] = decision.max_tokens
    out["sampling"] = sampling
    if decision.window is not None:
        out["train_window"] = {"size": decision.window, "prompt_tokens": prompt_tokens, "max_tokens": decision.budget}
    return cast("ResultRecord", _in_contract_order(out))


def _in_contract_order(record: dict[str, Any]) -> dict[str, Any]:
    """The ResultRecord's field order (`id` first: the done-id scan reads it without parsing the line)."""
    order = list(ResultRecord.__annotations__)
    ordered = {key: record[key] for key in order if key in record}
    ordered.update({key: value for key, value in record.items() if key not in ordered})
    return ordered
