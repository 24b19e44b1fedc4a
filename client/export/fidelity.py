"""Template fidelity: does the trainer's chat template render the tokens the server generated?

A trainer that reads conversations (SpecForge's `data.train_data_path`) re-renders each row with its own
chat template and tokenizes the whole text in one pass (`specforge/data/parse.py`, `GeneralParser.parse`:
`apply_chat_template(messages, tokenize=False, add_generation_prompt=False, tools=...)`, then
`tokenizer(conversation, add_special_tokens=False)`). When that template differs from the one the server
rendered the prompt with, the trainer's tokens (and so its loss mask) silently drift from the target
model's own output, a known cause of a drafter whose acceptance is mysteriously low.

For every record with the server's exact ids, this module renders the row the way the trainer will (the
request's messages plus the generated assistant turn as the `specforge` row holds them, tool-call
arguments parsed into objects as SpecForge's `_sanitize_message` does; `enable_thinking` as the request
sent it, which Qwen's templates read only for the generation prompt, not rendered here) and compares the
tokens with `prompt_token_ids +
completion_token_ids`. A row matches when the trainer's tokens begin with the server's: what the template
adds after the model's last token (the newline after `<|im_end|>`, the `</think>` that closes a reply cut
by max_tokens) was never generated, so it is not compared. For a mismatch it gives the first differing
position and a short decoded context on both sides, token by token: the same text split into other
tokens (a tokenizer whose pre-tokenizer parts `\n\n` from the word after it in one pass but not at the
end of a prompt) is a mismatch too, since the trainer trains on its own split.

Tools: SGLang renders each tool as its pydantic model dumps it (`"defer_loading": null` added,
`render.sglang_tool`), so a trainer given the tools as the request sent them renders a different system
turn. When the recorded tools do not match and SGLang's form does, the row matches with SGLang's form, and
the export writes the tools in that form, so that the trainer renders what the server rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client.export.render import ChatTokenizer, RenderError, sglang_tool, template_messages, thinking_on
from client.export.rows import Sample, Turn, conversation

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


def first_difference(server: list[int], trainer: list[int]) -> int:
    """The first position where the trainer's tokens differ from the server's, or -1 when the trainer's
    tokens begin with all of the server's."""
    for index, token in enumerate(server):
        if index >= len(trainer) or trainer[index] != token:
            return index
    return -1


def render_row(record: dict[str, Any], tok: ChatTokenizer, tools: list[dict[str, Any]] | None) -> list[int]:
    """The trainer's tokens for this record's row: the conversation as the `specforge` row writes it, its
    tool-call arguments parsed (SpecForge's `_sanitize_message`), rendered and tokenized at once."""
    written = conversation(Sample(str(record.get("id")), (Turn(record, [], [], tools),)))
    text = tok.render(template_messages(written), tools, add_generation_prompt=False,
                      enable_thinking=thinking_on(record))
    return tok.encode(text)


def check(record: dict[str, Any], tok: ChatTokenizer) -> Verdict:
    """Compare the trainer's rendering of `record` with the server's exact ids (the record must have them)."""
    server = [*record["prompt_token_ids"], *record["completion_token_ids"]]
    recorded = record.get("tools") or None
    forms: list[list[dict[str, Any]] | None] = [recorded]
    if recorded:
        forms.append([sglang_tool(t) if isinstance(t, dict) else t for t in recorded])
    first: tuple[int, list[int]] | None = None
    for tools in forms:
        try:
            trainer = render_row(record, tok, tools)
        except RenderError as exc:
            return Verdict(False, recorded, error=str(exc))
        position = first_difference(server, trainer)
        if position < 0:
            return Verdict(True, tools)
        if first is None:
            first = (position, trainer)
    assert first is not None
    position, trainer = first
    low = max(0, position - CONTEXT_TOKENS)
    return Verdict(False, recorded, position, pieces(tok, server[low:position + CONTEXT_TOKENS]),
                   pieces(tok, trainer[low:position + CONTEXT_TOKENS]))


def pieces(tok: ChatTokenizer, ids: list[int]) -> tuple[str, ...]:
    """Each token decoded on its own: two splits of the same text show where they part."""
    return tuple(tok.decode([token]) for token in ids)


@dataclass
class FidelityReport:
    checked: int = 0
    matched: int = 0
    sglang_tools: int = 0  # matched only with the tools in SGLang's form (written so)
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
            return
        if len(self.examples) < MAX_EXAMPLES:
            if verdict.error:
                self.examples.append(f"{where}: {verdict.error}")
            else:
                self.examples.append(f"{where}: first difference at token {verdict.position}: server "
                                     f"{list(verdict.server)!r}, trainer's template {list(verdict.trainer)!r}")

    def summary(self) -> dict[str, Any]:
        return {"checked": self.checked, "matched": self.matched, "mismatched": self.mismatched,
                "mismatch_share": round(self.mismatch_share, 6), "sglang_tools": self.sglang_tools,
                "unchecked": self.unchecked, "examples": self.examples}
