"""The audit's streaming pass: one small update per result record, then a frozen summary.

Memory stays flat in the number of records: lengths go into an `array('i')` and ids into an
`array('Q')` of 64-bit hashes; the exactly-once check sorts and merges the hashes of the results and of
the prompt set, and only when something is wrong does a second, id-only pass name a few examples.
"""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from client.audit.accept import AcceptLengths
from client.audit.loops import Loops
from client.core.ids import id_hash, leading_id
from client.core.window_count import record_miscount
from client.local.edited import prompt_digests
from client.local.prompt_files import prompt_lines, resolve_prompt_files
from client.results.reader import ReadReport, iter_lines, iter_records
from client.results.rules import (
    TRUNCATED_CALL,
    continued_shares,
    cut_by_length,
    is_stub,
    judge_tool_call,
    token_parts,
    tool_schemas,
    usage_int,
)
from prompts.schema import validate_prompt

EXAMPLES = 5



@dataclass
class EndpointMix:
    records: int = 0
    tokens: int = 0
    stubs: int = 0
    truncated: int = 0


def _cut_by_window(record: dict[str, Any]) -> bool:
    """A reply that ended at its --train-window room, below the run's --max-tokens: the window's cut."""
    window, sampling = record.get("train_window"), record.get("sampling")
    if not isinstance(window, dict) or not isinstance(sampling, dict):
        return False
    room, cap = window.get("max_tokens"), sampling.get("max_tokens")
    return isinstance(room, int) and isinstance(cap, int) and room < cap


