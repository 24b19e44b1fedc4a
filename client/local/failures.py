"""The failures files of earlier runs, read back: which prompts are known to be longer than the context
(`too_long`) or to fill the training window alone (`fills_window`).

A failure line is a FailureRecord (README, data contracts). Only those two permanent classes are read
here: every other failure is retried by the next run simply because its id is not in the done ledger.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from client.local.sink import FAILURES_DIR

TOO_LONG = "too_long"
FILLS_WINDOW = "fills_window"


def read_too_long_ids(out_dir: Path) -> set[str]:
    """Ids whose last recorded failure is `too_long` or `fills_window` (a later, other failure of the same id
    wins)."""
    latest: dict[str, str] = {}
    folder = out_dir / FAILURES_DIR
    if not folder.is_dir():
        return set()
    for path in sorted(folder.glob("failures-*.jsonl")):  # run ids sort by start time
        with path.open("rb") as handle:
            for raw in handle:
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a line torn by a crash; its prompt is simply retried
                if isinstance(record, dict) and isinstance(record.get("id"), str):
                    latest[record["id"]] = str(record.get("error_class", ""))
    return {prompt_id for prompt_id, error_class in latest.items() if error_class in (TOO_LONG, FILLS_WINDOW)}
