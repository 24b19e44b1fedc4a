"""Build prompts/sample.jsonl, the sample prompt set, reproducibly.

This module owns how the sample is assembled: which hand-written pieces (prompts/sample_texts.py,
sample_tools.py, sample_scenarios.py, sample_dialogues.py) are combined, in what numbers per category
and in which order. It uses one seeded random.Random and no clock, network or environment, so the
same code always writes the same bytes; a test regenerates the file and compares.

    python -m prompts.make_sample            # rewrite prompts/sample.jsonl
    python -m prompts.make_sample --check    # exit 1 if the committed file is out of date
"""

from __future__ import annotations

import random
import string
import sys
from pathlib import Path
from typing import Any

import orjson

from argchecks.parser import ToolParser
from prompts import sample_texts as tx
from prompts.sample_dialogues import DIALOGUE_SYSTEM, DIALOGUES
from prompts.sample_scenarios import SCENARIOS, Scenario
from prompts.sample_tools import NO_TOOL_NEEDED, TOOL_SYSTEM, TOOLS
from prompts.schema import PromptRecord, validate_prompt

SEED = 20250314
DEFAULT_OUT = Path(__file__).with_name("sample.jsonl")
CATEGORIES = ("chat", "code", "tools", "multiturn")

Message = dict[str, Any]
Draft = tuple[str, list[Message], list[dict[str, Any]] | None]  # source, messages, tools


def _dress(
    r: random.Random,
    user: str | list[dict[str, str]],
    systems: tuple[str, ...],
    p_system: float,
    p_stub: float,
    role: str = "system",
) -> list[Message]:
    """A single-turn prompt, sometimes with a system prompt, sometimes ending in a stub reply to redo."""
    messages: list[Message] = []
    if r.random() < p_system:
        messages.append({"role": role, "content": r.choice(systems)})
    messages.append({"role": "user", "content": user})
    if r.random() < p_stub:
        messages.append({"role": "assistant", "content": r.choice(tx.STUB_REPLIES)})
    return messages


def chat_prompts(r: random.Random) -> list[list[Message]]:
    users: list[str | list[dict[str, str]]] = []
    for concept, audience in zip(r.sample(tx.CONCEPTS, 14), r.choices(tx.AUDIENCES, k=14), strict=True):
        users.append(f"Explain {concept} to {audience}.")
    for a, b, context in r.sample(tx.COMPARISONS, 8):
        users.append(f"What are the pros and cons of {a} versus {b} {context}?")
    for form, subject in r.sample(tx.WRITING, 10):
        users.append(f"Write {form} about {subject}.")
    users.extend(r.sample(tx.HOW_TO, 10))
    for city in r.sample(tx.CITIES, 8):
        days, who, budget = r.randint(2, 6), r.choice(tx.TRAVELLERS), r.choice(tx.BUDGETS)
        users.append(f"Plan a {days}-day trip to {city} for {who} on a {budget} budget.")
    for k in range(8):
        users.append(_word_problem(r, k % 4))
    for passage in (*tx.PASSAGES, *r.sample(tx.PASSAGES, 2)):
        n = r.choice((3, 4, 5))
        instruction = f"Summarize the following in {n} bullet points."
        # Half of these use the content-parts form, the way multi-part client UIs send them.
        if r.random() < 0.5:
            users.append([{"type": "text", "text": instruction}, {"type": "text", "text": passage}])
        else:
            users.append(f"{instruction}\n\n{passage}")
    for sentence, lang in zip(r.sample(tx.SENTENCES, 8), r.choices(tx.LANGUAGES, k=8), strict=True):
        users.append(f'Translate into {lang}: "{sentence}"')
    return [_dress(r, u, tx.CHAT_SYSTEM, 0.3, 0.12) for u in users]


def _word_problem(r: random.Random, kind: int) -> str:
    if kind == 0:
        p, rate, years = r.choice((1000, 2500, 5000, 12000)), r.choice((3, 4.5, 6, 7.2)), r.randint(3, 20)
        return (
            f"If I invest ${p:,} at {rate}% annual interest compounded monthly, how much will I have "
            f"after {years} years? Show the steps."
        )
    if kind == 1:
        n1, n2, grams = r.choice((4, 6, 8)), r.choice((3, 10, 15)), r.choice((250, 300, 480))
        return f"A recipe for {n1} people needs {grams} g of flour. How much flour do I need for {n2} people?"
    if kind == 2:
        km, h, m = r.randint(120, 900), r.randint(1, 8), r.choice((10, 15, 20, 35, 45))
        return f"A car travels {km} km in {h} hours and {m} minutes. What is its average speed in km/h?"
    k = r.randint(2, 10)
    return f"What is the probability of rolling at least one six in {k} rolls of a fair die? Explain."


