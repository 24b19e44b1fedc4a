"""One chat request read and checked the way SGLang 0.5.23 does, or refused with its status and error body.

The checks come in SGLang's order, each answered as it answers (`python/sglang/srt/entrypoints/`):
1. `http_server.py` (`validate_json_request`, FastAPI + pydantic `ChatCompletionRequest`): a body that is not
   `application/json`, not JSON, or that fails the request model is a 400 of type "Bad Request"; a JSON
   value that is not an object is FastAPI's plain-text 500. Numbers and switches are read as pydantic's lax
   mode reads them ("3" and 3.0 are 3; 3.5 is refused).
2. `openai/serving_chat.py` `_validate_request`: empty messages, `tool_choice` without its tools, an output
   cap over the context: 400 `BadRequestError`.
3. `_convert_to_internal_request`: `return_token_ids` / `return_prompt_token_ids` / `return_meta_info` with
   `stream: true`, and what the template preparation refuses (prompts.sglang_input): 400 `BadRequest`.
4. `managers/tokenizer_manager.py` `_validate_one_request`: a prompt of the context length or more, a prompt
   plus `max_tokens` over it, a negative cap: 400 `BadRequestError` (also for a stream: it has not begun).
Header opt-ins are read as `_convert_to_internal_request` reads them (`x-sglext-return-input-ids: 1`,
`x-sglext-return-output-ids: 1`, `x-sglext-ids-framed: 1` for the named `sglext_ids` event).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from prompts import sglang_input as render
from simulator.config import SimConfig


class Refusal(Exception):
    """The answer to a refused request: status and body (a flat SGLang ErrorResponse unless `text`)."""

    def __init__(self, status: int, message: str, err_type: str, *, text: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.text = text


def bad(message: str, err_type: str = "BadRequestError") -> Refusal:
    return Refusal(400, message, err_type)


def validation_error(loc: str, msg: str) -> Refusal:
    """What FastAPI's RequestValidationError becomes in SGLang: one line per pydantic error."""
    where = f"('body', {loc})" if loc else "('body',)"  # an empty loc: the body as a whole
    return Refusal(400, f"1 validation error:\n  {{'loc': {where}, 'msg': {msg!r}}}", "Bad Request")


def lax_int(value: Any, name: str) -> int | None:
    """A pydantic lax-mode int: ints, bools, integral floats and numeric strings; anything else is refused."""
    if value is None or isinstance(value, int):
        return None if value is None else int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = float("nan")
        if number.is_integer():
            return int(number)
    raise validation_error(repr(name), "Input should be a valid integer")


def lax_bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", "y", "t", "false", "no",
                                                             "off", "0", "n", "f"):
        return value.strip().lower() in ("true", "yes", "on", "1", "y", "t")
    raise validation_error(repr(name), "Input should be a valid boolean")


@dataclass(frozen=True)
class ChatRequest:
    """What the reply depends on, read once from the body and headers."""

    body: dict[str, Any]
    model: str
    stream: bool
    max_tokens: int | None
    thinking: bool
    include_usage: bool
    continuous_usage: bool
    tool_parsing: bool  # the output runs through the tool-call parser (tools given, tool_choice not "none")
    input_ids: bool  # sglext.input_ids
    output_ids: bool  # sglext.output_ids
    ids_framed: bool  # the sglext ids as a named SSE event

    def asks(self, field: str) -> bool:
        return bool(self.body.get(field))


def check_messages(messages: Any) -> None:
    if messages is None:
        raise validation_error("'messages'", "Field required")
    if not isinstance(messages, list):
        raise validation_error("'messages'", "Input should be a valid list")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if not isinstance(role, str) or role.lower() not in (*render.GENERIC_ROLES, "user"):
            raise validation_error(f"'messages', {i}, 'role'", "Input should be a valid message role")
        if role.lower() == "user" and not isinstance(message.get("content"), str | list):
            raise validation_error(f"'messages', {i}, 'content'", "Field required")


def check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise validation_error("'tools'", "Input should be a valid list")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise validation_error(f"'tools', {i}, 'function'", "Field required")


