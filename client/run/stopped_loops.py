"""The run's side of `--redo-repetition`: results an older, eager loop stop ended (finish_reason
`repetition`) are taken out of the local segments, so that this run generates their prompts again under
the current stop (client.loops.repetition_rule: armed only past 90% of max_tokens). Such a result is never
exported, and under --turns all its conversation ended there. Called once, after run.json is recorded and
before the source is built, as --redo-edited is (client.run.edited_prompts)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson

from client.engine.turns import TurnLedger
from client.local.edited import drop_results, source_id
from client.run.console import say

REPETITION = "repetition"  # the finish_reason a loop stop writes (client.wire.endpoint)


def stopped_prompts(segments_dir: Path) -> set[str]:
    """The prompt ids with a result a loop stop ended (blocking: whole segments are read)."""
    found: set[str] = set()
    for segment in sorted(segments_dir.glob("*.jsonl")) if segments_dir.is_dir() else []:
        with segment.open("rb") as handle:
            for raw in handle:
                if b'"repetition"' not in raw:
                    continue  # most lines: no parse
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a torn tail; the ledger scan has already reported it
                if isinstance(record, dict) and record.get("finish_reason") == REPETITION:
                    prompt_id = source_id(record)
                    if prompt_id is not None:
                        found.add(prompt_id)
    return found


async def redo_stopped(out: Path, done_ids: set[str], *, ledger: TurnLedger | None) -> None:
    """Make the prompts whose result a loop stop ended not done (segments, `done_ids`, the turn ledger).
    --redo-repetition with --s3 is refused by the CLI."""
    if not done_ids:
        return
    began = time.perf_counter()
    prompt_ids = await asyncio.to_thread(stopped_prompts, out / "segments")
    if not prompt_ids:
        say(f"--redo-repetition: no result was stopped as a loop (checked in {time.perf_counter() - began:.1f}s)")
        return
    dropped = await asyncio.to_thread(drop_results, out / "segments", prompt_ids)
    done_ids.difference_update(dropped)
    if ledger is not None:
        ledger.finished.difference_update(prompt_ids)
        for prompt_id in prompt_ids:
            ledger.latest.pop(prompt_id, None)
    say(f"--redo-repetition: {len(prompt_ids):,} prompt(s) had a result stopped as a loop (finish_reason "
        f"repetition); took their {len(dropped):,} result(s) out of the segments; they are generated again")
