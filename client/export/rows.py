"""What each export format writes for one training sample, and the trainer's window, from the trainers'
own loaders (SpecForge at sgl-project/SpecForge, speculators at vllm-project/speculators):

- `specforge`: conversation JSONL for `data.train_data_path`, one object a line:
  `{"id", "conversations": [{"role", "content", "reasoning_content"?, "tool_calls"?, "tool_call_id"?}],
  "tools"?}`. Read by `specforge/data/preprocessing.py` `build_eagle3_dataset` (the `conversations` column;
  `tools` a list or a JSON string, parsed with `json.loads`; `id` dropped; every other column is handed to
  the chat template as a keyword, so none is written) and `specforge/data/parse.py` (`ThinkingParser`, the
  parser of the `qwen3.5` template: it keeps `role`, `content`, `tool_calls`, `reasoning_content`, `name`,
  `tool_call_id` of each message, parses `tool_calls[].function.arguments` from JSON strings, and wants a
  user turn first after an optional system turn). `tools` is written as a JSON string, as
  `specforge/utils.py` `safe_conversations_generator` makes it, so that Arrow never has to unify the
  tools' schemas across rows; content-part lists are flattened to text for the same reason. Per-turn rows
  follow `scripts/expand_reasoning_conversations.py`: the turn's history (earlier assistant turns without
  their reasoning) and the turn itself.
- `specforge-tokenized`: `{"id", "input_ids", "loss_mask"}` for `data.prompts_path`. Read by
  `specforge/data/prompt_builder.py` `_prompt_from_record`: both fields, one-dimensional integer lists of
  equal length, loss_mask 0/1, not empty; kept as `input_ids[:max_length]`, `loss_mask[:max_length]`.
- `speculators`: the rows of `scripts/response_regeneration/script.py` (`_sample_from_response`):
  `{"id", "primary_id", "input_ids", "loss_mask", "metadata"}`, loss_mask 0 on the prompt and 1 on the
  generated tokens (`build_boundary_sample`). Read by `src/speculators/data_generation/preprocessing.py`
  `_passthrough_pretokenized` and `_append_row`: equal lengths, cut at `--seq-length`, dropped when no
  supervised token is left. Its review-only `text` field is not written.

The window: both trainers keep `input_ids[:max_length]`, prompt included, and cut the rest (SpecForge's
`tokenizer(..., max_length=..., truncation=True)` for conversations does the same). A row whose cut leaves
too few supervised tokens is dropped, as the trainer drops it: SpecForge's DFlash providers filter with
`has_consecutive_supervised_tokens` (`specforge/data/loss_mask.py`, two adjacent supervised tokens),
speculators keeps any row with one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from client.export.formats import FORMATS
from client.export.render import assistant_turn
from prompts.sglang_input import template_content

# The finish reasons of a reply the model ended itself (its end-of-turn token, or a tool call).
ENDED_BY_ITSELF = ("stop", "tool_calls")
_MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


@dataclass(frozen=True, slots=True)
class Turn:
    """One generated turn: its record, its token ids and the tools in the form the server rendered."""

    record: dict[str, Any]
    prompt: list[int]
    completion: list[int]
    tools: list[dict[str, Any]] | None
    where: str = ""  # FILE:LINE of the record, for the report


@dataclass(frozen=True, slots=True)
class Sample:
    """One training row: one turn, or (`--rows conversation`) every turn of a conversation in order."""

    id: str
    turns: tuple[Turn, ...]
    # How the server handed content-part lists to the template (prompts.sglang_input.content_format):
    # decides how a row's parts are joined into the text SpecForge hands the same template.
    content_format: str = "string"

    @property
    def last(self) -> Turn:
        return self.turns[-1]

    @property
    def length(self) -> int:
        return len(self.last.prompt) + len(self.last.completion)


def flat_content(content: Any, content_format: str = "string", role: str = "") -> Any:
    """A message's content as one string, the text the server's template rendered for it: null as "", a
    content-part list as SGLang hands it to a template of this content format (`prompts.sglang_input`),
    and then as the template writes it. A "string" template gets the text parts joined by a space (SGLang
    joins them); an "openai" template (Qwen3.5, Qwen3.6) gets the parts and loops over them writing each
    part's text with nothing between (`render_content`), so they are joined with nothing. A tool turn's
    parts are joined by a space either way (SGLang joins them before any template)."""
    value = template_content(role, content, content_format)
    if isinstance(value, list):
        return "".join(str(part.get("text", "")) for part in value
                       if isinstance(part, dict) and part.get("type") == "text")
    return value


def _message(message: dict[str, Any], content_format: str) -> dict[str, Any]:
    out = {key: message[key] for key in _MESSAGE_KEYS if message.get(key) is not None}
    out["content"] = flat_content(message.get("content"), content_format, str(message.get("role", ""))) or ""
    return out


def conversation(sample: Sample) -> list[dict[str, Any]]:
    """SpecForge's `conversations` for a row: the last turn's history exactly as it was sent (the model's
    earlier turns without their reasoning, unless the run preserved it) and the turn. Earlier turns are
    not given back their reasoning: the server generated the last turn without it, and a row that shows it
    would train the last turn on a context the model never saw (and SpecForge can supervise only one of
    the two). A conversation row therefore trains its last turn; every turn is trained in its own row with
    `--rows turn`."""
    last = sample.last.record
    messages = [_message(m, sample.content_format) for m in last.get("messages") or [] if isinstance(m, dict)]
    return [*messages, assistant_turn(last)]


def tokenized_line(sample: Sample, input_ids: list[int], loss_mask: list[int]) -> dict[str, Any]:
    return {"id": sample.id, "input_ids": input_ids, "loss_mask": loss_mask}


def specforge_line(sample: Sample, input_ids: list[int] | None = None,
                   loss_mask: list[int] | None = None) -> dict[str, Any]:
    """The conversation; the ids are the trainer's to make (taken for the writers' one signature)."""
    line: dict[str, Any] = {"id": sample.id, "conversations": conversation(sample)}
    if sample.last.tools:
        line["tools"] = orjson.dumps(sample.last.tools).decode()
    return line


def tokens(sample: Sample) -> tuple[list[int], list[int]]:
    """input_ids and loss_mask of the last turn: 0 on the prompt, 1 on what the server generated."""
    turn = sample.last
    return [*turn.prompt, *turn.completion], [0] * len(turn.prompt) + [1] * len(turn.completion)


def speculators_line(sample: Sample, input_ids: list[int], loss_mask: list[int]) -> dict[str, Any]:
    record = sample.last.record
    conversation_id = record.get("conversation_id")
    return {"id": sample.id, "primary_id": conversation_id if isinstance(conversation_id, str) else sample.id,
            "input_ids": input_ids, "loss_mask": loss_mask,
            "metadata": {"finish_reason": record.get("finish_reason"), "is_tool_call": bool(record.get("tool_calls")),
                         "usage": record.get("usage") or {}, "endpoint": record.get("endpoint"),
                         "sampling_params": record.get("sampling") or {}}}


@dataclass(frozen=True, slots=True)
class Window:
    """The trainer's `max_length` (None: no window) and what to do with a longer row: cut or drop."""

    max_length: int | None = None
    over: str = "cut"

    def fit(self, sample: Sample, fmt: str) -> tuple[str, list[int], list[int]]:
        """("keep" | "cut" | "drop-long" | "drop-unsupervised", input_ids, loss_mask) as the trainer keeps them.
        For `specforge` the ids are not written (the trainer cuts its own tokens); the verdict still is."""
        input_ids, loss_mask = tokens(sample)
        if self.max_length is None or len(input_ids) <= self.max_length:
            return "keep", input_ids, loss_mask
        if self.over == "drop":
            return "drop-long", input_ids, loss_mask
        input_ids, loss_mask = input_ids[:self.max_length], loss_mask[:self.max_length]
        # The loss mask here is one contiguous run of 1s: two supervised tokens are two adjacent ones.
        if sum(loss_mask) < FORMATS[fmt].min_supervised:
            return "drop-unsupervised", input_ids, loss_mask
        return "cut", input_ids, loss_mask


class Conversations:
    """Groups `--turns all` records into one sample per conversation. A conversation is complete at its
    turn whose id ends with `!` (client.run's mark of the turn that ends it); the others are handed back
    by `rest()` with the turns that were written."""

    def __init__(self, content_format: str = "string") -> None:
        self.open: dict[str, list[Turn]] = {}
        self.content_format = content_format

    def add(self, turn: Turn) -> Sample | None:
        record = turn.record
        key = record.get("conversation_id")
        if not isinstance(key, str):
            return Sample(str(record["id"]), (turn,), self.content_format)
        self.open.setdefault(key, []).append(turn)
        if str(record["id"]).endswith("!"):
            return self._sample(key)
        return None

    def _sample(self, key: str) -> Sample:
        turns = sorted(self.open.pop(key), key=lambda t: int(t.record.get("turn") or 0))
        return Sample(key, tuple(turns), self.content_format)

    def rest(self) -> list[Sample]:
        return [self._sample(key) for key in list(self.open)]