@dataclass
class Scan:
    """Mutable counters of one pass over the results."""

    short_tokens: int
    records: int = 0
    lengths: array[int] = field(default_factory=lambda: array("i"))
    ids: array[int] = field(default_factory=lambda: array("Q"))  # per prompt: a finished conversation counts once
    event_ids: array[int] = field(default_factory=lambda: array("Q"))  # --turns all: every event
    finish: Counter[str] = field(default_factory=Counter)
    stub_pattern: int = 0
    short: int = 0
    thinking_on: int = 0
    empty_reasoning: int = 0
    no_usage: int = 0
    with_ids: int = 0  # records that carry the server's completion_token_ids
    reasoning_tokens: int = 0
    content_tokens: float = 0.0
    tool_tokens: float = 0.0
    records_with_calls: int = 0
    tool_calls: int = 0
    bad_calls: Counter[str] = field(default_factory=Counter)
    bad_call_examples: list[str] = field(default_factory=list)
    window_cuts: int = 0  # `length` records whose max_tokens was the training window's room (not damage)
    truncated_calls: int = 0  # the last call of a `length` record, cut off by max_tokens: not invalid
    truncated_call_examples: list[str] = field(default_factory=list)
    stub_examples: list[str] = field(default_factory=list)
    models: Counter[str] = field(default_factory=Counter)
    endpoints: dict[str, EndpointMix] = field(default_factory=dict)
    window_miscounts: int = 0  # --train-window counts that disagree with the reply's usage
    window_miscount_examples: list[str] = field(default_factory=list)
    diverged_field: int = 0
    diverged: int = 0
    conversation_events: int = 0
    samplings: Counter[bytes] = field(default_factory=Counter)  # canonical sampling block -> records
    # --sampling-plan: (meta.source, rule, setting drawn) -> records (client.audit.plan_mix)
    plan_draws: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    accept: AcceptLengths = field(default_factory=AcceptLengths)  # MTP accept length, where records carry `spec`
    loops: Loops = field(default_factory=Loops)  # replies whose end repeats one block
    continued: int = 0  # replies continued from their exact ids (client.run --extend)
    continued_kept: int = 0  # their tokens made by earlier attempts
    continued_generated: int = 0  # their tokens made by the last attempt
    continued_broken: list[str] = field(default_factory=list)  # `continued` that does not describe the reply
    # id hash of the prompt a result answers -> the first 64 bits of the prompt_sha256 it recorded
    prompt_digests: dict[int, int] = field(default_factory=dict)

    def duplicate_events(self) -> int:
        """Multi-turn events written more than once (extra lines)."""
        ordered = sorted(self.event_ids)
        return sum(1 for a, b in itertools.pairwise(ordered) if a == b)

    def add(self, where: str, record: dict[str, Any]) -> None:
        self.records += 1
        self._ids(record)
        tokens = usage_int(record.get("usage"), "completion_tokens")
        if tokens is None:
            self.no_usage += 1
            tokens = 0
        self.lengths.append(tokens)
        self.with_ids += isinstance(record.get("completion_token_ids"), list)
        finish = record.get("finish_reason")
        finish_name = finish if isinstance(finish, str) else "none"
        self.finish[finish_name] += 1
        self._window(where, record, finish_name)
        reasoning = record.get("reasoning") or ""
        calls = record.get("tool_calls") or []
        stub_like = self._stubs(where, record, tokens, reasoning, calls)
        self._sampling(record, reasoning)
        parts = token_parts(record)
        self.reasoning_tokens += parts[0]
        self.content_tokens += parts[1]
        self.tool_tokens += parts[2]
        if calls:
            self._check_calls(where, record, calls)
        model = record.get("model")
        self.models[model if isinstance(model, str) else "(none)"] += 1
        self._endpoint(record, tokens, stub_like, finish_name)
        self.accept.add(record)
        self.loops.add(where, record, tokens)
        self._continued(where, record)
        if "diverged" in record:
            self.diverged_field += 1
            self.diverged += bool(record["diverged"])

    def _continued(self, where: str, record: dict[str, Any]) -> None:
        shares = continued_shares(record)
        if isinstance(shares, str):
            self.continued_broken.append(f"{where}: {record['id']}: {shares}")
        elif shares is not None:
            self.continued += 1
            self.continued_kept += shares[0]
            self.continued_generated += shares[1]

    def _ids(self, record: dict[str, Any]) -> None:
        """The prompt the record answers (for exactly-once), its event (multi-turn) and the prompt's digest."""
        conversation = record.get("conversation_id")
        if isinstance(conversation, str):
            # A multi-turn event: the conversation is one prompt, done once its final (`!`) event is written.
            self.event_ids.append(id_hash(record["id"]))
            self.conversation_events += 1
            if record["id"].endswith("!"):
                self.ids.append(id_hash(conversation))
        else:
            self.ids.append(id_hash(record["id"]))
        digest = record.get("prompt_sha256")
        if isinstance(digest, str) and len(digest) >= 16:
            self.prompt_digests[id_hash(conversation if isinstance(conversation, str) else record["id"])] = \
                int(digest[:16], 16)

    def _stubs(self, where: str, record: dict[str, Any], tokens: int, reasoning: str, calls: list[Any]) -> bool:
        """Counts a stub-like reply (the 'OK.' pattern, or short without a tool call); True when it is one."""
        content = record.get("content") or ""
        stub = is_stub(reasoning, content, bool(calls))
        short = not calls and tokens < self.short_tokens
        self.stub_pattern += stub
        self.short += short
        if (stub or short) and len(self.stub_examples) < EXAMPLES:
            self.stub_examples.append(f"{where}: {record['id']}: {tokens} token(s), content {content[:40]!r}")
        return stub or short

    def _sampling(self, record: dict[str, Any], reasoning: str) -> None:
        sampling = record.get("sampling")
        self.samplings[orjson.dumps(settings_key(sampling), option=orjson.OPT_SORT_KEYS)] += 1
        plan = sampling.get("plan") if isinstance(sampling, dict) else None
        if isinstance(plan, dict):
            meta = record.get("meta")
            source = meta.get("source") if isinstance(meta, dict) else None
            self.plan_draws[(str(source) if source is not None else "(none)", str(plan.get("rule") or ""),
                             str(plan.get("setting")))] += 1
        if isinstance(sampling, dict) and sampling.get("enable_thinking") is True:
            self.thinking_on += 1
            self.empty_reasoning += not reasoning.strip()

    def _endpoint(self, record: dict[str, Any], tokens: int, stub_like: bool, finish_name: str) -> None:
        endpoint = str(record.get("endpoint") or "(none)")
        mix = self.endpoints.get(endpoint)
        if mix is None:
            mix = self.endpoints[endpoint] = EndpointMix()
        mix.records += 1
        mix.tokens += tokens
        mix.stubs += stub_like
        mix.truncated += finish_name == "length"

    def _window(self, where: str, record: dict[str, Any], finish_name: str) -> None:
        """--train-window: a count the reply's usage contradicts, or a reply cut at the window's room."""
        miscount = record_miscount(record)
        if miscount is not None:
            self.window_miscounts += 1
            if len(self.window_miscount_examples) < EXAMPLES:
                self.window_miscount_examples.append(
                    f"{where}: {record['id']}: counted {miscount[0]:,} prompt tokens for the window, usage says "
                    f"{miscount[1]:,}")
        elif finish_name == "length" and _cut_by_window(record):
            self.window_cuts += 1

    def sampling_mix(self) -> list[tuple[dict[str, Any], int]]:
        """Each distinct sampling block of the results with its record count, most records first."""
        return [(orjson.loads(block) or {}, count) for block, count in self.samplings.most_common()]

    def _check_calls(self, where: str, record: dict[str, Any], calls: list[Any]) -> None:
        self.records_with_calls += 1
        schemas = tool_schemas(record.get("tools"))
        finish = record.get("finish_reason")
        for index, call in enumerate(calls):
            self.tool_calls += 1
            problem = judge_tool_call(call, schemas, cut_off=cut_by_length(finish, index, len(calls)))
            if problem is None:
                continue
            if problem[0] == TRUNCATED_CALL:
                self.truncated_calls += 1
                examples = self.truncated_call_examples
            else:
                self.bad_calls[problem[0]] += 1
                examples = self.bad_call_examples
            if len(examples) < EXAMPLES:
                examples.append(f"{where}: {record['id']}: {problem[1]}")


