"""The run's side of the preflight: detect each server's kind, settle the field policy, say it once, warn of
an SGLang tool-call parser that loses text when it streams, and send one request in the run's payload shape
to every endpoint that answers (client.fleet.preflight)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from client.core.errors import AttemptError, ConfigError, RequestRejected
from client.core.human_out import note
from client.core.payload import RequestShape, SamplingSettings
from client.core.records import Prompt
from client.core.sampling_plan import SamplingPlan
from client.fleet.kinds import kind_of, known_names, none_of_known
from client.fleet.preflight import (
    PreflightResult,
    check_plan_fit,
    check_settings_fit,
    detect_kind,
    field_policy,
    preflight,
)
from client.fleet.token_ids import describe, effective_kind, id_request, ids_policy
from client.local.prompt_files import prompt_lines
from client.wire.endpoint import Endpoint


def say(message: str) -> None:
    """A line on stderr (stdout stays free for a tool's own output); lost, never raised, when stderr fails."""
    note(message)


# How far into the prompt set to look for a tool schema, so the preflight carries `tools` when the run will.
_TOOL_LOOKAHEAD_LINES = 500
PREFLIGHT_MESSAGE = "Reply with the single word OK."


def _check_counting(endpoints: Sequence[Endpoint], shape: RequestShape, window: int) -> None:
    cannot = [e.url for e in endpoints if shape.count_path(e.index) is None]
    if cannot:
        raise ConfigError(f"--train-window {window} needs every server to count a prompt's tokens as it renders "
                          f"it (SGLang /v1/tokenize, vLLM /tokenize); {', '.join(cannot)} is {none_of_known()} "
                          "(or was not ready at start in a mixed fleet). Pass --tokenizer DIR (the model's "
                          "tokenizer and chat template) to count on this host, leave those endpoints out, pass "
                          f"--compat {known_names()} if they are one, or run without --train-window.")


async def _count_once(answering: Sequence[Endpoint], shape: RequestShape, probe: Prompt, *,
                      counts_locally: bool, note: Callable[[str], None]) -> RequestShape:
    """One tokenize request per answering endpoint, so a server that refuses it stops the run at start. With
    `--tokenizer` (`counts_locally`), a server that has no such route (404, 405) is counted on this host
    instead: the shape returned has no count path for it."""
    body = orjson.dumps(shape.count_request(probe, probe.messages))
    paths = list(shape.count_paths)
    for endpoint in answering:
        path = shape.count_path(endpoint.index)
        if path is None:
            continue
        try:
            await endpoint.count_prompt(path, body)
        except AttemptError as exc:
            if counts_locally and isinstance(exc, RequestRejected) and exc.status in (404, 405):
                note(f"--train-window: {endpoint.url}{path} answers HTTP {exc.status}; its prompts are counted on "
                     "this host with --tokenizer")
                paths[endpoint.index] = None
                continue
            local = "" if counts_locally else ", or pass --tokenizer DIR to count on this host"
            raise ConfigError(f"--train-window: {endpoint.url}{path} did not count the preflight prompt's tokens "
                              f"({exc}); nothing was sent. Run without --train-window{local}, or use a server that "
                              "answers it (SGLang 0.5.23, vLLM).") from exc
    return dataclasses.replace(shape, count_paths=tuple(paths))


async def _tools_warnings(answering: Sequence[Endpoint], kinds: dict[str, str], note: Callable[[str], None]) -> None:
    """What each answering server's kind warns of when the prompts carry tools (SGLang: a lossy parser)."""
    checks = [(kind.tools_warning, e) for e in answering if (kind := kind_of(kinds.get(e.url, ""))).tools_warning]
    for warning in await asyncio.gather(*(check(endpoint) for check, endpoint in checks)):
        if warning is not None:
            note(warning)


def first_tools(paths: Sequence[Path]) -> list[dict[str, Any]] | None:
    """The tools of the first record near the start of the set that has any (bad lines are the source's to report)."""
    if not paths:
        return None
    with prompt_lines(paths[0]) as handle:
        for raw in itertools.islice(handle, _TOOL_LOOKAHEAD_LINES):
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            tools = record.get("tools") if isinstance(record, dict) else None
            if isinstance(tools, list) and tools:
                return tools
    return None


async def settle_fields(endpoints: Sequence[Endpoint], answering: Sequence[Endpoint], settings: SamplingSettings, *,
                        model: str, compat: str,
                        prompt_paths: Sequence[Path],
                        before_preflight: Callable[[RequestShape], Awaitable[None]] | None = None,
                        token_ids: str = "auto", note: Callable[[str], None] = say,
                        train_window: int | None = None, counts_locally: bool = False,
                        plan: SamplingPlan | None = None) -> RequestShape:
    """Kinds -> policy -> (--token-ids) each endpoint's id path -> preflight; the settled RequestShape.
    Raises ConfigError (exit 2) on a refusal, before any prompt is sent. `before_preflight` sees the shape
    before any request is sent (the run's settings check)."""
    kinds = dict(zip((e.url for e in answering),
                     await asyncio.gather(*(detect_kind(e) for e in answering)), strict=True))
    policy = field_policy(compat, list(kinds.values()))
    effective = {e.url: effective_kind(kinds.get(e.url), compat, policy) for e in endpoints}
    for endpoint in endpoints:
        endpoint.dialect = effective[endpoint.url].reply  # how its replies carry ids and MTP figures
    policy = ids_policy(policy, token_ids, {url: effective[url].name for url in kinds})
    shape = RequestShape(model, settings, policy,
                         tuple(id_request(e.url, effective[e.url], token_ids, policy) for e in endpoints),
                         tuple(effective[e.url].count_path for e in endpoints), plan)
    if train_window is not None and not counts_locally:
        _check_counting(endpoints, shape, train_window)
    check_settings_fit(settings, policy)
    check_plan_fit(shape.the_plan, policy)
    census = ", ".join(f"{kind} x{count}" for kind, count in sorted(Counter(kinds.values()).items()))
    extensions = ", ".join(sorted(policy.extensions)) or "none"
    note(f"servers: {census or 'none answering yet'}; --compat {compat}: extension fields sent: {extensions}")
    note(describe(token_ids, shape.ids))
    if before_preflight is not None:
        await before_preflight(shape)
    tools = await asyncio.to_thread(first_tools, list(prompt_paths))
    if tools:
        await _tools_warnings(answering, kinds, note)
    probe = Prompt(id="preflight", messages=[{"role": "user", "content": PREFLIGHT_MESSAGE}], tools=tools,
                   meta=None, source="preflight", line=0)

    def build(endpoint: Endpoint) -> dict[str, Any]:
        # Every field any of the plan's settings sends, so a server that refuses one refuses now.
        return shape.payload(probe, probe.messages, endpoint.index, sampling=shape.union_block(probe))

    results = await preflight(answering, build, kinds, policy, require_ids=token_ids == "on")
    if train_window is not None:
        shape = await _count_once(answering, shape, probe, counts_locally=counts_locally, note=note)
    passed = sum(result.ok for result in results)
    note(f"preflight: {passed} of {len(answering)} answering endpoint(s) took the run's request shape")
    if token_ids == "auto" and passed:
        note(ids_outcome([result for result in results if result.ok]))
    return shape


def ids_outcome(results: Sequence[PreflightResult]) -> str:
    """Under --token-ids auto, what the records will carry: the preflight answers say which servers give ids."""
    given = sum(result.ids for result in results)
    if given == len(results):
        return (f"--token-ids auto: the records will carry the servers' token ids (all {given} answering "
                "endpoint(s) gave them in the preflight)")
    if given == 0:
        return (f"--token-ids auto: the records will carry no token ids (none of the {len(results)} answering "
                "endpoint(s) gave them in the preflight); client.export re-renders their text with --tokenizer")
    return (f"--token-ids auto: records will carry token ids from {given} of {len(results)} answering endpoint(s) "
            "(those that gave them in the preflight); the rest are re-rendered by client.export")
