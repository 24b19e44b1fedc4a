"""What the simulated model writes when it plays Qwen3.6-27B (`--chat-template qwen3.6`), and what a client
sees of it through SGLang 0.5.23's `--reasoning-parser qwen3 --tool-call-parser qwen3_coder`.

The text. Qwen3.6's template (simulator/qwen36_chat_template.jinja, the model's own file byte for byte, held
to it by tests/test_sim_qwen36.py) writes an assistant turn as `<think>\\n` REASONING `\\n</think>\\n\\n` CONTENT,
both trimmed, then its calls: `\\n\\n` before the first when there is content, `\\n` between two, each
`<tool_call>\\n<function=NAME>\\n`, one `<parameter=ARG>\\nVALUE\\n</parameter>\\n` per argument (a string VALUE
as it is, any other as JSON), `</function>\\n</tool_call>`; `<|im_end|>` last. The simulated model writes
exactly that: its reasoning and its content begin and end on non-blank text, so the text is a fixed point of
the template, and a trainer that re-renders the parsed reply gets the server's tokens back. Its ids are the
tokens of that text (`raw_text`), as a real server's output ids are what the model wrote.

What a client sees (held to SGLang's own parsers, imported from its venv, by tests/test_sim_qwen36_parsers.py):
- `reasoning_content`: the text before `</think>`, its last "\\n" included (the parser keeps it);
- `content`: "\\n\\n" (what follows `</think>`) and the content; with calls, streamed, every text between them
  too ("\\n\\n" before the first, "\\n" before each next); whole, the text before the first `<tool_call>`;
- tool calls: the name first, then the arguments as `qwen3_coder` rebuilds them per parameter: `{` and
  `"ARG": VALUE`, `, "ARG": VALUE` for each next, `}` (`{}` without arguments), with `json.dumps`' separators.

In the script (simulator.script) a call is one position for its header, one per argument and one for its
close; `ToolCallScript.raw` holds each position's text, `lead` the text before the header.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # script imports this module to build the calls; this one reads scripts only
    from simulator.script import Script, ToolCallScript

TEMPLATES: dict[str, Path] = {
    "qwen3.6": Path(__file__).resolve().with_name("qwen36_chat_template.jinja"),
    "qwen3": Path(__file__).resolve().with_name("qwen3_chat_template.jinja"),
}
THINK_END = "</think>"
# What stands in for a first or last word piece that is blank: the model's text starts and ends on a word.
_FIRST = "Okay"
_LAST = "."


def first_piece(text: str) -> str:
    """The first word piece of a reasoning or a content: the template trims what it writes."""
    return text.lstrip() or _FIRST


def last_piece(text: str) -> str:
    return text.rstrip() or _LAST


def value_text(value: Any) -> str:
    """A parameter's value as the template writes it: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def arguments_fragments(args: dict[str, Any]) -> tuple[str, ...]:
    """The arguments JSON as qwen3_coder streams it, one fragment per parameter position and one for the close;
    joined, `json.dumps(args, ensure_ascii=False)`, which is its whole (non-streamed) answer."""
    items = [f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}" for k, v in args.items()]
    if not items:
        return ("{}",)
    return ("{" + items[0], *(", " + item for item in items[1:]), "}")


def call_texts(name: str, args: dict[str, Any], lead: str) -> tuple[str, ...]:
    """What the model writes for one call, position by position: header, one per argument, close."""
    params = tuple(f"<parameter={k}>\n{value_text(v)}\n</parameter>\n" for k, v in args.items())
    return (f"{lead}<tool_call>\n<function={name}>\n", *params, "</function>\n</tool_call>")


def call_script(name: str, args: Any, index: int, content_written: bool, rng: random.Random) -> ToolCallScript:
    """One call as Qwen3.6 writes it. `content_written`: the reply has content before its calls (then the
    first call follows "\\n\\n", as the template writes it)."""
    from simulator.script import ToolCallScript

    arguments = dict(args) if isinstance(args, dict) else {}  # the template writes a mapping's items only
    lead = "\n" if index else ("\n\n" if content_written else "")
    call_id = "call_" + rng.getrandbits(96).to_bytes(12, "little").hex()
    return ToolCallScript(call_id, name, arguments_fragments(arguments), raw=call_texts(name, arguments, lead),
                          lead=lead)


def raw_text(script: Script, upto: int) -> str:
    """The text the model wrote in the reply's first `upto` positions (special tokens aside)."""
    from simulator.script import ReplyCursor

    text_end = script.reasoning_tokens + script.content_tokens
    pieces = ReplyCursor(script).advance(min(upto, text_end))
    out = "".join(p.text for p in pieces if p.phase == "reasoning")
    content = "".join(p.text for p in pieces if p.phase == "content")
    if script.reasoning_tokens and content:
        content = THINK_END + content  # the opening "\n\n" of the content follows </think>
    out += content
    offset = text_end
    for call in script.tool_calls:
        count = max(0, min(upto - offset, call.tokens))
        texts = list(call.raw[:count])
        trim = script.trim
        if trim is not None and offset <= trim[0] < offset + count:
            texts[trim[0] - offset] = texts[trim[0] - offset][:trim[1]]
        out += "".join(texts)
        offset += call.tokens
    return out
