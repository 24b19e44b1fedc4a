"""SpecForge 0.2.0's conversation path, replicated: the input_ids and loss_mask it trains on for one
`specforge` row, so that the export's template check judges what the trainer will train on.

Followed rule by rule from the installed package (`specforge/data/parse.py`: `Parser._normalize_message`,
`Parser._sanitize_message`, `GeneralParser.parse`, `ThinkingParser`; `specforge/data/template.py`: the
`qwen3.5` template that SpecForge's DFlash recipe for Qwen3.6 names), and held to that code by a test that
runs the real trainer on the same rows (`tests/test_trainer_fidelity.py`, marker `trainers`):

- messages are normalized (`from`/`value` -> `role`/`content`, empty content -> ""); a system turn is kept
  first; turns before the first user turn are dropped; the conversation is cut at a `tool` turn that does
  not follow an assistant or tool turn, and at an assistant turn that does not follow a user or tool turn;
- each kept message keeps only `role`, `content`, `tool_calls`, `reasoning_content`, `name`,
  `tool_call_id`; tool-call `arguments` given as a string are parsed with `json.loads`, and arguments
  that do not parse become `{}` (the trainer then renders a call the model never wrote);
- the whole conversation is rendered at once with the tokenizer's chat template
  (`apply_chat_template(messages, tokenize=False, add_generation_prompt=False, tools=tools or None,
  enable_thinking=True)`) and tokenized in one pass, without special tokens;
- the loss mask is 1 on every span that follows the assistant header `<|im_start|>assistant\\n<think>\\n`
  up to and including the next `<|im_end|>\\n` (or the end of the text), found by a regular expression
  on the text and mapped to tokens by encoding the text before each span's start and end; with
  `train_only_last_turn` only the last span. An assistant turn the template renders without `<think>\\n`
  after its header (Qwen's templates drop the reasoning of turns before the last user turn) gets no loss.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from client.export.render import ChatTokenizer

# specforge/data/template.py, "qwen3.5"
QWEN35_ASSISTANT_HEADER = "<|im_start|>assistant\n<think>\n"
QWEN35_END_OF_TURN = "<|im_end|>\n"
# ThinkingParser.standard_keys
THINKING_KEYS = frozenset({"role", "content", "tool_calls", "reasoning_content", "name", "tool_call_id"})
_SPAN = re.compile(re.escape(QWEN35_ASSISTANT_HEADER) + r"([\s\S]*?(?:" + re.escape(QWEN35_END_OF_TURN) + "|$))",
                   re.DOTALL)


@dataclass(frozen=True, slots=True)
class TrainerRow:
    """What SpecForge trains on for one row: its tokens, its loss mask, the tool calls whose arguments it
    replaced with `{}` because they do not parse, and the token bounds of the spans the mask is made of."""

    input_ids: list[int]
    loss_mask: list[int]
    emptied_arguments: int = 0
    spans: tuple[tuple[int, int], ...] = ()

    def last_span_only(self) -> TrainerRow:
        """The row as SpecForge makes it with `data.train_only_last_turn: true`: its last span supervised."""
        loss_mask = [0] * len(self.input_ids)
        if self.spans:
            start, end = self.spans[-1]
            loss_mask[start:end] = [1] * max(0, end - start)
        return TrainerRow(self.input_ids, loss_mask, self.emptied_arguments, self.spans[-1:])


def _normalize(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role", message.get("from", ""))
    content = message.get("content") or message.get("value") or ""
    role = {"human": "user", "gpt": "assistant"}.get(role, role)
    out = {**message, "role": role, "content": content}
    out.pop("from", None)
    out.pop("value", None)
    return out


def _sanitize(message: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """`_sanitize_message`: the message as the template gets it, and how many arguments became `{}`."""
    cleaned = {key: value for key, value in message.items() if key in THINKING_KEYS}
    if "tool_calls" not in cleaned:
        return cleaned, 0
    calls = cleaned["tool_calls"]
    if isinstance(calls, str):
        try:
            calls = json.loads(calls)
        except json.JSONDecodeError:
            cleaned.pop("tool_calls", None)
            return cleaned, 0
    if not isinstance(calls, list):
        return cleaned, 0
    emptied = 0
    sanitized = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        clean: dict[str, Any] = {"id": call.get("id", ""), "type": call.get("type", "function")}
        function = call.get("function", {})
        if isinstance(function, dict):
            arguments = function.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = {}
                    emptied += 1
            clean["function"] = {"name": function.get("name", ""), "arguments": arguments}
        sanitized.append(clean)
    cleaned["tool_calls"] = sanitized
    return cleaned, emptied


def trainer_messages(conversation: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """`GeneralParser.parse`'s messages for the template (the `qwen3.5` template has no system prompt of
    its own), and how many tool-call arguments it emptied."""
    turns = [_normalize(message) for message in conversation]
    messages: list[dict[str, Any]] = []
    if turns and turns[0]["role"] == "system":
        messages.append({"role": "system", "content": turns[0]["content"]})
        turns = turns[1:]
    while turns and turns[0]["role"] != "user":
        turns = turns[1:]
    emptied = 0
    for index, sentence in enumerate(turns):
        if index:
            previous = turns[index - 1]["role"]
            if sentence["role"] == "tool" and previous not in ("assistant", "tool"):
                break
            if sentence["role"] == "assistant" and previous not in ("user", "tool"):
                break
        message, count = _sanitize(sentence)
        emptied += count
        messages.append(message)
    return messages, emptied


def _prefix_length(tok: ChatTokenizer, text: str, max_length: int | None) -> int:
    ids = tok.encode(text)
    return len(ids) if max_length is None else min(len(ids), max_length)


def trainer_text(tok: ChatTokenizer, conversation: list[dict[str, Any]],
                 tools: list[dict[str, Any]] | None) -> tuple[str, int]:
    """The text SpecForge renders for the row, and how many tool-call arguments it emptied."""
    messages, emptied = trainer_messages(conversation)
    return tok.render(messages, tools or None, add_generation_prompt=False, kwargs={"enable_thinking": True}), emptied


def trainer_row(tok: ChatTokenizer, conversation: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
                max_length: int | None = None, train_only_last_turn: bool = False, literal: bool = False,
                rendered: tuple[str, int] | None = None) -> TrainerRow:
    """The row as SpecForge's `ThinkingParser.parse` makes it (`max_length` None: not cut). The spans' token
    positions are the lengths of their prefixes' encodings, found from the one encoding of the text
    (`ChatTokenizer.encode_prefixes`); `literal` encodes each prefix whole, as SpecForge does: the same
    row, several times slower on a long one (the reference a test and `bench.template_check` hold it to).
    `rendered`: `trainer_text`'s result when the caller has it already."""
    text, emptied = rendered if rendered is not None else trainer_text(tok, conversation, tools)
    spans = list(_SPAN.finditer(text))
    if train_only_last_turn and spans:
        spans = spans[-1:]
    if literal:
        input_ids = tok.encode(text)
        bounds = [(_prefix_length(tok, text[:span.start(1)], max_length),
                   _prefix_length(tok, text[:span.end(1)], max_length)) for span in spans]
    else:
        input_ids, lengths = tok.encode_prefixes(text, [k for span in spans for k in (span.start(1), span.end(1))])
        if max_length is not None:
            lengths = [min(length, max_length) for length in lengths]
        bounds = list(zip(lengths[::2], lengths[1::2], strict=True))
    if max_length is not None:
        input_ids = input_ids[:max_length]
    loss_mask = [0] * len(input_ids)
    clipped = tuple((min(first, len(input_ids)), min(last, len(input_ids))) for first, last in bounds)
    for start, end in clipped:
        loss_mask[start:end] = [1] * max(0, end - start)
    return TrainerRow(input_ids, loss_mask, emptied, clipped)
