"""SGLang's native `/generate`, as the client sends and reads it: token ids in, token ids out.

The continuation of a broken reply (client.engine.continuation) posts the prompt's ids plus the partial
reply's exact ids as `input_ids`, with the run's sampling as SGLang's `sampling_params` and the budget left
as `max_new_tokens`. Given those ids, generating the rest has the same distribution as one uninterrupted
reply (at temperature 0 the same ids: tests/test_sglang_generate.py holds real SGLang 0.5.23 to it).

The request is not streamed: SGLang's default `/generate` stream sends every id so far in every event (its
`--incremental-streaming-output` sends only the new ones), which would cost the client quadratic bytes on a
long reply; one JSON answer costs the reply's ids once. Shapes (SGLang 0.5.23 `http_server.py`
`generate_request`, `tokenizer_manager.py`, `sampling_params.py`): `{"text", "output_ids", "meta_info":
{"finish_reason": {"type": "stop", "matched": ID} | {"type": "length", "length": N}, "prompt_tokens",
"completion_tokens", ...}}`; a refusal is HTTP 400 `{"error": ...}`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from client.core.errors import OversizedResponse, ProtocolError, StreamErrorEvent
from client.core.payload import SamplingSettings
from client.wire.bounds import mib
from client.wire.sse import data_lines, normalise

GENERATE_PATH = "/generate"


@dataclass(frozen=True, slots=True)
class Generated:
    """One `/generate` answer: the new ids and their text, and why it ended."""

    output_ids: list[int]
    text: str
    finish_reason: str  # "stop" or "length" (SGLang's finish_reason type; "abort" is an error)
    matched: int | None  # the stop id that ended it
    prompt_tokens: int
    completion_tokens: int


def sampling_params(settings: SamplingSettings, max_new_tokens: int) -> dict[str, Any]:
    """The run's sampling under SGLang's names: the same draw as the chat request's (`seed` is
    `sampling_seed`; thinking is already in the prompt's ids, so it has no field here)."""
    params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "temperature": settings.temperature,
                              "top_p": settings.top_p, "presence_penalty": settings.presence_penalty}
    if settings.top_k is not None:
        params["top_k"] = settings.top_k
    if settings.min_p is not None:
        params["min_p"] = settings.min_p
    if settings.seed is not None:
        params["sampling_seed"] = settings.seed
    return params


def generate_body(input_ids: list[int], params: dict[str, Any]) -> bytes:
    return orjson.dumps({"input_ids": input_ids, "sampling_params": params, "stream": False})


def parse_generated(raw: bytes, where: str) -> Generated:
    """The answer's fields; ProtocolError naming `where` when it is not SGLang's shape."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProtocolError(f"{where} answered /generate with something other than JSON: {raw[:200]!r}") from None
    meta = doc.get("meta_info") if isinstance(doc, dict) else None
    ids = doc.get("output_ids") if isinstance(doc, dict) else None
    finish = meta.get("finish_reason") if isinstance(meta, dict) else None
    if not isinstance(ids, list) or not isinstance(finish, dict) or not all(type(i) is int for i in ids):
        raise ProtocolError(f"{where} answered /generate without output_ids and a finish_reason: {raw[:200]!r}")
    kind = finish.get("type")
    if kind not in ("stop", "length"):
        raise ProtocolError(f"{where} ended the /generate request with {finish!r}")
    matched = finish.get("matched")
    assert isinstance(meta, dict)
    text = doc.get("text")
    return Generated(ids, text if isinstance(text, str) else "", str(kind),
                     matched if type(matched) is int else None,
                     int(meta.get("prompt_tokens") or 0), int(meta.get("completion_tokens") or len(ids)))


# SGLang's own text routes, which the stitching of a continued reply uses (client.extend.stitch): the whole
# reply's text from its ids, then reasoning, content and tool calls split by the parsers the server runs for
# its chat completions (SGLang 0.5.23 `http_server.py`: `/v1/detokenize` with `DetokenizeRequest`,
# `/separate_reasoning` with `SeparateReasoningReqInput`, `/parse_function_call` with `ParseFunctionCallReq`).
DETOKENIZE_PATH = "/v1/detokenize"
SEPARATE_REASONING_PATH = "/separate_reasoning"
PARSE_FUNCTION_CALL_PATH = "/parse_function_call"


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """One tool call as `/parse_function_call` gives it: the name and the arguments' JSON text."""

    name: str
    arguments: str


def detokenize_body(ids: list[int]) -> bytes:
    # The chat completion's text skips special tokens too (SGLang's default): the same text its parsers saw.
    return orjson.dumps({"tokens": ids, "skip_special_tokens": True})


def separate_reasoning_body(text: str, parser: str) -> bytes:
    return orjson.dumps({"text": text, "reasoning_parser": parser})


def parse_function_call_body(text: str, tools: list[dict[str, Any]], parser: str) -> bytes:
    return orjson.dumps({"text": text, "tools": tools, "tool_call_parser": parser})


def parse_detokenized(doc: Any, where: str) -> str:
    text = doc.get("text") if isinstance(doc, dict) else None
    if not isinstance(text, str):
        raise ProtocolError(f"{where} answered {DETOKENIZE_PATH} without a text: {str(doc)[:200]!r}")
    return text


