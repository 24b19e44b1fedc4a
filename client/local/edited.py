"""Done prompts edited since their result was written: found by the `prompt_sha256` each result records
(client.core.records), and, when asked, their old results taken out of the local segments so that the
run generates them again.

A result's prompt is its `conversation_id` with --turns all, else its `id`. Results written before the
digest was recorded cannot be told apart and are counted as unchecked. Everything here is blocking
(whole segments and prompt files are read): call it in a thread, and only when a prompt file changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from client.core.ids import line_id
from client.core.records import prompt_sha256
from client.local.prompt_files import prompt_lines
from client.local.segment_rewrite import rewrite_segment


@dataclass(frozen=True, slots=True)
class EditedPrompt:
    """A done prompt whose line now differs from the one its result answers."""

    id: str
    where: str  # FILE:LINE of the prompt as it is now

    def __str__(self) -> str:
        return f"{self.id} ({self.where})"


@dataclass
class EditedScan:
    edited: list[EditedPrompt] = field(default_factory=list)
    unchecked: int = 0  # results without a prompt digest (written by an older client)


def source_id(record: dict[str, object]) -> str | None:
    """The prompt id a result answers."""
    value = record.get("conversation_id", record.get("id"))
    return value if isinstance(value, str) else None


def _records(segments_dir: Path) -> Iterator[dict[str, object]]:
    for segment in sorted(segments_dir.glob("*.jsonl")) if segments_dir.is_dir() else []:
        with segment.open("rb") as handle:
            for raw in handle:
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue  # a torn tail; the ledger scan has already reported it
                if isinstance(record, dict):
                    yield record


def recorded_digests(records: Iterable[dict[str, object]], scan: EditedScan) -> dict[str, str]:
    """Prompt id -> the prompt digest its results recorded (the latest result's, with --turns all)."""
    digests: dict[str, str] = {}
    for record in records:
        prompt_id, digest = source_id(record), record.get("prompt_sha256")
        if prompt_id is None:
            continue
        if isinstance(digest, str):
            digests[prompt_id] = digest
        else:
            scan.unchecked += 1
    return digests


def prompt_digests(paths: Iterable[Path], wanted: Callable[[str], bool]) -> Iterator[tuple[str, str, str]]:
    """(id, FILE:LINE, prompt_sha256 of its content) of every prompt line whose id `wanted` accepts; the id
    is read from the raw line first, so only those lines are parsed. Bad lines are the source's to report."""
    for path in paths:
        with prompt_lines(path) as handle:
            for number, raw in enumerate(handle, start=1):
                prompt_id = line_id(raw) if raw.strip() else None
                if prompt_id is None or not wanted(prompt_id):
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    yield prompt_id, f"{path}:{number}", prompt_sha256(obj.get("messages"), obj.get("tools"),
                                                                      obj.get("meta"))


def compare_prompts(paths: Iterable[Path], digests: dict[str, str], scan: EditedScan) -> None:
    """Add to `scan` every prompt of `paths` whose content no longer has its recorded digest."""
    for prompt_id, where, now in prompt_digests(paths, digests.__contains__):
        if now != digests.pop(prompt_id):
            scan.edited.append(EditedPrompt(prompt_id, where))


def find_edited(prompt_paths: Iterable[Path], segments_dir: Path) -> EditedScan:
    """The done prompts of `prompt_paths` edited since the results in `segments_dir` were written."""
    scan = EditedScan()
    digests = recorded_digests(_records(segments_dir), scan)
    compare_prompts(prompt_paths, digests, scan)
    return scan


def drop_results(segments_dir: Path, prompt_ids: set[str]) -> list[str]:
    """Take the results of `prompt_ids` out of the local segments; returns the result ids dropped."""
    def answers_one(line: bytes) -> bool:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        return isinstance(record, dict) and source_id(record) in prompt_ids

    dropped: list[str] = []
    for segment in sorted(segments_dir.glob("*.jsonl")) if segments_dir.is_dir() else []:
        dropped.extend(rewrite_segment(segment, answers_one).dropped)
    return dropped
