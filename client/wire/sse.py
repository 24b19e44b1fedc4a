"""SSE bytes -> Completion: the per-chunk hot path of the client.

Raw bytes are split into events by hand and each event is parsed once with orjson; no SDK object is
built per chunk. The event framing follows the SSE spec (WHATWG HTML, "server-sent events"): lines end
with CRLF, LF or a lone CR; a blank line ends an event; lines starting with `:` are comments; the values
of several `data:` lines join with `\n`; `event:`, `id:` and `retry:` lines are read past (chat streams
put their meaning in the data, and an error event is recognised by its `{"error": ...}` payload).
The fast path takes the common event, one `data: {...}` line, in one orjson call; anything else takes
the general path. (Hand-written rather than a library: the SSE libraries for Python decode to str and
build an object per event, which this hot path cannot afford; see docs/benchmarks.md.)

The parser accepts SGLang's `reasoning_content` and vLLM's `reasoning`, merges tool-call deltas by
index, takes token counts only from `usage` (with MTP one chunk carries several tokens, so counting
chunks would be wrong; usage may ride on the finish chunk or come in a chunk of its own), keeps a live
count of tokens so far (`live_tokens`: the running `usage.completion_tokens` that
`stream_options.continuous_usage_stats` puts on each chunk, else one per output chunk, a lower bound the
final usage corrects), tolerates
builds that omit null fields or never send `[DONE]` (a stream that ends cleanly after its finish_reason
is whole), and turns a `data: {"error": ...}` event into a failed attempt.

Exact token ids and MTP figures come as the server's kind sends them, which the parser is handed as a
`ReplyDialect` (client.wire.dialect; each kind's lives with its profile in client.fleet.servers): a key on
each chunk's choice (vLLM: `token_ids`) and on the chunk (`prompt_token_ids`), looked up as the standard
fields are, and the object a chunk with no choices carries (SGLang: `sglext`, with the request's MTP
figures and cache tiers), read by the kind's own reader. A chunk with no choices is rare, so the per-chunk
path does no more work for any kind.

Memory is bounded (client.wire.bounds): the unterminated tail of an event held between reads may not pass
`event_bytes`, and the bytes of the whole stream (after any gzip) not `stream_bytes`; passing either is an
OversizedResponse naming the cap, so a server cannot grow the client without end, compressed or not.

The finished Completion has the run's known secrets masked in its texts (`redact.reply`): a server that
echoes the bearer token in what it generates cannot get it into a record.
"""

from __future__ import annotations

from typing import Any

import orjson

from client.core import redact
from client.core.errors import OversizedResponse, StreamDropped, StreamErrorEvent
from client.core.records import Completion, ToolCall, Usage
from client.loops.repetition import Repetition, RepetitionDetector
from client.wire.bounds import EVENT_BYTES, STREAM_BYTES, mib
from client.wire.dialect import PLAIN, ReplyDialect
from client.wire.errors_map import EVENT, Step, translate_attempt

_loads = orjson.loads


class _ToolCallParts:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []


