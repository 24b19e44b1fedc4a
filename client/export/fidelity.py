"""Template fidelity: does the trainer's chat template render the tokens the server generated?

A trainer that reads conversations (SpecForge's `data.train_data_path`) re-renders each row with its own
chat template and tokenizes the whole text in one pass (`specforge/data/parse.py`, `GeneralParser.parse`:
`apply_chat_template(messages, tokenize=False, add_generation_prompt=False, tools=...)`, then
`tokenizer(conversation, add_special_tokens=False)`). When that template differs from the one the server
rendered the prompt with, the trainer's tokens (and so its loss mask) silently drift from the target
model's own output, a known cause of a drafter whose acceptance is mysteriously low.

For every row with the server's exact ids, this module computes what SpecForge trains on for the
`specforge` row the export writes, with the trainer's own rules (`client.export.specforge_parse`, held
to the installed SpecForge by a test): its messages sanitized as `_sanitize_message` does (tool-call
arguments that do not parse become `{}`), rendered at once with the template, tokenized in one pass, and
its loss mask from the `qwen3.5` assistant spans. The row matches when (1) the trainer's tokens begin
with the server's `prompt_token_ids + completion_token_ids`, (2) its loss mask is 0 on the prompt and 1
on every generated token, and (3) nothing past the reply is supervised, unless the model ended its turn
there (the newline the template writes after `<|im_end|>` is then supervised, as in every SpecForge row).
A reply cut by max_tokens or stopped as a loop fails (3): the template closes it with tokens the model
never generated, so the export leaves such replies out of `specforge` rows before the check
(`client.export.build`). For a mismatch the report gives the first differing position, what differs, and
a short decoded context on both sides, token by token: the same text split into other tokens is a
mismatch too, since the trainer trains on its own split.

SpecForge's `data.train_only_last_turn` (`last_turn`): "off" judges the loss mask SpecForge makes without
it (every assistant span), "on" with it (the last span only), "auto" without it first and, for a row that
does not match so, with it: a row that matches only with it is a match that needs the setting
(`Verdict.last_turn_only`). Those are agentic rows under Qwen3.5/3.6: the template renders each assistant
turn after the last user message, the earlier tool-call turns of the prompt too, with the assistant header
`qwen3.5`'s spans start at, so without the setting SpecForge supervises prompt turns the model did not
generate in this run. No row of ours needs more than its last span: every row trains its last turn.

Tools: SGLang renders each tool as its pydantic model dumps it (`"defer_loading": null` added,
`render.sglang_tool`), so a trainer given the tools as the request sent them renders a different system
turn. When the recorded tools do not match and SGLang's form does, the row matches with SGLang's form, and
the export writes the tools in that form, so that the trainer renders what the server rendered.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from client.export.render import ChatTokenizer, RenderError, sglang_tool
from client.export.rows import Sample, specforge_line
from client.export.specforge_parse import TrainerRow, trainer_row, trainer_text

LastTurn = Literal["off", "on", "auto"]  # SpecForge's data.train_only_last_turn, as the check assumes it
CONTEXT_TOKENS = 8  # decoded each side of the first differing position
MAX_EXAMPLES = 10


@dataclass(frozen=True, slots=True)
class Verdict:
    """One record's check: `tools` is the form of the tools that reproduces the server's prompt (None when
    the record has none); `position` and the two texts are set for a mismatch."""

    matched: bool
    tools: list[dict[str, Any]] | None
    position: int = -1
    server: tuple[str, ...] = ()
    trainer: tuple[str, ...] = ()
    error: str = ""
    reason: str = ""  # what differs when the tokens agree (the loss mask), or why they differ
    last_turn_only: bool = False  # matched only as SpecForge trains with data.train_only_last_turn: true


def first_difference(server: list[int], trainer: list[int]) -> int:
    """The first position where the trainer's tokens differ from the server's, or -1 when the trainer's
    tokens begin with all of the server's."""
    if trainer[:len(server)] == server:  # the common case, compared in C
        return -1
    for index, token in enumerate(server):
        if index >= len(trainer) or trainer[index] != token:
            return index
    return -1


