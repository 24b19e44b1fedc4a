"""SGLang's text routes, as the stitching of a continued reply calls them: `/v1/detokenize` (and `/detokenize`),
`/separate_reasoning` and `/parse_function_call`, in SGLang 0.5.23's shapes and with its qwen3 and qwen3_coder
parsers' non-streaming rules.

From `srt/entrypoints/http_server.py` (`openai_v1_detokenize`, `separate_reasoning_request`,
`parse_function_call_request`), `srt/parser/reasoning_parser.py` (`BaseReasoningFormatDetector.
_detect_and_parse_impl` as Qwen3Detector sets it up: `<think>`, `</think>`, `<tool_call>` as an implicit end
of the reasoning, no forced reasoning, so a text without `<think>` is all normal text) and
`srt/function_call/qwen3_coder_detector.py` (`detect_and_parse`: the calls of the `<tool_call>` blocks, each
parameter's value converted by the tool's schema type, the normal text what comes before the first call).
tests/test_sim_text_routes.py holds both parsers to SGLang's own on the simulator's replies.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from simulator.replies import json_response
from simulator.tokens import SimTokenizer

THINK_START, THINK_END, TOOL_START = "<think>", "</think>", "<tool_call>"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)
_STRINGS = ("string", "str", "text", "varchar", "char", "enum")
_INTEGERS = ("int", "uint", "long", "short", "unsigned")


def separate_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, normal text) as SGLang's qwen3 parser splits a whole reply."""
    if THINK_START not in text:
        return "", text
    rest = text
    while rest.startswith(THINK_START):
        rest = rest[len(THINK_START):]
    if THINK_END not in rest:
        tool = rest.find(TOOL_START)
        if tool != -1:
            return rest[:tool], rest[tool:]
        return rest, ""
    reasoning, normal = rest.split(THINK_END, 1)
    return reasoning, normal


def _schema_type(schema: Any) -> str:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    return str(kind).strip().lower() if isinstance(kind, str) else "string"


def _convert(value: str, name: str, properties: dict[str, Any]) -> Any:
    if value.lower() == "null":
        return None
    if name not in properties:
        return value
    kind = _schema_type(properties[name])
    if kind in _STRINGS:
        return value
    if kind.startswith(_INTEGERS):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        whole = "." not in value and "e" not in value.lower() and number.is_integer()
        return int(number) if whole else number
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


def _properties(name: str, tools: list[Any]) -> dict[str, Any]:
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and tool.get("type", "function") == "function" and function.get("name") == name:
            params = function.get("parameters")
            if isinstance(params, dict):
                props = params.get("properties")
                return props if isinstance(props, dict) else ({} if "properties" in params else params)
            return {}
    return {}


def parse_calls(text: str, tools: list[Any]) -> tuple[str, list[dict[str, Any]]]:
    """(normal text, calls) as SGLang's qwen3_coder parser reads a whole reply's text after its reasoning."""
    if TOOL_START not in text:
        return text, []
    blocks = _CALL.findall(text) or ([text] if "<function=" in text else [])
    calls: list[dict[str, Any]] = []
    for block in blocks:
        for whole, open_end in _FUNCTION.findall(block):
            body = whole or open_end
            if ">" not in body:
                continue
            name, params_text = body[:body.index(">")], body[body.index(">") + 1:]
            properties = _properties(name, tools)
            params: dict[str, Any] = {}
            for match in _PARAMETER.findall(params_text):
                if ">" not in match:
                    continue
                key, value = match[:match.index(">")], match[match.index(">") + 1:]
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                params[key] = _convert(value, key, properties)
            calls.append({"tool_index": len(calls), "name": name,
                          "parameters": json.dumps(params, ensure_ascii=False)})
    start = text.find(TOOL_START)
    return (text[:start] if start > 0 else ""), calls


async def _body(request: web.Request) -> dict[str, Any] | web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return json_response({"detail": f"invalid JSON: {exc}"}, 422)
    if not isinstance(body, dict) or not isinstance(body.get("text", body.get("tokens")), str | list):
        return json_response({"detail": "the request needs its text (or tokens)"}, 422)
    return body


async def detokenize(request: web.Request, tokenizer: SimTokenizer | None) -> web.Response:
    if tokenizer is None:
        return json_response({"error": "the simulated server detokenizes only with --tokenizer"}, 400)
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(type(i) is int for i in tokens):
        return json_response({"detail": "tokens must be a list of integers"}, 422)
    skip = body.get("skip_special_tokens", True) is not False
    return json_response({"text": tokenizer.tokenizer.decode(tokens, skip_special_tokens=skip)})


async def separate(request: web.Request) -> web.Response:
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    if body.get("reasoning_parser") != "qwen3":
        return json_response({"detail": f"Unsupported model type: {body.get('reasoning_parser')}"}, 400)
    reasoning, normal = separate_reasoning(str(body["text"]))
    return json_response({"reasoning_text": reasoning, "text": normal})


async def function_calls(request: web.Request, served_parser: str) -> web.Response:
    body = await _body(request)
    if isinstance(body, web.Response):
        return body
    if body.get("tool_call_parser") not in ("qwen3_coder", served_parser):
        return json_response({"detail": f"Unsupported tool call parser: {body.get('tool_call_parser')}"}, 400)
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    if not tools:  # FunctionCallParser.parse_non_stream: nothing is parsed without tools
        return json_response({"normal_text": body["text"], "calls": []})
    normal, calls = parse_calls(str(body["text"]), tools)
    return json_response({"normal_text": normal, "calls": calls})


Handler = Callable[[web.Request], Awaitable[web.Response]]


def routes(tokenizer_of: Callable[[web.Request], SimTokenizer | None],
           served_parser_of: Callable[[web.Request], str]) -> list[tuple[str, Handler]]:
    """The POST routes, as SGLang names them, for the app's router."""
    async def detokenize_route(request: web.Request) -> web.Response:
        return await detokenize(request, tokenizer_of(request))

    async def calls_route(request: web.Request) -> web.Response:
        return await function_calls(request, served_parser_of(request))

    return [("/v1/detokenize", detokenize_route), ("/detokenize", detokenize_route),
            ("/separate_reasoning", separate), ("/parse_function_call", calls_route)]
