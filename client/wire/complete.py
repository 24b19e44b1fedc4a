"""Non-streaming chat completions: one POST with `stream: false`, its JSON body -> a `Completion`.

This is how exact token ids come from SGLang: its chat endpoint answers `return_token_ids: true` only
when the request does not stream (it refuses the pair with HTTP 400, `serving_chat.py`). The body is a
`ChatCompletionResponse` (SGLang 0.5.23 `protocol.py`): `choices[0].message` with `content`,
`reasoning_content` (vLLM: `reasoning`) and `tool_calls`; `choices[0].token_ids` and
`choices[0].prompt_token_ids` when asked for (vLLM puts `prompt_token_ids` on the response itself);
`usage`, whose `prompt_tokens_details.cached_tokens` is the prefix-cache hit where the server reports it;
and `sglext`, SGLang's extension object, with `spec_tokens_details` (`return_spec_tokens_details`: the
request's MTP accept length, accept rate, verify steps and draft counts) and `cached_tokens_details`
(`return_cached_tokens_details`: cached tokens by tier: device, host, storage).

The request goes over the streaming transport (client.wire.transport), so a non-streaming request shares
its connections, TLS, proxies and error mapping. Nothing arrives until the reply is whole, so there is no
idle timeout to speak of: the caller gives a deadline for the whole request instead (client.run.deadline),
as a number or as a function that is asked again every `revise_s` seconds while the request is out (the
measured rate moves), and a request past it fails as StreamStalled, which is retried like a stalled stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson

from client.core.errors import StreamDropped, StreamErrorEvent, StreamStalled, error_for_status, map_json_error
from client.core.records import Completion, Spec, ToolCall, Usage
from client.wire.transport import StreamingTransport

# SGLang's per-request extension fields: the MTP figures and the cache tiers (SGLang 0.5.23 `protocol.py`,
# ChatCompletionRequest). They change nothing in the reply, so they are not part of the recorded sampling.
SGLANG_DETAIL_FIELDS = ("return_spec_tokens_details", "return_cached_tokens_details")


def as_nonstreaming(payload: dict[str, Any], *, details: bool) -> dict[str, Any]:
    """The run's streaming payload (client.core.payload.build_payload) turned into its non-streaming form:
    `stream: false`, no `stream_options`, and (SGLang only, `details`) the detail fields and, with
    `return_token_ids`, `return_prompt_token_ids`."""
    out = {key: value for key, value in payload.items() if key != "stream_options"}
    out["stream"] = False
    if details:
        for name in SGLANG_DETAIL_FIELDS:
            out[name] = True
        if out.get("return_token_ids"):
            out["return_prompt_token_ids"] = True  # SGLang fills choices[0].prompt_token_ids on this flag
    return out


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ids(value: object) -> list[int] | None:
    if isinstance(value, list) and all(_int(item) is not None for item in value):
        return value
    return None


def spec_from(details: object) -> Spec | None:
    """SGLang's `sglext.spec_tokens_details` (one object for n=1) -> the record's `spec` object."""
    if isinstance(details, list):
        details = details[0] if details else None
    if not isinstance(details, dict):
        return None
    spec: Spec = {}
    for ours, theirs in (("accept_length", "spec_accept_length"), ("accept_rate", "spec_accept_rate")):
        value = details.get(theirs)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            spec[ours] = float(value)  # type: ignore[literal-required]
    for ours, theirs in (("verify_ct", "spec_verify_ct"), ("draft_tokens", "spec_num_proposed_drafts"),
                         ("accepted_tokens", "spec_num_correct_drafts")):
        number = _int(details.get(theirs))
        if number is not None:
            spec[ours] = number  # type: ignore[literal-required]
    histogram = _ids(details.get("spec_correct_drafts_histogram"))
    if histogram:
        spec["accepted_histogram"] = histogram
    return spec or None


def _cached_tokens(usage: Usage, sglext: dict[str, Any]) -> None:
    """Fill `usage.prompt_tokens_details.cached_tokens` from the cache tiers when only those came."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        return
    tiers = sglext.get("cached_tokens_details")
    if isinstance(tiers, dict):
        total = sum(_int(tiers.get(tier)) or 0 for tier in ("device", "host", "storage"))
        usage["prompt_tokens_details"] = {**(details if isinstance(details, dict) else {}), "cached_tokens": total}


