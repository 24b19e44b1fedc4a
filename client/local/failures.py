"""The failures files of earlier runs, read back: which prompts are known to be longer than the context
(`too_long`) or to fill the training window alone (`fills_window`).

A failure line is a FailureRecord (docs/data-contracts.md). Only those two permanent classes are read
here: every other failure is retried by the next run simply because its id is not in the done ledger.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from client.local.sink import FAILURES_DIR

TOO_LONG = "too_long"
FILLS_WINDOW = "fills_window"
_WINDOW_IN_MESSAGE = re.compile(r"--train-window (\d+)")


def _filled(record: dict[str, object]) -> int | None:
    """The window a `fills_window` prompt filled: its `train_window`, or (older records) the figure in its
    message; None when neither says."""
    window = record.get("train_window")
    if type(window) is int:
        return window
    found = _WINDOW_IN_MESSAGE.search(str(record.get("last_error", "")))
    return int(found.group(1)) if found else None


def latest_failures(out_dir: Path) -> dict[str, tuple[str, int | None]]:
    """Per failed id, its last recorded failure: the error class and (fills_window) the window it filled."""
    latest: dict[str, tuple[str, int | None]] = {}
    folder = out_dir / FAILURES_DIR
    if not folder.is_dir():
        return latest
    for path in sorted(folder.glob("failures-*.jsonl")):  # run ids sort by start time
        with path.open("rb") as handle:
            for raw in handle:
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a line torn by a crash; its prompt is simply retried
                if isinstance(record, dict) and isinstance(record.get("id"), str):
                    latest[record["id"]] = (str(record.get("error_class", "")), _filled(record))
    return latest


def read_too_long_ids(out_dir: Path, train_window: int | None = None) -> set[str]:
    """Ids whose last recorded failure is `too_long`, or `fills_window` for a window at least as wide as
    `train_window` (a later, other failure of the same id wins). A prompt that filled a narrower window, or
    any window when the run has none now, may fit: it is sent again."""

    def still_fills(window: int | None) -> bool:
        return train_window is not None and (window is None or window >= train_window)

    return {prompt_id for prompt_id, (error_class, window) in latest_failures(out_dir).items()
            if error_class == TOO_LONG or (error_class == FILLS_WINDOW and still_fills(window))}
