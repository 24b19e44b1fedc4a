"""The audit's loop section: how many replies loop, and what share of the completion tokens they cost.

A tail repeats when the end of the reasoning + content is one block repeated (client.loops.repetition's text
rule: a block of at most 4,096 characters, 8 times or more, over at least 8,192 characters of prose repeated
exactly, 16,384 of prose whose counters move, or 32,768 of anything else repeated exactly), or, in a reply
that ran to its cap, when almost all of its tail was said a moment before (client.loops.near_repeat: drift,
shuffled paragraphs, counters in bold, lists, LaTeX or letters).

The text alone cannot tell a loop from an answer asked to repeat (a 500-item checklist, counting to a
thousand): how the reply ended can. A loop runs to max_tokens; so a reply counts as a loop when it ran to
its cap (finish_reason "length") with a repeating tail, or when a loop stop ended it (finish_reason
"repetition"). A reply that ended by itself ("stop", "tool_calls") with a repeating tail is only a
suspicion: counted apart (`suspected`), never in the loops or their tokens. Records ended as "repetition" by
an older, eager loop stop can be generated again with `client.run --redo-repetition`.

Per looping record: its completion tokens (all of them: such a reply is worth nothing to a trainer), and the
tokens of the repeated tail alone (completion tokens times the tail's share of the reply's characters, an
estimate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from client.loops.near_repeat import SHARE_OF_WINDOW, NearLoop, find_near_loop
from client.loops.repetition import TEXT_RULE, Repetition, find_repetition

REPETITION = "repetition"  # the finish_reason of a reply a loop stop ended
ENDED_BY_ITSELF = ("stop", "tool_calls")  # a repeating tail there is a suspicion, not a loop
EXAMPLES = 5
KINDS = {"exact": "prose", "counter": "prose, its counters moving", "structured": "code or data"}


Verdict = Literal["loop", "suspected"]


def judge(text: str, finish: object) -> tuple[Verdict | None, Repetition | None, NearLoop | None]:
    """A reply's verdict from its text and how it ended: "loop" (ran to its cap with a repeating tail, or
    stopped by a loop stop), "suspected" (ended by itself with a repeating tail), or None; and what was found.
    The near-repeat finder runs only on a reply that did not end by itself (it costs milliseconds)."""
    # The rule looks at the tail only: a cheap look there first, the whole text only for a loop.
    found = find_repetition(text[-TEXT_RULE.window:])
    if found is not None:
        found = find_repetition(text)
    if finish in ENDED_BY_ITSELF:
        return ("suspected" if found is not None else None), found, None
    near = find_near_loop(text) if found is None else None
    looped = found is not None or near is not None or finish == REPETITION
    return ("loop" if looped else None), found, near


@dataclass
class Loops:
    """Counters of one pass over the results."""

    records: int = 0
    completion_tokens: int = 0
    repeated_tokens: float = 0.0
    stopped: int = 0  # finish_reason "repetition"
    ran_to_the_cap: int = 0  # finish_reason "length" with a repeating tail
    near: int = 0  # ... found only by the near-repeat finder
    suspected: int = 0  # ended by itself with a repeating tail: not counted as loops
    examples: list[str] = field(default_factory=list)
    suspected_examples: list[str] = field(default_factory=list)

    def add(self, where: str, record: dict[str, Any], tokens: int) -> None:
        reasoning = record.get("reasoning")
        content = record.get("content")
        text = (reasoning if isinstance(reasoning, str) else "") + (content if isinstance(content, str) else "")
        finish = record.get("finish_reason")
        verdict, found, near = judge(text, finish)
        if verdict == "suspected" and found is not None:
            self.suspected += 1
            if len(self.suspected_examples) < EXAMPLES:
                self.suspected_examples.append(f"{where}: {record.get('id')}: finish_reason {finish}, {_what(found)}")
        if verdict != "loop":
            return
        self.records += 1
        self.completion_tokens += tokens
        self.stopped += finish == REPETITION
        self.ran_to_the_cap += finish == "length" and (found is not None or near is not None)
        self.near += near is not None
        if found is not None and text:
            self.repeated_tokens += tokens * found.span / len(text)
        elif near is not None and text:
            self.repeated_tokens += tokens * near.chars * SHARE_OF_WINDOW / len(text)
        if len(self.examples) < EXAMPLES:
            what = _what(found) if found is not None else (
                f"{near.said_again:.0%} of its tail said again a moment before (a near loop)" if near is not None
                else "no repeating tail")
            self.examples.append(f"{where}: {record.get('id')}: finish_reason {finish}, {tokens:,} token(s), {what}")

    def summary(self, records: int, completion_tokens: int) -> dict[str, Any]:
        """The JSON of the section (`suspected` and `near` added to the earlier keys)."""
        def share(part: float, whole: int) -> float:
            return round(part / whole, 4) if whole else 0.0

        return {"records": self.records, "share": share(self.records, records),
                "completion_tokens": self.completion_tokens,
                "token_share": share(self.completion_tokens, completion_tokens),
                "repeated_tokens": round(self.repeated_tokens),
                "repeated_token_share": share(self.repeated_tokens, completion_tokens),
                "stopped": self.stopped, "ran_to_the_cap": self.ran_to_the_cap, "near": self.near,
                "suspected": self.suspected, "suspected_examples": self.suspected_examples,
                "examples": self.examples,
                "rule": {"max_block_chars": TEXT_RULE.max_block, "min_repeats": TEXT_RULE.min_repeats,
                         "min_span_chars": TEXT_RULE.min_span, "counter_span_chars": TEXT_RULE.counter_span,
                         "structured_span_chars": TEXT_RULE.structured_span}}


def _what(found: Repetition) -> str:
    return (f"a block of {found.block:,} characters ({KINDS[found.kind]}) repeated {found.repeats:.0f} times at the "
            f"end, e.g. {str(found.sample)[:60]!r}")


def finding(data: dict[str, Any]) -> str | None:
    """The warning line, when any reply loops (or is suspected to)."""
    suspected = (f"{data['suspected']:,} reply(s) ended by themselves (finish_reason stop) with a repeating "
                 "tail: only a suspicion (a list, a table or text asked for repeats too), not counted as loops"
                 ) if data.get("suspected") else ""
    if not data["records"]:
        return suspected or None
    stopped = (f"; {data['stopped']:,} were stopped (finish_reason repetition: they are not exported; a run "
               "with --redo-repetition generates them again)") if data["stopped"] else ""
    return (f"{data['records']:,} reply(s) ({data['share']:.1%}) loop: the end of the reply repeats one block; "
            f"they cost {data['completion_tokens']:,} completion tokens ({data['token_share']:.1%} of all), about "
            f"{data['repeated_tokens']:,} ({data['repeated_token_share']:.1%}) in the repeats themselves{stopped}"
            + (f". {suspected}" if suspected else ""))


def row(data: dict[str, Any]) -> str:
    """The audit table's `loops` cell."""
    suspected = f"; suspected (ended by themselves) {data['suspected']:,}" if data.get("suspected") else ""
    if not data["records"]:
        return "none" + suspected
    return (f"{data['records']:,} record(s) ({data['share']:.1%}); {data['completion_tokens']:,} tokens "
            f"({data['token_share']:.1%} of completion tokens), ~{data['repeated_tokens']:,} in the repeats "
            f"({data['repeated_token_share']:.1%}); run to max_tokens {data['ran_to_the_cap']:,}, "
            f"stopped {data['stopped']:,}{suspected}")