def _tool_calls(found: object, where: str) -> tuple[ToolCall, ...]:
    """`message.tool_calls` -> ToolCalls; StreamDropped when it is not a list of calls with a function object
    (a malformed answer is a failed attempt, never an exception that would end the run)."""
    if found is None:
        return ()
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for call in found if isinstance(found, list) else [None]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(function, dict):
            raise StreamDropped(f"{where} answered tool_calls that are not a list of calls with a function "
                                f"object: {orjson.dumps(found)[:200]!r}")
        pairs.append((call, function))
    return tuple(ToolCall(id=str(call.get("id") or ""), name=str(function.get("name") or ""),
                          arguments=str(function.get("arguments") or "")) for call, function in pairs)


def parse_completion(body: bytes, where: str, content_type: str | None = None) -> Completion:
    """A non-streaming chat.completion body -> Completion; an AttemptError when it is not one."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise map_json_error(exc, where, content_type, body) from exc
    if not isinstance(obj, dict):
        raise StreamDropped(f"{where} answered 200 with JSON that is not an object: {body[:200]!r}")
    if "error" in obj and not obj.get("choices"):
        error = obj["error"]
        text = error.get("message") if isinstance(error, dict) else error
        raise StreamErrorEvent(f"error in the answer: {text}")
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise StreamDropped(f"{where} answered 200 without choices: {body[:200]!r}")
    choice = choices[0]
    found = choice.get("message")
    message: dict[str, Any] = found if isinstance(found, dict) else {}
    calls = _tool_calls(message.get("tool_calls"), where)
    finish = choice.get("finish_reason")
    if not isinstance(finish, str) or not finish:
        raise StreamDropped(f"{where} answered without a finish_reason")
    usage: Usage = obj["usage"] if isinstance(obj.get("usage"), dict) else {}
    extension = obj.get("sglext")
    sglext: dict[str, Any] = extension if isinstance(extension, dict) else {}
    _cached_tokens(usage, sglext)
    model = obj.get("model")
    return Completion(
        reasoning=str(message.get("reasoning_content") or message.get("reasoning") or ""),
        content=str(message.get("content") or ""),
        tool_calls=calls,
        finish_reason=finish,
        usage=usage,
        model=model if isinstance(model, str) else None,
        prompt_token_ids=_ids(choice.get("prompt_token_ids")) or _ids(obj.get("prompt_token_ids")),
        completion_token_ids=_ids(choice.get("token_ids")),
        spec=spec_from(sglext.get("spec_tokens_details")),
    )


# The connection's own idle timer must never fire first: nothing arrives until the answer is whole, and the
# deadline may be moved later while the request is out.
_NO_IDLE_LIMIT_S = 30 * 86400.0
REVISE_S = 30.0


async def complete_chat(transport: StreamingTransport, path: str, body: bytes, *,
                        deadline_s: float | Callable[[], float], where: str, revise_s: float = REVISE_S) -> Completion:
    """POST one non-streaming chat completion; StreamStalled when no whole answer came within its deadline.

    `deadline_s`: seconds from the start the request may take, or a function giving them, asked again
    every `revise_s` seconds, so the deadline of a request in flight follows what it is computed from."""
    limit: Callable[[], float] = deadline_s if callable(deadline_s) else lambda: deadline_s
    loop = asyncio.get_running_loop()
    started = loop.time()
    allowed = limit()
    parts: list[bytes] = []
    try:
        async with asyncio.timeout_at(started + allowed) as timer:
            revision: asyncio.TimerHandle | None = None

            def revise() -> None:
                nonlocal allowed, revision
                if timer.expired():
                    return
                allowed = limit()
                timer.reschedule(started + allowed)  # a time already past expires it at once
                revision = loop.call_later(revise_s, revise)

            if callable(deadline_s):
                revision = loop.call_later(revise_s, revise)
            try:
                response = await transport.post(path, body, parts.append, idle_timeout=_NO_IDLE_LIMIT_S)
            finally:
                if revision is not None:
                    revision.cancel()
    except TimeoutError:
        raise StreamStalled(f"no answer from {where} within {allowed:.0f}s, the deadline for this request's "
                            "max_tokens at the measured decode rate") from None
    if response.status != 200:
        raise error_for_status(response.status, response.error_body, response.headers.get("retry-after"))
    return parse_completion(b"".join(parts), where, response.headers.get("content-type"))
