"""The tokenize route of the simulated server: SGLang 0.5.23's `POST /v1/tokenize` (also `/tokenize`), which
counts a prompt exactly as a chat completion would, before it is sent.

Taken from `python/sglang/srt/entrypoints/http_server.py` (both paths, `validate_json_request`),
`openai/protocol.py` (`TokenizeRequest`, `TokenizeResponse`) and `openai/serving_tokenize.py`:
- the request has exactly one of `messages` (rendered as for a chat completion: the chat template with
  `tools`, `tool_choice`, `reasoning_effort`, `chat_template_kwargs`, generation prompt on) or `prompt`
  (a string, or a list of strings, encoded with `add_special_tokens`, default true); an explicit
  `add_generation_prompt` renders the messages as given with that flag, and encodes them with
  `add_special_tokens` only when that is sent too;
- the answer is `{"tokens": [...], "count": N, "max_model_len": M}` (a list of strings gives lists of
  both); M is the tokenizer's `model_max_length`, or the context length when the tokenizer sets none;
- neither or both of `messages` and `prompt`, and bodies that fail the request model (a JSON value that is
  not an object too: this model has no before-validator to crash on it) are 400 "Bad Request"; what the
  chat checks refuse (empty messages, `tool_choice` without its tool, an output cap over the context) and
  the template's errors are 400 "BadRequestError"; a truthy `stream` is 501; the model name is not
  checked, nor the prompt's length against the context.
Without a tokenizer (`--tokenizer none`) the count is the simulator's own prompt count (simulator.script: a
token per 4 bytes of the messages' and tools' JSON), so that it always equals the same chat request's
`usage.prompt_tokens`; `tokens` then has that many stand-in ids taken from those bytes. A `prompt` text
counts a token per 4 bytes, rounded up. Faults (--fail-500 and the like) are never drawn here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from prompts import sglang_input as render
from simulator.config import STOP_TOKEN_ID
from simulator.replies import error, json_response, model_not_found, refused
from simulator.request import (
    Refusal,
    bad,
    check_messages,
    check_tool_choice,
    check_tools,
    lax_bool,
    lax_int,
    read_body,
    validation_error,
)
from simulator.script import estimated_prompt_tokens, prompt_content

if TYPE_CHECKING:  # the app builds its state, then hands it to this route
    from simulator.app import SimState

PATHS = ("/v1/tokenize", "/tokenize")
_ONE_OF = "Value error, Exactly one of 'prompt' or 'messages' must be provided."


def _check_body(body: Mapping[str, Any]) -> None:
    """`TokenizeRequest`'s fields, then its model validator (pydantic runs it only on valid fields)."""
    messages, prompt = body.get("messages"), body.get("prompt")
    if messages is not None:
        check_messages(messages)
    check_tools(body.get("tools"))
    if prompt is not None and not isinstance(prompt, str) and not (
            isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)):
        raise validation_error("'prompt'", "Input should be a valid string")
    for name in ("add_special_tokens", "continue_final_message"):
        if body.get(name) is not None:
            lax_bool(body[name], name)
    if body.get("add_generation_prompt") is not None:
        lax_bool(body["add_generation_prompt"], "add_generation_prompt")
    if (prompt is None) == (messages is None):
        raise validation_error("", _ONE_OF)


def _stand_in_ids(data: bytes, count: int) -> list[int]:
    """`count` ids made of `data`'s 4-byte runs: the same content gives the same ids."""
    return [int.from_bytes(data[4 * i:4 * i + 4] or b"\0", "little") % STOP_TOKEN_ID for i in range(count)]


def _check_chat(st: SimState, body: Mapping[str, Any]) -> None:
    """`serving_chat._validate_request` and the tokenize route's own checks; raises Refusal (BadRequestError)."""
    if not body["messages"]:
        raise bad("Messages cannot be empty.")
    check_tool_choice(body.get("tools"), body.get("tool_choice"))
    try:
        cap = lax_int(body.get("max_completion_tokens"), "max_completion_tokens") or lax_int(
            body.get("max_tokens"), "max_tokens")
    except Refusal as refusal:  # ChatCompletionRequest's validation error, a ValueError here
        raise bad(refusal.message) from refusal
    limit = st.config.context_length
    if cap and cap > limit:
        raise bad(f"max_completion_tokens is too large: {cap}.This model supports at most {limit} completion tokens.")
    generation = body.get("add_generation_prompt")
    if generation is not None and body.get("continue_final_message") and not lax_bool(generation, ""):
        raise bad("continue_final_message needs add_generation_prompt to open the assistant turn.")


def _chat_ids(st: SimState, body: Mapping[str, Any]) -> list[int]:
    _check_chat(st, body)
    try:
        render.messages(body["messages"], "string")  # the 400s of the template preparation
        if st.tokenizer is None:
            tools = body.get("tools")
            content = prompt_content(body["messages"], list(tools) if isinstance(tools, list) else [])
            return _stand_in_ids(b"".join(content), estimated_prompt_tokens(content))
        raw = body.get("add_generation_prompt")
        generation = None if raw is None else lax_bool(raw, "add_generation_prompt")
        specials = generation is not None and "add_special_tokens" in body and lax_bool(
            body["add_special_tokens"], "add_special_tokens")
        return st.tokenizer.prompt_ids(body, generation, specials)
    except render.TemplateInputError as exc:
        raise bad(str(exc)) from exc


def _text_ids(st: SimState, text: str, add_special_tokens: bool) -> list[int]:
    if st.tokenizer is not None:
        return st.tokenizer.encode(text, add_special_tokens)
    data = text.encode()
    return _stand_in_ids(data, (len(data) + 3) // 4)


def answer(st: SimState, body: Mapping[str, Any]) -> dict[str, Any]:
    """The `TokenizeResponse` of a checked body; raises Refusal."""
    tokenizer = st.tokenizer
    limit = tokenizer.model_max_length if tokenizer is not None else None
    out: dict[str, Any] = {"max_model_len": limit if limit is not None else st.config.context_length}
    prompt = body.get("prompt")
    specials = lax_bool(body.get("add_special_tokens", True), "add_special_tokens")
    if body.get("messages") is not None:
        tokens = _chat_ids(st, body)
        if tokenizer is not None:
            st.prompts.add(tokens, dict(body))  # a /generate of these ids gets the chat reply (simulator.generate)
        return {"tokens": tokens, "count": len(tokens), **out}
    if isinstance(prompt, str):
        tokens = _text_ids(st, prompt, specials)
        return {"tokens": tokens, "count": len(tokens), **out}
    lists = [_text_ids(st, text, specials) for text in prompt or []]
    return {"tokens": lists, "count": [len(ids) for ids in lists], **out}


def handler(st: SimState) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The route's handler, over the app's state."""

    async def tokenize(request: web.Request) -> web.Response:
        if not st.ready:
            return error(503, "The server is still starting up.", "ServiceUnavailable")
        try:
            body = read_body(await request.read(), request.headers, crash_on_non_object=False)
            _check_body(body)
            model = body.get("model", "default")
            if st.config.strict_model and model not in (st.config.model_name, "default"):
                return model_not_found(str(model))
            if body.get("stream"):  # an extra field, and so an attribute the base handler reads
                return error(501, "OpenAIServingTokenize does not support streaming requests", "NotImplementedError")
            try:
                return json_response(answer(st, body))
            except Refusal:
                raise
            except Exception as exc:  # as serving_tokenize answers what it did not foresee
                return error(500, f"Internal server error during tokenization: {exc}", "InternalServerError")
        except Refusal as refusal:
            return refused(refusal)

    return tokenize