def parse_separated(doc: Any, where: str) -> tuple[str, str]:
    """(reasoning, the text after it)."""
    reasoning = doc.get("reasoning_text") if isinstance(doc, dict) else None
    text = doc.get("text") if isinstance(doc, dict) else None
    if not isinstance(text, str) or not isinstance(reasoning, str | None):
        raise ProtocolError(f"{where} answered {SEPARATE_REASONING_PATH} without reasoning_text and text: "
                            f"{str(doc)[:200]!r}")
    return reasoning or "", text


def parse_function_calls(doc: Any, where: str) -> tuple[str, list[ParsedCall]]:
    """(the text outside the calls, the calls in order)."""
    normal = doc.get("normal_text") if isinstance(doc, dict) else None
    calls = doc.get("calls") if isinstance(doc, dict) else None
    if not isinstance(normal, str) or not isinstance(calls, list):
        raise ProtocolError(f"{where} answered {PARSE_FUNCTION_CALL_PATH} without normal_text and calls: "
                            f"{str(doc)[:200]!r}")
    parsed: list[ParsedCall] = []
    for call in calls:
        name = call.get("name") if isinstance(call, dict) else None
        arguments = call.get("parameters") if isinstance(call, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise ProtocolError(f"{where} answered {PARSE_FUNCTION_CALL_PATH} with a call without a name and "
                                f"parameters: {str(call)[:200]!r}")
        parsed.append(ParsedCall(name, arguments))
    return normal, parsed


@dataclass(frozen=True, slots=True)
class Parsers:
    """A server's own output parsers (its `/server_info`): how its chat completions split a reply."""

    reasoning: str | None
    tool_call: str | None


def stream_body(input_ids: list[int], params: dict[str, Any]) -> bytes:
    return orjson.dumps({"input_ids": input_ids, "sampling_params": params, "stream": True})


class GenerateStream:
    """A streamed `/generate` read as it comes: each event's new ids handed to `on_ids` at once, so a stream
    that breaks leaves every id it delivered with the caller (client.engine.native_reply).

    SGLang sends, per event, the ids so far (its default) or only the new ones (`--incremental-streaming-output`):
    `meta_info.completion_tokens` counts them all either way, so an event's new ids are the last
    `completion_tokens - received` of its `output_ids`. Framing as in client.wire.sse (LF, CRLF or CR line
    ends; a blank line ends an event); an event's bytes and the stream's are capped as a chat stream's are.
    """

    def __init__(self, on_ids: Callable[[list[int]], None], where: str, *, event_bytes: int,
                 stream_bytes: int) -> None:
        self.on_ids = on_ids
        self.where = where
        self.event_bytes = event_bytes
        self.stream_bytes = stream_bytes
        self.received = 0
        self.events = 0
        self.cumulative = False  # an event held more ids than it added: the server is not incremental
        self.final: Generated | None = None
        self._tail = b""
        self._bytes = 0

    def feed(self, data: bytes) -> bool:
        """Bytes in; True when they brought new ids (progress, for the idle timer)."""
        self._bytes += len(data)
        if self._bytes > self.stream_bytes:
            raise OversizedResponse(f"{self.where}{GENERATE_PATH} streamed over {mib(self.stream_bytes)}, the "
                                    "client's cap")
        before = self.received
        buffer = normalise(self._tail + data)
        *events, self._tail = buffer.split(b"\n\n")
        if len(self._tail) > self.event_bytes:
            raise OversizedResponse(f"{self.where}{GENERATE_PATH} sent an event over {mib(self.event_bytes)}")
        for event in events:
            payload = data_lines(event).strip()
            if payload and payload != b"[DONE]":
                self._event(payload)
        return self.received > before

    def _event(self, payload: bytes) -> None:
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise ProtocolError(f"{self.where} streamed a /generate event that is not JSON: "
                                f"{payload[:200]!r}") from None
        if isinstance(doc, dict) and "error" in doc:
            raise StreamErrorEvent(f"{self.where} ended /generate with an error: {str(doc['error'])[:300]}")
        ids = doc.get("output_ids") if isinstance(doc, dict) else None
        meta = doc.get("meta_info") if isinstance(doc, dict) else None
        total = meta.get("completion_tokens") if isinstance(meta, dict) else None
        if not isinstance(ids, list) or type(total) is not int or not all(type(i) is int for i in ids):
            raise ProtocolError(f"{self.where} streamed a /generate event without output_ids and a count: "
                                f"{payload[:200]!r}")
        self.events += 1
        new = total - self.received
        if new < 0 or new > len(ids):
            raise ProtocolError(f"{self.where} streamed {len(ids)} id(s) counted as {total} after {self.received}")
        self.cumulative = self.cumulative or len(ids) > new
        if new:
            self.on_ids(ids[len(ids) - new:])
            self.received = total
        finish = meta.get("finish_reason") if isinstance(meta, dict) else None
        if isinstance(finish, dict):
            kind = finish.get("type")
            if kind not in ("stop", "length"):
                raise StreamErrorEvent(f"{self.where} ended the /generate request with {finish!r}")
            matched = finish.get("matched")
            assert isinstance(meta, dict)
            self.final = Generated([], "", str(kind), matched if type(matched) is int else None,
                                   int(meta.get("prompt_tokens") or 0), total)
