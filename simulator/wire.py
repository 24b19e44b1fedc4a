"""Wire JSON of the chat endpoint, shaped like SGLang 0.5.23's OpenAI layer, key for key.

SGLang writes a stream's chunks two ways, and a client sees the difference:
- `openai/sse_utils.py` `build_sse_content` (msgspec, `omit_defaults`): the role chunk, reasoning deltas,
  content deltas of a request without tool parsing, and the finish chunk. Its delta always has the reasoning
  field (null or text) and has `role` / `content` only when set; the chunk has `usage` only when set.
- `openai/protocol.py` `ChatCompletionStreamResponse` (pydantic): content deltas of a request whose output
  runs through the tool-call parser, tool-call deltas, the `sglext` chunk and the usage chunk. Its delta has
  `role`, `content` and the reasoning field (null when unset) and `tool_calls` only when set; the chunk always
  has `usage` (null when unset) and `sglext` only when set.
Order (`serving_chat.py` `_generate_chat_stream`): role chunk; per decode step reasoning, then content or
tool-call deltas; the finish chunk; the `sglext` chunk (or, with `x-sglext-ids-framed: 1`, the non-id
fields as a data chunk and the ids as `event: sglext_ids`); the usage chunk with `choices: []` when
`stream_options.include_usage`; `data: [DONE]`. Running usage (`continuous_usage_stats`) rides on the
reasoning, content and tool-call deltas, never on the role or finish chunk.
The non-streaming `chat.completion` (`_build_chat_response`): `content` is a string, never null;
`reasoning_content` is null or text; `tool_calls` only when there are calls; `matched_stop` is the stop
token's id when the reply stopped by itself (null after tool calls, which the parser reports in its place);
`metadata` names the weight version and the span of tokens it made.
"""

from __future__ import annotations

from typing import Any

import orjson

from simulator.config import ReasoningField
from simulator.script import Piece, Script

DONE = b"data: [DONE]\n\n"


def sse(obj: Any, event: str | None = None) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(obj) + b"\n\n"