def _find(values: list[int], value: int, start: int, stop: int) -> int:
    """The first index of `value` in values[start:stop], or -1 (list.index: a scan in C)."""
    try:
        return values.index(value, start, stop) if start < stop else -1
    except ValueError:
        return -1


def _verdict_for(server: list[int], prompt_length: int, row: TrainerRow, ends_turn: bool) -> tuple[int, str]:
    """(-1, "") when the trainer trains exactly on what the server generated; else the first position that
    differs and what differs there."""
    position = first_difference(server, row.input_ids)
    if position >= 0:
        return position, ""
    supervised_prompt = _find(row.loss_mask, 1, 0, prompt_length)
    if supervised_prompt >= 0:
        return supervised_prompt, "the trainer supervises a token of the prompt, which the model did not generate here"
    unsupervised = _find(row.loss_mask, 0, prompt_length, len(server))
    if unsupervised >= 0:
        return unsupervised, "the trainer gives a generated token no loss"
    beyond = _find(row.loss_mask, 1, len(server), len(row.input_ids))
    if beyond >= 0 and not ends_turn:
        return beyond, "the trainer supervises tokens past the reply's last one, which the model never generated"
    return -1, ""


def _judge(server: list[int], prompt_length: int, row: TrainerRow, ends_turn: bool,
           last_turn: LastTurn) -> tuple[int, str, bool]:
    """`_verdict_for`, and whether the match needs data.train_only_last_turn: with "auto", a row whose every
    span does not train exactly is judged again on its last span alone (SpecForge's rule with the setting)."""
    position, why = _verdict_for(server, prompt_length, row, ends_turn)
    if (position >= 0 and last_turn == "auto" and len(row.spans) > 1
            and _verdict_for(server, prompt_length, row.last_span_only(), ends_turn)[0] < 0):
        return -1, "", True
    return position, why, False


def check(sample: Sample, tok: ChatTokenizer, *, last_turn: LastTurn = "off",
          max_length: int | None = None, literal: bool = False) -> Verdict:
    """Compare what SpecForge trains on for `sample`'s `specforge` row with the server's exact ids of its
    last turn (which must have them): the tokens must begin with the server's, the loss mask must be 0 on
    the prompt and 1 on every generated token, and nothing past the reply may be supervised unless the
    model ended its turn there (the newline the template writes after the end-of-turn token). With the
    trainer's `max_length`, both sides are what the trainer keeps: their first `max_length` tokens. `literal`:
    the trainer's spans found by encoding each prefix whole (`specforge_parse.trainer_row`), the slow way.
    `last_turn`: SpecForge's data.train_only_last_turn, as above."""
    turn = sample.last
    record = turn.record
    server = [*turn.prompt, *turn.completion][:max_length]
    recorded = record.get("tools") or None
    forms: list[list[dict[str, Any]] | None] = [recorded]
    if recorded:
        forms.append([sglang_tool(t) if isinstance(t, dict) else t for t in recorded])
    ends_turn = bool(tok.eos) and bool(turn.completion) and tok.decode(turn.completion[-1:]) == tok.eos
    conversations = [specforge_line(replace(sample, turns=(*sample.turns[:-1], replace(turn, tools=tools))))
                     ["conversations"] for tools in forms]
    prompt_length = min(len(turn.prompt), len(server))
    rendered: list[tuple[str, int] | None] = [None] * len(forms)
    only_last = last_turn == "on"
    if len(forms) == 2 and not literal:
        # Tools SGLang rendered in its own form (every row of a run on SGLang): the recorded form is judged
        # on the ids up to where its text parts from SGLang's, and left at that when they differ there.
        try:
            own = trainer_text(tok, conversations[0], forms[0])
        except RenderError as exc:
            return Verdict(False, recorded, error=str(exc))
        sglang: tuple[str, int] | None = None
        with contextlib.suppress(RenderError):  # raised again below, where the recorded form does not match
            sglang = trainer_text(tok, conversations[1], forms[1])
        rendered = [own, sglang]
        if sglang is not None and sglang[0] == own[0]:
            forms = forms[:1]  # the same text: the same verdict
        elif sglang is not None and _parts_early(tok, server, own[0], sglang[0]):
            row = trainer_row(tok, conversations[1], forms[1], max_length=max_length,
                              train_only_last_turn=only_last, rendered=sglang)
            position, _, needs = _judge(server, prompt_length, row, ends_turn, last_turn)
            if position < 0:
                return Verdict(True, forms[1], last_turn_only=needs)
    first: tuple[int, str, list[int]] | None = None
    for index, tools in enumerate(forms):
        try:
            row = trainer_row(tok, conversations[index], tools, max_length=max_length,
                              train_only_last_turn=only_last, literal=literal, rendered=rendered[index])
        except RenderError as exc:
            return Verdict(False, recorded, error=str(exc))
        position, why, needs = _judge(server, prompt_length, row, ends_turn, last_turn)
        if position < 0:
            return Verdict(True, tools, last_turn_only=needs)
        if row.emptied_arguments:
            why = (f"SpecForge replaces {row.emptied_arguments} tool call(s)' arguments that do not parse as JSON "
                   "with {}" + (f"; {why}" if why else ""))
        if first is None or position >= first[0]:
            first = (position, why, row.input_ids)  # the form that reproduces the most: the truer report
    assert first is not None
    position, why, trainer = first
    low = max(0, position - CONTEXT_TOKENS)
    return Verdict(False, recorded, position, pieces(tok, server[low:position + CONTEXT_TOKENS]),
                   pieces(tok, trainer[low:position + CONTEXT_TOKENS]), reason=why)