def check_tool_choice(tools: Any, choice: Any) -> None:
    if isinstance(choice, str) and choice.lower() == "required" and not tools:
        raise bad("Tools cannot be empty if tool choice is set to required.")
    if choice is not None and not isinstance(choice, str):
        if not tools:
            raise bad("Tools cannot be empty if tool choice is set to a specific tool.")
        fn = choice.get("function") if isinstance(choice, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not any(t["function"]["name"] == name for t in tools):
            raise bad(f"Tool '{name}' not found in tools list.")


def _thinking(body: Mapping[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    return True


def read_body(raw: bytes, headers: Mapping[str, str], *, crash_on_non_object: bool = True) -> dict[str, Any]:
    """A JSON object sent as application/json, as FastAPI reads it before any request model; raises Refusal.

    A JSON value that is not an object crashes ChatCompletionRequest's before-validator (FastAPI's plain 500);
    a request model without one (`crash_on_non_object=False`) refuses it as a validation error."""
    if headers.get("content-type", "").lower().split(";", 1)[0] != "application/json":
        raise validation_error("'header', 'content-type'", "Unsupported Media Type: Only 'application/json' is allowed")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise validation_error("0", f"JSON decode error: {exc}") from exc
    if not isinstance(body, dict) and crash_on_non_object:
        raise Refusal(500, "Internal Server Error", "", text=True)
    if not isinstance(body, dict):
        raise validation_error("", "Input should be a valid dictionary or object to extract fields from")
    return body


def parse(raw: bytes, headers: Mapping[str, str], config: SimConfig) -> ChatRequest:
    """Read one request (steps 1-3 of the module docstring); raises Refusal."""
    body = read_body(raw, headers)
    check_messages(body.get("messages"))
    check_tools(body.get("tools"))
    # `max_completion_tokens or max_tokens`, as ChatCompletionRequest.to_sampling_params reads them.
    cap = lax_int(body.get("max_completion_tokens"), "max_completion_tokens") or lax_int(
        body.get("max_tokens"), "max_tokens")
    stream = lax_bool(body.get("stream", False), "stream")
    if not body["messages"]:
        raise bad("Messages cannot be empty.")
    tools = body.get("tools")
    check_tool_choice(tools, body.get("tool_choice"))
    if cap and cap > config.context_length:
        raise bad(f"max_completion_tokens is too large: {cap}."
                  f"This model supports at most {config.context_length} completion tokens.")
    if stream:
        for field, what in (("return_prompt_token_ids", "return_prompt_token_ids is not supported with streaming."),
                            ("return_token_ids", "return_token_ids is not supported with streaming on "
                                                 "/v1/chat/completions."),
                            ("return_meta_info", "return_meta_info is not supported with streaming.")):
            if body.get(field):
                raise bad(f"{what} Please set stream=false when using {field}=true.", "BadRequest")
    try:
        render.messages(body["messages"], "string")  # the 400s of the template preparation
    except render.TemplateInputError as exc:
        raise bad(str(exc), "BadRequest") from exc
    opts = body.get("stream_options")
    opts = opts if isinstance(opts, Mapping) else {}
    model = body.get("model")
    return ChatRequest(
        body=body, model=model if isinstance(model, str) else "default", stream=stream,
        max_tokens=cap,
        thinking=_thinking(body),
        include_usage=bool(opts.get("include_usage")), continuous_usage=bool(opts.get("continuous_usage_stats")),
        tool_parsing=bool(tools) and body.get("tool_choice") != "none",
        input_ids=bool(body.get("return_input_ids_in_sglext")) or headers.get("x-sglext-return-input-ids") == "1",
        output_ids=bool(body.get("return_output_ids_in_sglext")) or headers.get("x-sglext-return-output-ids") == "1",
        ids_framed=headers.get("x-sglext-ids-framed") == "1",
    )


def check_lengths(prompt_tokens: int, max_tokens: int | None, context_length: int) -> None:
    """Step 4: the tokenizer manager's length checks, once the prompt is counted; raises Refusal."""
    if prompt_tokens >= context_length:
        raise bad(f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                  f"({context_length} tokens).")
    if max_tokens is not None and max_tokens + prompt_tokens > context_length:
        raise bad(f"Requested token count exceeds the model's maximum context length of {context_length} tokens. "
                  f"You requested a total of {max_tokens + prompt_tokens} tokens: {prompt_tokens} tokens from the "
                  f"input messages and {max_tokens} tokens for the completion. Please reduce the number of tokens "
                  "in the input messages or the completion to fit within the limit.")
    if max_tokens is not None and max_tokens < 0:
        raise bad(f"max_new_tokens must be at least 0, got {max_tokens}.")