class StreamParser:
    """Incremental parser for one chat-completions stream. Feed it bytes; call `completion()` at the end."""

    __slots__ = (
        "_completion_ids",
        "_content",
        "_dialect",
        "_event_bytes",
        "_held",
        "_ids_key",
        "_last_tool_index",
        "_prompt_key",
        "_reasoning",
        "_stream_bytes",
        "_tail",
        "_tools",
        "done",
        "events",
        "exact_count",
        "finish_reason",
        "live_tokens",
        "loop",
        "model",
        "prompt_token_ids",
        "received",
        "saw_output",
        "trailer",
        "usage",
        "watch",
    )

    def __init__(self, watch: RepetitionDetector | None = None, *, dialect: ReplyDialect = PLAIN,
                 event_bytes: int = EVENT_BYTES, stream_bytes: int = STREAM_BYTES) -> None:
        # The unterminated event held between reads, as the pieces it came in (normalised: LF line endings,
        # but for a CR at the very end), and their length: an event that spans many reads is joined once,
        # when its end arrives, not copied and searched again at every read.
        self._tail: list[bytes] = []
        self._held = 0
        self._event_bytes = event_bytes
        self._stream_bytes = stream_bytes
        self.received = 0  # bytes fed, after any gzip
        # The loop stop (client.loops.repetition): fed the reply's text as it streams; `loop` is set once the
        # tail repeats, and the endpoint then ends the stream.
        self.watch = watch
        self.loop: Repetition | None = None
        self._reasoning: list[str] = []
        self._content: list[str] = []
        self._tools: dict[int, _ToolCallParts] = {}
        self._last_tool_index = -1
        self._completion_ids: list[int] | None = None
        self.done = False
        self.events = 0
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model: str | None = None
        self.prompt_token_ids: list[int] | None = None
        # How this server's kind sends ids and figures; its two per-chunk keys are held in slots of their own.
        self._dialect = dialect
        self._ids_key = dialect.choice_ids
        self._prompt_key = dialect.prompt_ids
        self.trailer: dict[str, Any] | None = None  # the kind's trailer objects, merged
        self.saw_output = False
        self.live_tokens = 0  # completion tokens so far: exact with per-chunk usage, else output chunks
        self.exact_count = False

    def feed(self, data: bytes) -> None:
        received = self.received + len(data)
        self.received = received
        if received > self._stream_bytes:
            raise OversizedResponse(f"the stream passed {mib(self._stream_bytes)} (decoded), the client's cap on "
                                    "one stream's bytes")
        if self._tail:
            buffer = self._extend(data)
            if buffer is None:
                return  # still inside one event
        elif b"\r" in data:
            buffer = normalise(data)
        else:
            buffer = data
        start = 0
        find = buffer.find
        startswith = buffer.startswith
        while True:
            end = find(b"\n\n", start)
            if end < 0:
                break
            if startswith(b"data: {", start):
                # The common event, parsed without looking at it twice; anything orjson refuses (e.g. a
                # payload split over several data lines) takes the general path.
                try:
                    obj = _loads(buffer[start + 6:end])
                except orjson.JSONDecodeError:
                    self._event(buffer[start:end])
                else:
                    self._chunk(obj)
            elif end > start:
                self._event(buffer[start:end])
            start = end + 2
        if start < len(buffer):
            self._hold(buffer[start:] if start else buffer)

    def _hold(self, piece: bytes) -> None:
        """Keep the unterminated end of a read for the next one, within the cap on one event's bytes."""
        self._tail.append(piece)
        self._held += len(piece)
        if self._held > self._event_bytes:
            raise OversizedResponse(f"one event passed {mib(self._event_bytes)} (decoded) without its end, the "
                                    "client's cap on one event's bytes")

    def _extend(self, data: bytes) -> bytes | None:
        """A read that continues a held event: the held bytes and this read as one buffer when the read ends
        an event, else None (the read is held too). Only the new bytes are searched, so an event that spans
        n reads costs O(its length), not O(n * its length)."""
        tail = self._tail
        last = tail[-1]
        if last.endswith(b"\r"):
            # The CR held back may be the first half of a CRLF whose LF starts this read.
            if len(last) == 1:
                tail.pop()
            else:
                tail[-1] = last[:-1]
            self._held -= 1
            data = b"\r" + data
        if b"\r" in data:
            data = normalise(data)
        if not tail:
            return data
        if b"\n\n" not in data and not (data.startswith(b"\n") and tail[-1].endswith(b"\n")):
            if data:
                self._hold(data)
            return None
        tail.append(data)
        buffer = b"".join(tail)
        tail.clear()
        self._held = 0
        return buffer

    def _event(self, event: bytes) -> None:
        payload = event[6:] if event.startswith(b"data: ") and b"\n" not in event else data_lines(event)
        if not payload.strip():
            return  # comments, keep-alives, an event with no data
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise translate_attempt(exc, Step(EVENT, "the server", data=payload)) from exc
        if not isinstance(obj, dict):
            raise StreamDropped(f"event is not a JSON object: {payload[:200]!r}")
        self._chunk(obj)

    def _chunk(self, obj: dict[str, Any]) -> None:
        self.events += 1
        choices = obj.get("choices")
        if choices:
            choice = choices[0]
            delta = choice.get("delta")
            if delta:
                output = False
                text = delta.get("reasoning_content") or delta.get("reasoning")
                if text:
                    self._reasoning.append(text)
                    output = True
                    if self.watch is not None:
                        self.loop = self.watch.feed(text)
                text = delta.get("content")
                if text:
                    self._content.append(text)
                    output = True
                    if self.watch is not None:
                        self.loop = self.watch.feed(text)
                calls = delta.get("tool_calls")
                if calls:
                    self._merge_tool_calls(calls)
                    output = True
                if output:
                    self.saw_output = True
                    if not self.exact_count:
                        self.live_tokens += 1  # at least one token per chunk; the final usage corrects it
            ids = choice.get(self._ids_key)
            if ids:
                if self._completion_ids is None:
                    self._completion_ids = []
                self._completion_ids.extend(ids)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = reason
        else:
            self._without_choices(obj)
        usage = obj.get("usage")
        if usage:
            self._take_usage(usage)
        if self.model is None:
            self.model = obj.get("model")
        prompt_ids = obj.get(self._prompt_key)
        if prompt_ids:
            self.prompt_token_ids = prompt_ids

    def _without_choices(self, obj: dict[str, Any]) -> None:
        """A chunk without choices (rare: off the per-token path): an error event, or the kind's trailer."""
        if "error" in obj:
            raise StreamErrorEvent(f"error event: {_error_text(obj['error'])}")
        key = self._dialect.trailer
        if key:
            trailer = obj.get(key)
            if isinstance(trailer, dict):
                self._take_trailer(trailer)

    def _take_usage(self, usage: Usage) -> None:
        """The final usage: its completion count replaces the live one (one per chunk) when it is a count."""
        self.usage = usage
        count = usage.get("completion_tokens")
        if type(count) is int and count >= self.live_tokens:
            self.live_tokens = count
            self.exact_count = True

    def _take_trailer(self, trailer: dict[str, Any]) -> None:
        """The kind's ids and figures; they may come in several chunks (SGLang's framed ids event), so merge."""
        self.trailer = {**self.trailer, **trailer} if self.trailer else trailer
        read = self._dialect.read_trailer
        if read is None:
            return
        found = read(trailer)
        if found.completion is not None:
            self._completion_ids = found.completion
        if found.prompt is not None:
            self.prompt_token_ids = found.prompt

    def _merge_tool_calls(self, calls: list[dict[str, Any]]) -> None:
        self.saw_output = True
        for call in calls:
            index = call.get("index")
            if index is None:
                # Some builds omit the index; a new id starts a new call, otherwise it continues the last.
                index = len(self._tools) if call.get("id") or self._last_tool_index < 0 else self._last_tool_index
            parts = self._tools.get(index)
            if parts is None:
                parts = self._tools[index] = _ToolCallParts()
            self._last_tool_index = index
            if call.get("id"):
                parts.id = call["id"]
            function = call.get("function")
            if function:
                if function.get("name"):
                    parts.name += function["name"]
                if function.get("arguments"):
                    parts.arguments.append(function["arguments"])

    def stopped(self, finish_reason: str) -> Completion:
        """The reply so far, ended by the client (the loop stop): `finish_reason` says why. Its usage is the
        last running usage the server sent, else the live count."""
        usage: Usage = dict(self.usage) if self.usage is not None else {}  # type: ignore[assignment]
        usage["completion_tokens"] = max(self.live_tokens, int(usage.get("completion_tokens") or 0))
        self.finish_reason = finish_reason
        return self._completion(usage)

    @property
    def whole(self) -> bool:
        """True once finish_reason and usage have both arrived: a later dropped connection loses nothing."""
        return self.finish_reason is not None and self.usage is not None

    def completion(self, *, ended_cleanly: bool) -> Completion:
        """The finished completion, or StreamDropped when the stream stopped before it was whole.

        A stream that closed cleanly after its finish_reason is whole even without usage or `[DONE]`.
        """
        if ended_cleanly and b"".join(self._tail).strip():
            self.feed(b"\n\n")  # a last event without its blank line is still an event
        if self.finish_reason is None or not (ended_cleanly or self.usage is not None):
            raise StreamDropped("stream ended before finish_reason" if self.finish_reason is None
                                else "connection lost before usage arrived")
        return self._completion(self.usage if self.usage is not None else {})

    def _completion(self, usage: Usage) -> Completion:
        # Masked here, once, so no record, retry, next turn, S3 object or export can hold an echoed API key.
        tool_calls = tuple(
            ToolCall(id=redact.reply(parts.id), name=redact.reply(parts.name),
                     arguments=redact.reply("".join(parts.arguments)))
            for _, parts in sorted(self._tools.items())
        )
        figures = self._dialect.figures
        spec = figures(self.trailer, usage) if self.trailer is not None and figures is not None else None
        return Completion(
            reasoning=redact.reply("".join(self._reasoning)),
            content=redact.reply("".join(self._content)),
            tool_calls=tool_calls,
            finish_reason=self.finish_reason,
            usage=usage,
            model=self.model,
            prompt_token_ids=self.prompt_token_ids,
            completion_token_ids=self._completion_ids,
            spec=spec,
        )


def normalise(buffer: bytes) -> bytes:
    """CRLF and lone CR line endings -> LF, so the fast path looks for one separator. A CR at the very end
    stays a CR: it may be the first half of a CRLF whose LF is in the next read."""
    pending = buffer.endswith(b"\r")
    if pending:
        buffer = buffer[:-1]
    buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return buffer + b"\r" if pending else buffer


def data_lines(event: bytes) -> bytes:
    """The general SSE case: several `data:` lines joined by newlines; other fields are ignored."""
    lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(lines)


def _error_text(error: object) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)