def _parts_early(tok: ChatTokenizer, server: list[int], text: str, other: str) -> bool:
    """True when `text`'s ids differ from the server's before `other`'s would: its ids up to the first added
    token after the first character where the two texts part (the start of its whole encoding) already
    differ from the server's. Then `text` cannot match, and is not encoded whole."""
    ids = tok.encode_through(text, _parted_at(text, other))
    if ids is None:
        return False
    count = min(len(ids), len(server))
    return ids[:count] != server[:count]


def _parted_at(text: str, other: str) -> int:
    """The length of the two texts' common start (a binary search of slices compared in C)."""
    low, high = 0, min(len(text), len(other))
    while low < high:
        middle = (low + high + 1) // 2
        if text[:middle] == other[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def pieces(tok: ChatTokenizer, ids: list[int]) -> tuple[str, ...]:
    """Each token decoded on its own: two splits of the same text show where they part."""
    return tuple(tok.decode([token]) for token in ids)


@dataclass
class FidelityReport:
    checked: int = 0
    matched: int = 0
    sglang_tools: int = 0  # matched only with the tools in SGLang's form (written so)
    last_turn_only: int = 0  # matched only as SpecForge trains with data.train_only_last_turn: true
    unchecked: int = 0  # records not compared: without server ids, or the check is not on
    examples: list[str] = field(default_factory=list)

    @property
    def mismatched(self) -> int:
        return self.checked - self.matched

    @property
    def mismatch_share(self) -> float:
        return self.mismatched / self.checked if self.checked else 0.0

    def add(self, where: str, record: dict[str, Any], verdict: Verdict) -> None:
        self.checked += 1
        if verdict.matched:
            self.matched += 1
            self.sglang_tools += bool(verdict.tools) and verdict.tools != (record.get("tools") or None)
            self.last_turn_only += verdict.last_turn_only
            return
        if len(self.examples) < MAX_EXAMPLES:
            if verdict.error:
                self.examples.append(f"{where}: {verdict.error}")
            else:
                what = f"{verdict.reason}; " if verdict.reason else ""
                self.examples.append(f"{where}: {what}first difference at token {verdict.position}: server "
                                     f"{list(verdict.server)!r}, trainer {list(verdict.trainer)!r}")

    def summary(self) -> dict[str, Any]:
        return {"checked": self.checked, "matched": self.matched, "mismatched": self.mismatched,
                "mismatch_share": round(self.mismatch_share, 6), "sglang_tools": self.sglang_tools,
                "last_turn_only": self.last_turn_only,
                "unchecked": self.unchecked, "examples": self.examples}