def settings_key(sampling: Any) -> Any:
    """What makes two records' settings the same: each request's own `seed` is drawn per prompt, and under a
    sampling plan the plan itself (its name and digest) is the setting, whatever each prompt drew."""
    if not isinstance(sampling, dict):
        return sampling
    plan = sampling.get("plan")
    if isinstance(plan, dict):
        return {"plan": {"name": plan.get("name"), "sha256": plan.get("sha256")}}
    return {key: value for key, value in sampling.items() if key != "seed"}


def mixed_settings(mix: list[tuple[dict[str, Any], int]]) -> str:
    """`mixed settings: ...` naming, for each sampling block, only the fields that differ between blocks."""
    keys = sorted({key for block, _ in mix for key in block})
    varying = [key for key in keys if len({orjson.dumps(block.get(key)) for block, _ in mix}) > 1]
    parts = []
    for block, count in mix:
        label = ", ".join(f"{key}={orjson.dumps(block[key]).decode()}" if key in block else f"{key} absent"
                          for key in varying)
        parts.append(f"{label}: {count:,} record(s)")
    return (f"mixed settings: the results were generated with {len(mix)} different sampling blocks ("
            + "; ".join(parts) + "); run.json's history says when the settings changed")


@dataclass(frozen=True, slots=True)
class IdCheck:
    """Exactly-once against the prompt set; counts of distinct ids, with a few named examples."""

    prompts: int
    prompt_duplicates: int
    missing: int
    duplicated: int
    duplicate_lines: int
    unknown: int
    examples: dict[str, list[str]]
    edited: int = 0  # done prompts whose content differs from the one their result answers
    invalid_prompts: int = 0  # prompt lines the run skips as invalid: not in the set, so never missing
    redo_advice: str = ""  # what to do about edited prompts, for this kind of location


def scan_results(location: str, short_tokens: int, s3_endpoint_url: str | None = None) -> tuple[Scan, ReadReport]:
    scan = Scan(short_tokens=short_tokens)
    report = ReadReport()
    for item, record in iter_records(location, report, s3_endpoint_url=s3_endpoint_url):
        scan.add(f"{item.where}:{item.line}", record)
    return scan, report


