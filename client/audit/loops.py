"""The audit's loop section: how many replies loop, and what share of the completion tokens they cost.

A reply loops when the end of its reasoning + content is one block repeated (client.core.repetition's
text rule, the one the stream's loop stop applies: a block of at most 4,096 characters, 8 times or more,
over at least 8,192 characters of prose repeated exactly, 16,384 of prose whose counters move, or 32,768 of
anything else, such as code or data, repeated exactly), or when its finish_reason is "repetition" (a run
that stopped it). This holds for any run, made with a loop stop or without one: without, a loop runs to
max_tokens and the audit says what it cost. Per looping record: its completion tokens (all of them: such a
reply is worth nothing to a trainer), and the tokens of the repeated tail alone (completion tokens times the
tail's share of the reply's characters, an estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from client.core.repetition import TEXT_RULE, find_repetition

REPETITION = "repetition"  # the finish_reason of a reply a loop stop ended
EXAMPLES = 5
KINDS = {"exact": "prose", "counter": "prose, its counters moving", "structured": "code or data"}


@dataclass
class Loops:
    """Counters of one pass over the results."""

    records: int = 0
    completion_tokens: int = 0
    repeated_tokens: float = 0.0
    stopped: int = 0  # finish_reason "repetition"
    ran_to_the_cap: int = 0  # finish_reason "length" with a repeating tail
    examples: list[str] = field(default_factory=list)

    def add(self, where: str, record: dict[str, Any], tokens: int) -> None:
        reasoning = record.get("reasoning")
        content = record.get("content")
        text = (reasoning if isinstance(reasoning, str) else "") + (content if isinstance(content, str) else "")
        # The rule looks at the tail only: a cheap look there first, the whole text only for a loop.
        found = find_repetition(text[-TEXT_RULE.window:])
        if found is not None:
            found = find_repetition(text)
        finish = record.get("finish_reason")
        if found is None and finish != REPETITION:
            return
        self.records += 1
        self.completion_tokens += tokens
        self.stopped += finish == REPETITION
        self.ran_to_the_cap += finish == "length" and found is not None
        if found is not None and text:
            self.repeated_tokens += tokens * found.span / len(text)
        if len(self.examples) < EXAMPLES:
            what = (f"a block of {found.block:,} characters ({KINDS[found.kind]}) repeated {found.repeats:.0f} "
                    f"times at the end, e.g. {str(found.sample)[:60]!r}") if found is not None else "no repeating tail"
            self.examples.append(f"{where}: {record.get('id')}: finish_reason {finish}, {tokens:,} token(s), {what}")

    def summary(self, records: int, completion_tokens: int) -> dict[str, Any]:
        def share(part: float, whole: int) -> float:
            return round(part / whole, 4) if whole else 0.0

        return {"records": self.records, "share": share(self.records, records),
                "completion_tokens": self.completion_tokens,
                "token_share": share(self.completion_tokens, completion_tokens),
                "repeated_tokens": round(self.repeated_tokens),
                "repeated_token_share": share(self.repeated_tokens, completion_tokens),
                "stopped": self.stopped, "ran_to_the_cap": self.ran_to_the_cap, "examples": self.examples,
                "rule": {"max_block_chars": TEXT_RULE.max_block, "min_repeats": TEXT_RULE.min_repeats,
                         "min_span_chars": TEXT_RULE.min_span, "counter_span_chars": TEXT_RULE.counter_span,
                         "structured_span_chars": TEXT_RULE.structured_span}}


def finding(data: dict[str, Any]) -> str | None:
    """The warning line, when any reply loops."""
    if not data["records"]:
        return None
    stopped = f"; {data['stopped']:,} were stopped (finish_reason repetition)" if data["stopped"] else ""
    return (f"{data['records']:,} reply(s) ({data['share']:.1%}) loop: the end of the reply repeats one block; "
            f"they cost {data['completion_tokens']:,} completion tokens ({data['token_share']:.1%} of all), about "
            f"{data['repeated_tokens']:,} ({data['repeated_token_share']:.1%}) in the repeats themselves{stopped}")


def row(data: dict[str, Any]) -> str:
    """The audit table's `loops` cell."""
    if not data["records"]:
        return "none"
    return (f"{data['records']:,} record(s) ({data['share']:.1%}); {data['completion_tokens']:,} tokens "
            f"({data['token_share']:.1%} of completion tokens), ~{data['repeated_tokens']:,} in the repeats "
            f"({data['repeated_token_share']:.1%}); run to max_tokens {data['ran_to_the_cap']:,}, "
            f"stopped {data['stopped']:,}")
