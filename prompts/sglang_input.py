"""What SGLang 0.5.23 hands to the chat template: the request's messages and tools as its OpenAI layer
rewrites them before rendering. The simulated server renders with it, so its prompt ids are the real
server's for the same request, and the export's re-render (`client.local.chat_template`) flattens
content-part lists with it, as the server did.

Taken from `python/sglang/srt/entrypoints/openai/serving_chat.py` (`_apply_jinja_template`,
`_handle_last_assistant_message`, `normalize_tool_content`, `normalize_assistant_tool_call_arguments`,
the `tools = [item.model_dump() ...]` of `_process_messages`), `protocol.py` (what `model_dump()` keeps of a
message, a tool call and a tool: `Function._serialize` keeps the client's keys in the client's order and
adds `description: null` when it was left out; `Tool` adds `defer_loading: null` after `function`) and
`python/sglang/srt/parser/jinja_template_utils.py` (`detect_jinja_template_content_format`,
`process_content_for_template_format`):

- every message keeps only its model's fields, None fields dropped, content None -> "";
- a content-part list becomes one string of its text parts joined by " " when the template is of the
  "string" kind (no `for ... in message.content` loop and no media words), or a list of bare
  `{"type": "text", "text": ...}` parts when it is of the "openai" kind; a tool turn's text parts are
  joined either way;
- assistant tool-call arguments are parsed into objects; text that is not a JSON object is a 400;
- a trailing assistant turn becomes a user turn (without `continue_final_message`, which is not simulated);
- `tool_choice: "none"` renders no tools, a named choice only that tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from prompts.tool_arguments import arguments_object

if TYPE_CHECKING:  # jinja2 comes with a --tokenizer (the `export` extra); the request checks do without it
    import jinja2

# The roles of SGLang's ChatCompletionMessageGenericParam, and the fields its model_dump() writes, in order.
GENERIC_ROLES = ("system", "assistant", "tool", "function", "developer", "latest_reminder", "root")
_GENERIC_FIELDS = ("role", "content", "tool_call_id", "name", "phase", "reasoning_content", "tool_calls", "tools",
                   "prefix")
_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")
_MEDIA_WORDS = ("image", "audio", "video", "vision")
_MEDIA_PARTS = {"image_url": "image", "input_image": "image", "video_url": "video", "audio_url": "audio"}


class TemplateInputError(ValueError):
    """A request SGLang refuses while preparing the template (HTTP 400 `BadRequest`)."""


def content_format(template: str) -> str:
    """SGLang's `detect_jinja_template_content_format`: "openai" when the template loops over a message's
    content (or names a medium anywhere), else "string"."""
    import jinja2

    if any(word in template for word in _MEDIA_WORDS):
        return "openai"
    try:
        ast = jinja2.Environment(extensions=["jinja2.ext.loopcontrols"]).parse(template)
    except jinja2.TemplateError:
        return "string"
    for loop in ast.find_all(jinja2.nodes.For):
        if any(_reads_content(loop.iter, name) for name in ("message", "msg", "m")):
            return "openai"
    return "string"


def _reads_content(node: jinja2.nodes.Node, name: str) -> bool:
    """`name.content` / `name['content']`, also under filters, tests and slices (as SGLang's AST check)."""
    import jinja2

    if isinstance(node, jinja2.nodes.Filter | jinja2.nodes.Test):
        return node.node is not None and _reads_content(node.node, name)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _reads_content(node.node, name)
    by_attr = isinstance(node, jinja2.nodes.Getattr) and node.attr == "content"
    by_key = (isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Const)
              and node.arg.value == "content")
    target = getattr(node, "node", None) if by_attr or by_key else None
    return isinstance(target, jinja2.nodes.Name) and target.name == name and target.ctx == "load"


def _parts_text(parts: list[Any]) -> str:
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, Mapping) and p.get("type") == "text")


def template_content(role: str, content: Any, fmt: str) -> Any:
    """A message's content as the template gets it, for a template of content format `fmt`."""
    if content is None:
        return ""
    if not isinstance(content, list):
        return content
    if role == "tool" and all((isinstance(p, Mapping) and p.get("type") == "text") or isinstance(p, str)
                              for p in content):
        return " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)
    if fmt == "string":
        return _parts_text(content)
    parts: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            parts.append({"type": "text", "text": part.get("text")})
        elif kind in _MEDIA_PARTS:
            parts.append({"type": _MEDIA_PARTS[kind]})
        elif kind == "tool_reference":
            parts.append(dict(part))
    return parts


def _arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    parsed = arguments_object(arguments)
    if parsed is None:
        try:
            orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            raise TemplateInputError("Assistant tool call function.arguments must be valid JSON.") from exc
        raise TemplateInputError("Assistant tool call function.arguments must be a JSON object.")
    return parsed


def tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")
    function = function if isinstance(function, Mapping) else {}
    return {"id": call.get("id"), "index": call.get("index"), "type": call.get("type", "function"),
            "function": {"name": function.get("name"), "arguments": function.get("arguments")}}


def message(raw: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """One message as the template sees it."""
    role = str(raw.get("role", "")).lower()
    fields = ("role", "content") if role == "user" else _GENERIC_FIELDS
    out: dict[str, Any] = {}
    for key in fields:
        value = role if key == "role" else raw.get(key)
        if key == "content":
            value = template_content(role, value, fmt)
        elif key == "tool_calls" and isinstance(value, list):
            value = [tool_call(c) for c in value]
            if role == "assistant":
                for call in value:
                    if isinstance(call, dict):
                        call["function"]["arguments"] = _arguments(call["function"]["arguments"])
        elif key == "tools" and isinstance(value, list):
            value = [tool(t) for t in value]
        if value is not None:
            out[key] = value
    return out


def messages(raw: list[Any], fmt: str, *, last_assistant_as_user: bool = True) -> list[dict[str, Any]]:
    """The request's messages as the template sees them; raises TemplateInputError as SGLang answers 400."""
    out = [message(m, fmt) for m in raw if isinstance(m, Mapping)]
    if (last_assistant_as_user and out and out[-1].get("role") == "assistant"
            and isinstance(out[-1].get("content"), str)):
        out[-1] = {"role": "user", "content": out[-1]["content"]}
    return out


def tool(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`Tool.model_dump()`: `type`, the function as the client wrote it (plus `description: null` when it
    was left out, less unknown keys), then `defer_loading`."""
    function = raw.get("function")
    function = function if isinstance(function, Mapping) else {}
    data: dict[str, Any] = {key: function.get(key) for key in _FUNCTION_FIELDS}
    if raw.get("defer_loading") is not None and data["defer_loading"] is None:
        data["defer_loading"] = raw["defer_loading"]
    for key in ("defer_loading", "strict"):
        if data[key] is None:
            del data[key]
    order = list(function)
    order += [key for key in data if key not in order]
    return {"type": raw.get("type", "function"), "function": {k: data[k] for k in order if k in data},
            "defer_loading": raw.get("defer_loading")}


def tools(raw: Any, tool_choice: Any) -> list[dict[str, Any]] | None:
    """The tools the template gets: none for `tool_choice: "none"`, only the named one for a named choice."""
    if not isinstance(raw, list) or not raw or tool_choice == "none":
        return None
    chosen = [t for t in raw if isinstance(t, Mapping)]
    if isinstance(tool_choice, Mapping):
        wanted = (tool_choice.get("function") or {}).get("name")
        chosen = [t for t in chosen if (t.get("function") or {}).get("name") == wanted]
    return [tool(t) for t in chosen] or None