def _prompt_ids(paths: Iterable[Path], invalid: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """(id, FILE:LINE) of every valid record of the prompt files. A line the run skips as invalid (not JSON,
    or not a PromptRecord: `prompts.schema.validate_prompt`, the run's own rule) is no prompt of the set:
    its FILE:LINE and problem go to `invalid`, and it is never counted as missing."""
    for path in paths:
        with prompt_lines(path) as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    problem: str | None = f"not valid JSON: {exc}"
                else:
                    problem = validate_prompt(obj)
                if problem is not None:
                    if invalid is not None:
                        invalid.append(f"{path}:{number}: {problem}")
                    continue
                yield obj["id"], f"{path}:{number}"


def _result_ids(location: str, s3_endpoint_url: str | None) -> Iterator[tuple[str, str]]:
    for item in iter_lines(location, ReadReport(), s3_endpoint_url=s3_endpoint_url):
        prompt_id = leading_id(item.raw)
        if prompt_id is None:
            try:
                obj = orjson.loads(item.raw)
            except orjson.JSONDecodeError:
                continue
            prompt_id = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
            if prompt_id is None:
                continue
        yield prompt_id, f"{item.where}:{item.line}"


def check_ids(location: str, result_ids: array[int], prompt_paths: list[Path],
              s3_endpoint_url: str | None = None) -> IdCheck:
    prompt_paths = resolve_prompt_files(prompt_paths).paths
    invalid: list[str] = []
    prompt_hashes = array("Q", (id_hash(i) for i, _ in _prompt_ids(prompt_paths, invalid)))
    prompts = sorted(prompt_hashes)
    results = sorted(result_ids)
    del prompt_hashes
    prompt_duplicates = sum(1 for a, b in itertools.pairwise(prompts) if a == b)
    missing, duplicated, unknown, duplicate_lines = _merge(prompts, results)
    examples: dict[str, list[str]] = {}
    if missing:
        examples.update(_name(_prompt_ids(prompt_paths), {"missing": set(missing[:EXAMPLES])}))
    if duplicated or unknown:
        examples.update(_name(_result_ids(location, s3_endpoint_url), {"duplicated": set(duplicated[:EXAMPLES]),
                                                      "unknown": set(unknown[:EXAMPLES])}))
    if invalid:
        examples["invalid_prompts"] = invalid[:EXAMPLES]
    return IdCheck(len(prompts) - prompt_duplicates, prompt_duplicates, len(missing), len(duplicated),
                   duplicate_lines, len(unknown), {k: v for k, v in examples.items() if v},
                   invalid_prompts=len(invalid))


def _merge(prompts: list[int], results: list[int]) -> tuple[list[int], list[int], list[int], int]:
    """(missing, duplicated, unknown, extra lines of the duplicated) from one pass over both sorted hash
    lists: each distinct hash once, so memory stays that of the two lists."""
    missing: list[int] = []
    unknown: list[int] = []
    duplicated: list[int] = []
    duplicate_lines = 0
    i = j = 0
    while i < len(prompts) or j < len(results):
        if j >= len(results) or (i < len(prompts) and prompts[i] < results[j]):
            missing.append(prompts[i])
            i = _skip(prompts, i, prompts[i])
            continue
        value = results[j]
        after = _skip(results, j, value)
        if after - j > 1:
            duplicated.append(value)
            duplicate_lines += after - j - 1
        j = after
        if i < len(prompts) and prompts[i] == value:
            i = _skip(prompts, i, value)
        else:
            unknown.append(value)
    return missing, duplicated, unknown, duplicate_lines


def _skip(ordered: list[int], start: int, value: int) -> int:
    """The index past the run of `value` that starts at `start` (a sorted list)."""
    end = start
    while end < len(ordered) and ordered[end] == value:
        end += 1
    return end


def edited_prompts(prompt_paths: list[Path], digests: dict[int, int]) -> tuple[int, list[str]]:
    """(how many, a few `id (FILE:LINE)`) of the prompts whose content differs from the digest their
    result recorded: edited after the result was written, so the result answers the old prompt."""
    count = 0
    examples: list[str] = []
    paths = resolve_prompt_files(prompt_paths).paths
    for prompt_id, where, now in prompt_digests(paths, lambda prompt_id: id_hash(prompt_id) in digests):
        if int(now[:16], 16) != digests[id_hash(prompt_id)]:
            count += 1
            if len(examples) < EXAMPLES:
                examples.append(f"{prompt_id} ({where})")
    return count, examples


def _name(pairs: Iterator[tuple[str, str]], wanted: dict[str, set[int]]) -> dict[str, list[str]]:
    """Up to EXAMPLES `id (FILE:LINE)` strings per kind, for the hashes each kind wants."""
    found: dict[str, list[str]] = {kind: [] for kind, hashes in wanted.items() if hashes}
    for prompt_id, where in pairs:
        value = id_hash(prompt_id)
        for kind, names in found.items():
            if value in wanted[kind] and len(names) < EXAMPLES:
                names.append(f"{prompt_id} ({where})")
        if all(len(names) >= EXAMPLES for names in found.values()):
            break
    return found
