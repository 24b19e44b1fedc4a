"""The run's side of edited done prompts: when a prompt file changed since the recorded run, name the
done prompts whose line was edited (client.local.edited) and, with --redo-edited, take their old
results out so that this run generates them again. Called once, after run.json is recorded and before
the source is built."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from client.engine.turns import TurnLedger
from client.local.edited import EditedScan, drop_results, find_edited
from client.run.console import say

SHOWN = 5


def _examples(scan: EditedScan) -> str:
    shown = ", ".join(map(str, scan.edited[:SHOWN]))
    return shown + (f" and {len(scan.edited) - SHOWN:,} more" if len(scan.edited) > SHOWN else "")


async def check_edited(changed: list[Path], every: list[Path], out: Path, done_ids: set[str], *, redo: bool,
                       ledger: TurnLedger | None) -> None:
    """Report the edited done prompts of the `changed` prompt files (of `every` one with `redo`: an edit
    reported by an earlier run is recorded in run.json by then); with `redo`, make them not done
    (segments, `done_ids`, the turn ledger). --redo-edited with --s3 is refused by the CLI."""
    paths = every if redo else changed
    if not paths or not done_ids:
        return
    began = time.perf_counter()
    scan = await asyncio.to_thread(find_edited, paths, out / "segments")
    if scan.unchecked:
        say(f"note: {scan.unchecked:,} result(s) were written without a prompt digest (an older client): "
            "an edit of their prompts cannot be told")
    if not scan.edited:
        return
    took = time.perf_counter() - began
    what = f"{len(scan.edited):,} done prompt(s) were edited since their result was written: {_examples(scan)}"
    if not redo:
        say(f"warning: {what}. Their old results are kept; pass --redo-edited to generate them again "
            f"(checked in {took:.1f}s)")
        return
    prompt_ids = {e.id for e in scan.edited}
    dropped = await asyncio.to_thread(drop_results, out / "segments", prompt_ids)
    done_ids.difference_update(dropped)
    if ledger is not None:
        ledger.finished.difference_update(prompt_ids)
        for prompt_id in prompt_ids:
            ledger.latest.pop(prompt_id, None)
    say(f"{what}. --redo-edited: took their {len(dropped):,} old result(s) out of the segments; they are "
        "generated again")
