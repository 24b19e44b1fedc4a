"""SGLang 0.5.23's own output parsers, run inside its venv: what a server started with `--reasoning-parser
qwen3 --tool-call-parser qwen3_coder` makes of a model's text, whole and streamed.

Run as `SGLANG_PYTHON tests/engines/sglang_parsers.py` (tests/test_sim_qwen36_parsers.py does): one JSON case
per stdin line, `{"text": [increment, ...], "tools": [...], "tool_choice"?, "thinking": bool}`, the text as the
server's detokenizer hands it over step by step (the special tokens skipped); one JSON answer per stdout line,
`{"whole": PARSED, "streamed": PARSED}`, PARSED = `{"reasoning": str | null, "content": str, "calls": [{"name",
"arguments"}]}` (streamed: the deltas put together, a call's name from its first delta and its arguments
joined by index; `deltas`, the calls' argument deltas in order).

It follows `serving_chat.py` step for step: non-streaming, `ReasoningParser.parse_non_stream` then, when tool
parsing is on (tools given, `tool_choice` not "none") and the text has a call, `FunctionCallParser.parse_non_stream`;
the content is the text left, "" when none, the reasoning null when empty. Streaming, each increment goes through
the reasoning parser's `parse_stream_chunk` (its `parse_stream_end` after the last), the normal text through the
tool-call parser's `parse_stream_chunk` (and `parse_stream_end` after the last). `force_reasoning` is the
request's thinking switch, as `_get_reasoning_from_request` reads `enable_thinking` for the qwen3 parser.
Standard library and SGLang only; nothing of the project is imported.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.parser.reasoning_parser import ReasoningParser

REASONING_PARSER = "qwen3"
TOOL_CALL_PARSER = "qwen3_coder"


def _request(case: dict[str, Any]) -> ChatCompletionRequest:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                            "chat_template_kwargs": {"enable_thinking": case["thinking"]}}
    if case.get("tools"):
        body["tools"] = case["tools"]
    if case.get("tool_choice") is not None:
        body["tool_choice"] = case["tool_choice"]
    return ChatCompletionRequest(**body)


def _parsing_active(request: ChatCompletionRequest) -> bool:
    return bool(request.tools) and request.tool_choice != "none"


def _tool_parser(request: ChatCompletionRequest) -> FunctionCallParser:
    return FunctionCallParser(list(request.tools or []), TOOL_CALL_PARSER, tool_choice=request.tool_choice)


def whole(case: dict[str, Any]) -> dict[str, Any]:
    request = _request(case)
    active = _parsing_active(request)
    reasoning_parser = ReasoningParser(REASONING_PARSER, stream_reasoning=False, force_reasoning=case["thinking"],
                                       request=request, tool_call_parser_active=active)
    reasoning, text = reasoning_parser.parse_non_stream("".join(case["text"]))
    calls: list[dict[str, Any]] = []
    if active:
        parser = _tool_parser(request)
        if parser.has_tool_call(text or ""):
            text, items = parser.parse_non_stream(text or "")
            calls = [{"name": item.name, "arguments": item.parameters} for item in items]
    return {"reasoning": reasoning or None, "content": text or "", "calls": calls}


def streamed(case: dict[str, Any]) -> dict[str, Any]:
    request = _request(case)
    active = _parsing_active(request)
    reasoning_parser = ReasoningParser(REASONING_PARSER, stream_reasoning=True, force_reasoning=case["thinking"],
                                       request=request, tool_call_parser_active=active)
    tool_parser = _tool_parser(request) if active else None
    reasoning, content = "", ""
    calls: dict[int, dict[str, Any]] = {}
    deltas: list[list[Any]] = []
    pieces = case["text"] or [""]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        think, normal = reasoning_parser.parse_stream_chunk(piece)
        if last:
            end_think, end_normal = reasoning_parser.parse_stream_end()
            think, normal = (think or "") + (end_think or ""), (normal or "") + (end_normal or "")
        reasoning += think or ""
        if tool_parser is None:
            content += normal or ""
            continue
        text, items = tool_parser.parse_stream_chunk(normal or "")
        if last:
            end_text, end_items = tool_parser.parse_stream_end()
            text, items = (text or "") + end_text, [*items, *end_items]
        content += text or ""
        for item in items:
            call = calls.setdefault(item.tool_index, {"name": None, "arguments": ""})
            if item.name:
                call["name"] = item.name
            call["arguments"] += item.parameters or ""
            deltas.append([item.tool_index, item.name, item.parameters or ""])
    return {"reasoning": reasoning or None, "content": content,
            "calls": [calls[i] for i in sorted(calls)], "deltas": deltas}


def main() -> int:
    logging.disable(logging.CRITICAL)  # the detectors log their warnings; the answers are on stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        print(json.dumps({"whole": whole(case), "streamed": streamed(case)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
