"""One result record -> its training tokens (prompt ids, completion ids), exactly or by re-rendering.

Exact: the record carries the server's `prompt_token_ids` / `completion_token_ids`; they are used as
they are. Re-rendered: the conversation is rendered with the tokenizer's own chat template (Jinja, as
Hugging Face and SGLang render it) twice, the prompt with the generation prompt and the prompt plus the
new assistant turn (reasoning in `reasoning_content`, tool calls with their arguments as objects, which
is how SGLang hands them to the template), each with the request's own `chat_template_kwargs` (thinking,
preserve_thinking: `record_kwargs`); the completion is the difference, cut after the end-of-turn
token where the model stopped. Each part is tokenized on its own, as the server saw the prompt and then
generated the completion. Re-rendering can drift from what the server did, so the caller checks the
counts against `usage` and never trusts a row whose counts differ. SGLang renders each tool with
`"defer_loading": null` added (`sglang_tool`); when the recorded tools miss `usage.prompt_tokens` and that
form gives it, the prompt is rendered with that form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from client.core.errors import RenderError
from client.core.payload import chat_template_kwargs
from client.local.chat_template import ChatTokenizer, template_messages
from prompts.tool_arguments import arguments_object

__all__ = ["ChatTokenizer", "RenderError", "Tokens", "record_kwargs", "render_record", "template_messages"]


@dataclass(frozen=True, slots=True)
class Tokens:
    prompt: list[int]
    completion: list[int]
    exact: bool
    tools: list[dict[str, Any]] | None = None  # re-rendered: the tools' form the prompt was rendered with


_SGLANG_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")


def sglang_tool(raw: dict[str, Any]) -> dict[str, Any]:
    """A tool as SGLang hands it to the template: `Tool.model_dump()` of its OpenAI layer
    (`python/sglang/srt/entrypoints/openai/protocol.py`): the function as the client wrote it (unknown keys
    dropped, `description: null` added when left out), then `"defer_loading": null` beside it. The same rule
    as the simulator's (`prompts/sglang_input.py`), which a test holds to the real server."""
    function = raw.get("function")
    function = function if isinstance(function, dict) else {}
    data: dict[str, Any] = {key: function.get(key) for key in _SGLANG_FUNCTION_FIELDS}
    if raw.get("defer_loading") is not None and data["defer_loading"] is None:
        data["defer_loading"] = raw["defer_loading"]
    for key in ("defer_loading", "strict"):
        if data[key] is None:
            del data[key]
    order = [*function, *(key for key in data if key not in function)]
    return {"type": raw.get("type", "function"), "function": {k: data[k] for k in order if k in data},
            "defer_loading": raw.get("defer_loading")}


def record_kwargs(record: dict[str, Any]) -> dict[str, Any]:
    """The `chat_template_kwargs` the record's request sent (its recorded `sampling`): thinking,
    preserve_thinking and the plan's other switches; {} when none were sent (the template's defaults)."""
    sampling = record.get("sampling")
    return (chat_template_kwargs(sampling) if isinstance(sampling, dict) else None) or {}


def thinking_on(record: dict[str, Any]) -> bool:
    sampling = record.get("sampling")
    return not isinstance(sampling, dict) or sampling.get("enable_thinking") is not False


def assistant_turn(record: dict[str, Any]) -> dict[str, Any]:
    """The generated turn as an OpenAI assistant message: reasoning in `reasoning_content` (thinking on),
    tool calls as recorded (arguments as JSON strings)."""
    turn: dict[str, Any] = {"role": "assistant", "content": record.get("content") or ""}
    if thinking_on(record):
        turn["reasoning_content"] = record.get("reasoning") or ""
    if record.get("tool_calls"):
        turn["tool_calls"] = record["tool_calls"]
    return turn


def has_exact_ids(record: dict[str, Any]) -> bool:
    """True when the record carries the server's own prompt and completion ids (used as they are)."""
    return isinstance(record.get("prompt_token_ids"), list) and isinstance(record.get("completion_token_ids"), list)


def render_record(record: dict[str, Any], tok: ChatTokenizer) -> Tokens:
    """The record's prompt and completion ids: exact when the server sent them, else re-rendered."""
    if has_exact_ids(record):
        return Tokens(record["prompt_token_ids"], record["completion_token_ids"], exact=True)
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RenderError("the record has no messages")
    thinking = thinking_on(record)
    kwargs = record_kwargs(record)
    history = template_messages(messages, tok.content_format)
    tools, prompt, prompt_ids = _served_prompt(record, tok, history, kwargs)
    turn = assistant_turn(record)
    truncated = record.get("finish_reason") == "length"
    if truncated and thinking and not turn["content"] and not turn.get("tool_calls"):
        # Cut off while thinking: the output is raw reasoning; no </think> was ever written.
        return Tokens(prompt_ids, tok.encode(turn["reasoning_content"]), exact=False, tools=tools)
    try:
        full = tok.render([*history, *template_messages([turn])], tools, add_generation_prompt=False, kwargs=kwargs)
    except RenderError as exc:
        if truncated and _cut_call(turn):
            # Qwen3.6's template writes a call's arguments item by item: the half-written object of a reply cut
            # inside a call has no rendering, and its XML is not the template's to guess.
            raise RenderError(f"{exc} (the reply was cut by max_tokens inside a tool call, whose arguments are not "
                              "a JSON object: only the server's ids, from a --token-ids on run, hold that reply)"
                              ) from exc
        raise
    if not full.startswith(prompt):
        raise RenderError("the template does not render the prompt as a prefix of the whole conversation")
    completion = full[len(prompt):]
    if tok.eos:
        end = completion.rfind(tok.eos)
        if end >= 0:
            # The template closes the turn with a newline after the end token; the model stopped at it.
            completion = completion[:end] if truncated else completion[:end + len(tok.eos)]
    return Tokens(prompt_ids, tok.encode(completion), exact=False, tools=tools)


def _cut_call(turn: dict[str, Any]) -> bool:
    """The turn has a tool call whose arguments are not a JSON object (a call cut before its end)."""
    for call in turn.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        parsed = arguments_object(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(parsed, dict):
            return True
    return False


def _served_prompt(record: dict[str, Any], tok: ChatTokenizer, history: list[dict[str, Any]],
                   kwargs: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str, list[int]]:
    """(tools, prompt text, prompt ids) as the server most likely rendered them: the tools as recorded,
    unless their count differs from usage.prompt_tokens and SGLang's form (`sglang_tool`) gives it."""
    recorded = record.get("tools") or None
    prompt = tok.render(history, recorded, add_generation_prompt=True, kwargs=kwargs)
    ids = tok.encode(prompt)
    usage = record.get("usage")
    expected = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    if recorded and isinstance(expected, int) and expected != len(ids):
        sglang = [sglang_tool(t) if isinstance(t, dict) else t for t in recorded]
        other = tok.render(history, sglang, add_generation_prompt=True, kwargs=kwargs)
        other_ids = tok.encode(other)
        if len(other_ids) == expected:
            return sglang, other, other_ids
    return recorded, prompt, ids