def drop_nulls(obj: Any) -> Any:
    """Some server builds omit null fields (msgspec `omit_defaults`); clients must not depend on them."""
    if isinstance(obj, dict):
        return {k: drop_nulls(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [drop_nulls(v) for v in obj]
    return obj


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse: a flat object, not OpenAI's {"error": {...}} envelope."""
    return {"object": "error", "message": message, "type": err_type, "param": param, "code": code}


def stream_error_event(message: str, err_type: str, code: int) -> bytes:
    """What `create_streaming_error_response` sends mid-stream: the error wrapped in {"error": ...}."""
    return sse({"error": error_body(message, err_type, code)})


def usage(prompt: int, completion: int, reasoning: int) -> dict[str, Any]:
    """`UsageProcessor.calculate_token_usage`: `completion_tokens_details` only when some were reasoning."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": reasoning,
        "completion_tokens_details": {"reasoning_tokens": reasoning} if reasoning else None,
    }


def _without_text_before_a_call(pieces: list[Piece]) -> list[Piece]:
    """One increment as the qwen parser streams it: the content before a call's start in it is lost."""
    start = next((i for i, p in enumerate(pieces) if p.phase == "tool_start"), None)
    if start is None:
        return pieces
    return [p for p in pieces[:start] if p.phase != "content"] + pieces[start:]


class ChunkWriter:
    """Builds the SSE events of one streamed completion."""

    def __init__(self, rid: str, created: int, model: str, reasoning_field: ReasoningField, omit_nulls: bool,
                 tool_parsing: bool = False, drops_text_beside_call: bool = False) -> None:
        self.rid = rid
        self.created = created
        self.model = model
        self.reasoning_field = reasoning_field
        self.omit_nulls = omit_nulls
        self.tool_parsing = tool_parsing
        # SGLang 0.5.23's qwen parser (Qwen25Detector, through BaseFormatDetector.parse_streaming_increment)
        # jumps to "<tool_call>\n" when an increment holds it and returns none of the text before it in that
        # increment: that text is in no chunk. qwen3_coder's cursor parser keeps it.
        self.drops_text_beside_call = tool_parsing and drops_text_beside_call

    def _head(self, choices: list[Any]) -> dict[str, Any]:
        return {"id": self.rid, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": choices}

    def _sse(self, obj: dict[str, Any], event: str | None = None) -> bytes:
        return sse(drop_nulls(obj) if self.omit_nulls else obj, event)

    @staticmethod
    def _choice(delta: dict[str, Any], finish: str | None = None, matched: int | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": matched}

    def _lean(self, role: str | None = None, content: str | None = None, reasoning: str | None = None,
              finish: str | None = None, matched: int | None = None, usage: dict[str, Any] | None = None) -> bytes:
        """A `build_sse_content` chunk."""
        delta: dict[str, Any] = {self.reasoning_field: reasoning}
        if role is not None:
            delta["role"] = role
        if content is not None:
            delta["content"] = content
        obj = self._head([self._choice(delta, finish, matched)])
        if usage is not None:
            obj["usage"] = usage
        return self._sse(obj)

    def _model(self, content: str | None = None, tool_call: dict[str, Any] | None = None,
               usage: dict[str, Any] | None = None) -> bytes:
        """A `ChatCompletionStreamResponse` chunk with one choice."""
        delta: dict[str, Any] = {"role": None, "content": content, self.reasoning_field: None}
        if tool_call is not None:
            delta["tool_calls"] = [tool_call]
        return self._sse({**self._head([self._choice(delta)]), "usage": usage})

    def role(self) -> bytes:
        return self._lean(role="assistant", content="")

    def pieces(self, pieces: list[Piece], script: Script, usage: dict[str, Any] | None = None) -> list[bytes]:
        """One chunk per piece. `usage` (stream_options.continuous_usage_stats) rides on each: like SGLang,
        every chunk of one decode step carries the step's running counts."""
        out: list[bytes] = []
        if self.drops_text_beside_call:
            pieces = _without_text_before_a_call(pieces)
        for p in pieces:
            if p.phase == "reasoning":
                out.append(self._lean(reasoning=p.text, usage=usage))
            elif p.phase == "content":
                out.append(self._model(content=p.text, usage=usage) if self.tool_parsing
                           else self._lean(content=p.text, usage=usage))
            elif p.phase == "tool_start":
                if p.text:  # Qwen3.6's text between calls (simulator.qwen36): qwen3_coder streams it as content
                    out.append(self._model(content=p.text, usage=usage))
                call = script.tool_calls[p.call]
                out.append(self._model(tool_call={"id": call.id, "index": p.call, "type": "function",
                                                  "function": {"name": call.name, "arguments": ""}}, usage=usage))
            else:
                out.append(self._model(tool_call={"id": None, "index": p.call, "type": "function",
                                                  "function": {"name": None, "arguments": p.text}}, usage=usage))
        return out

    def finish(self, reason: str, matched: int | None) -> bytes:
        return self._lean(finish=reason, matched=matched)

    def sglext(self, ext: dict[str, Any], framed: bool) -> bytes:
        """The `sglext` chunk(s) after the finish chunk; framed, the ids go in a named `sglext_ids` event."""
        if not framed:
            return self._sse({**self._head([]), "usage": None, "sglext": ext})
        ids = {k: v for k, v in ext.items() if k in ("input_ids", "output_ids")}
        rest = {k: v for k, v in ext.items() if k not in ids}
        out = self._sse({**self._head([]), "usage": None, "sglext": rest}) if rest else b""
        if ids:
            out += self._sse({**self._head([]), "usage": None, "sglext": ids}, event="sglext_ids")
        return out

    def usage(self, counts: dict[str, Any]) -> bytes:
        return self._sse({**self._head([]), "usage": counts})


def message(pieces: list[Piece], script: Script, reasoning_field: ReasoningField,
            strip_before_calls: bool = False) -> dict[str, Any]:
    """The assistant message of a whole reply. `strip_before_calls`: the qwen (hermes) tool parser strips the
    text before a call, qwen3_coder keeps it."""
    reasoning = "".join(p.text for p in pieces if p.phase == "reasoning")
    # Of the text between Qwen3.6's calls, qwen3_coder's whole answer keeps what comes before the first.
    content = "".join(p.text for p in pieces if p.phase == "content" or (p.phase == "tool_start" and p.call == 0))
    args: dict[int, str] = {}
    for p in pieces:
        if p.phase == "tool_start":
            args[p.call] = ""
        elif p.phase == "tool_args":
            args[p.call] = args.get(p.call, "") + p.text
    tool_calls = [
        {"id": script.tool_calls[i].id, "index": i, "type": "function",
         "function": {"name": script.tool_calls[i].name, "arguments": a}}
        for i, a in sorted(args.items())
    ]
    out: dict[str, Any] = {"role": "assistant", "content": content.strip() if tool_calls and strip_before_calls
                           else content, reasoning_field: reasoning or None}
    if tool_calls:
        out["tool_calls"] = tool_calls
    return out


def completion(rid: str, created: int, model: str, message: dict[str, Any], finish: str, matched: int | None,
               counts: dict[str, Any]) -> dict[str, Any]:
    """The non-streaming `chat.completion` object."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        ],
        "usage": counts,
        "metadata": {"weight_version": "default",
                     "weight_versions": [{"version": "default", "start": 0, "end": counts["completion_tokens"]}]},
    }