def code_prompts(r: random.Random) -> list[list[Message]]:
    users: list[str] = []
    for cell in r.sample(range(len(tx.CODE_TASKS) * len(tx.CODE_LANGUAGES)), 26):
        task, lang = tx.CODE_TASKS[cell // len(tx.CODE_LANGUAGES)], tx.CODE_LANGUAGES[cell % len(tx.CODE_LANGUAGES)]
        users.append(f"Write a {lang} function that {task}. {r.choice(tx.CODE_EXTRAS)}".strip())
    for lang, symptom, code in tx.BUGGY:
        users.append(f"This {lang} code {symptom}. What's wrong, and how do I fix it?\n\n```{lang}\n{code}\n```")
    for lang, code in tx.EXPLAIN:
        users.append(f"What does this {lang} code do? Walk me through it.\n\n```{lang}\n{code}\n```")
    for request in tx.SQL_REQUESTS:
        users.append(f"Given the tables {tx.SQL_SCHEMA}, write a PostgreSQL query that {request}.")
    users.extend(tx.SHELL_TASKS)
    users.extend(tx.DESIGN)
    for lang in r.sample(("Go", "Rust", "TypeScript", "Java"), 4):
        users.append(f"Convert this Python function to idiomatic {lang}:\n\n```python\n{tx.CONVERT_SNIPPET}\n```")
    # Qwen3.6's own template refuses a `developer` turn ("Unexpected message role."), so the set writes every
    # instruction as `system`; the role is still drawn so that the rest of the set stays as it was.
    return [_dress(r, u, tx.CODE_SYSTEM, 0.35, 0.1, _system_role(r.choice(("system", "developer")))) for u in users]


def _system_role(_drawn: str) -> str:
    return "system"


def _call_id(r: random.Random) -> str:
    return "call_" + "".join(r.choices(string.ascii_letters + string.digits, k=24))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def tool_prompt(r: random.Random, scenario: Scenario, shape: int) -> tuple[list[Message], list[dict[str, Any]]]:
    """shape 0: the request alone; 1: calls and results, the model answers; 2: also the answer, redone."""
    messages: list[Message] = []
    if r.random() < 0.5:
        agent = {"read_file", "run_shell_command", "list_directory"} & set(scenario.tools)
        messages.append({"role": "system", "content": TOOL_SYSTEM[2] if agent else r.choice(TOOL_SYSTEM[:2])})
    messages.append({"role": "user", "content": scenario.user})
    if shape >= 1:
        for step_no, step in enumerate(scenario.steps):
            calls = [
                {
                    "id": _call_id(r),
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(args).decode()},
                }
                for name, args, _ in step
            ]
            preamble = scenario.preamble if step_no == 0 else None
            messages.append({"role": "assistant", "content": preamble, "tool_calls": calls})
            for call, (_, _, result) in zip(calls, step, strict=True):
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": _as_text(result)})
    if shape == 2:
        messages.append({"role": "assistant", "content": scenario.answer})
    others = [name for name in TOOLS if name not in scenario.tools]
    names = list(scenario.tools) + r.sample(others, r.randint(0, 2))
    r.shuffle(names)
    return messages, [TOOLS[name] for name in names]


def tool_drafts(r: random.Random) -> list[Draft]:
    drafts: list[Draft] = []
    for i in range(68):
        # Walk every scenario through every shape so each appears cut at each point.
        scenario = SCENARIOS[i % len(SCENARIOS)](r)
        messages, tools = tool_prompt(r, scenario, (i // len(SCENARIOS)) % 3)
        drafts.append(("tools", messages, tools))
    for question in NO_TOOL_NEEDED:
        tools = [TOOLS[name] for name in r.sample(sorted(TOOLS), 3)]
        drafts.append(("tools", [{"role": "user", "content": question}], tools))
    return drafts


# (user turns, whether the prompt ends with the assistant's reply to the last one)
CUTS = ((2, False), (2, True), (3, True), (4, False))


def multiturn_prompts(r: random.Random) -> list[list[Message]]:
    prompts: list[list[Message]] = []
    for dialogue in DIALOGUES:
        for users, ends_with_reply in CUTS:
            messages: list[Message] = []
            if r.random() < 0.3:
                messages.append({"role": "system", "content": r.choice(DIALOGUE_SYSTEM)})
            for k in range(users):
                turn = dialogue[k]
                if isinstance(turn, str):
                    messages.append({"role": "user", "content": turn})
                    continue
                messages.append({"role": "user", "content": turn[0]})
                if k < users - 1 or ends_with_reply:
                    messages.append({"role": "assistant", "content": turn[1]})
            prompts.append(messages)
    return prompts


def build_records() -> list[PromptRecord]:
    r = random.Random(SEED)
    drafts: list[Draft] = [("chat", m, None) for m in chat_prompts(r)]
    drafts += [("code", m, None) for m in code_prompts(r)]
    drafts += tool_drafts(r)
    drafts += [("multiturn", m, None) for m in multiturn_prompts(r)]
    # Mixed order, so the first N lines are already a fair small sample.
    r.shuffle(drafts)
    records: list[PromptRecord] = []
    for n, (source, messages, tools) in enumerate(drafts, 1):
        record: dict[str, Any] = {"id": f"sample-{n:06d}", "messages": messages}
        if tools:
            record["tools"] = tools
        record["meta"] = {"source": source}
        problem = validate_prompt(record)
        if problem is not None:
            raise AssertionError(f"sample record {record['id']} is invalid: {problem}")
        records.append(record)  # type: ignore[arg-type]
    return records


def render(records: list[PromptRecord]) -> bytes:
    return b"".join(orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE) for rec in records)


def main(argv: list[str] | None = None) -> int:
    parser = ToolParser(
        prog="python -m prompts.make_sample",
        description="Write the sample prompt set (deterministic: same code, same bytes).",
        epilog="exit codes: 0 written or up to date; 1 --check found the file out of date; 2 bad arguments",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    data = render(build_records())
    if args.check:
        current = args.out.read_bytes() if args.out.exists() else b""
        if current != data:
            print(f"{args.out} is out of date; run python -m prompts.make_sample", file=sys.stderr)
            return 1
        return 0
    args.out.write_bytes(data)
    count = data.count(b"\n")
    print(f"wrote {count} prompts to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
