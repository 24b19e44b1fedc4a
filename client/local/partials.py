"""`OUT/partials/`: the replies in flight under `--continue-replies`, kept so that a run that ends before they
do (Ctrl-C, a crash, kill -9) leaves their exact ids to the next run, which continues them instead of
generating them again (client.engine.partials).

One file per reply in flight, appended to, never rewritten, so each id is written once however long the
reply: a first line `{"id", "key", "prompt_ids"}` (`key`: the digest of the prompt's content and its
sampling; a partial of an edited prompt or other settings is not continued), then lines `{"attempt", "ids"}`
with the ids that attempt added since the last line, and `{"finish"}` when the server ended the reply before
its record was written. A line torn by a kill is left out when read: its ids are generated again. A file
goes when its reply is written. Blocking: call from a thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from client.core.errors import map_write_error
from client.core.records import ContinuedPart

PARTIALS_DIR = "partials"


@dataclass(frozen=True, slots=True)
class SavedReply:
    prompt_id: str
    key: str
    prompt_ids: list[int]
    ids: list[int]
    parts: list[ContinuedPart]
    finish: str | None = None  # the server ended it ("stop", "length"), and its record was not written yet


@dataclass(frozen=True, slots=True)
class Append:
    """What one save adds to a reply's file: its first line when it has none yet, then ids per attempt."""

    prompt_id: str
    header: dict[str, Any] | None
    chunks: list[tuple[int, list[int]]] = field(default_factory=list)  # (attempt, ids it added)
    finish: str | None = None


def _read(raw: bytes) -> SavedReply | None:
    lines = raw.split(b"\n")
    try:
        head = orjson.loads(lines[0])
        prompt_id, key, prompt_ids = str(head["id"]), str(head["key"]), [int(i) for i in head["prompt_ids"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    ids: list[int] = []
    parts: list[ContinuedPart] = []
    finish = None
    for line in lines[1:]:
        try:
            doc = orjson.loads(line)
            if "finish" in doc:
                finish = doc["finish"] if doc["finish"] in ("stop", "length") else None
                continue
            attempt, new = int(doc["attempt"]), [int(i) for i in doc["ids"]]
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            break  # a torn last line: what it held is generated again
        if parts and parts[-1]["attempt"] == attempt:
            parts[-1] = ContinuedPart(attempt=attempt, tokens=parts[-1]["tokens"] + len(new))
        else:
            parts.append(ContinuedPart(attempt=attempt, tokens=len(new)))
        ids.extend(new)
    return SavedReply(prompt_id, key, prompt_ids, ids, parts, finish)


class PartialStore:
    def __init__(self, out_dir: Path) -> None:
        self.folder = out_dir / PARTIALS_DIR

    def _path(self, prompt_id: str) -> Path:
        return self.folder / (hashlib.sha256(prompt_id.encode()).hexdigest()[:32] + ".jsonl")

    def load(self, done_ids: set[str]) -> tuple[dict[str, SavedReply], int]:
        """The saved replies of prompts not done yet (with at least one id), and how many files were
        unreadable (removed: their prompts are generated again). Files of done prompts (a run that ended
        between writing a record and removing its file) are removed."""
        saved: dict[str, SavedReply] = {}
        unreadable = 0
        if not self.folder.is_dir():
            return saved, 0
        for path in sorted(self.folder.glob("*.jsonl")):
            found = _read(path.read_bytes())
            if found is None or found.prompt_id in done_ids or not found.ids:
                unreadable += found is None
                path.unlink(missing_ok=True)
                continue
            saved[found.prompt_id] = found
        return saved, unreadable

    def append(self, appends: list[Append]) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for item in appends:
                lines = [orjson.dumps(item.header)] if item.header is not None else []
                lines.extend(orjson.dumps({"attempt": attempt, "ids": ids}) for attempt, ids in item.chunks if ids)
                if item.finish is not None:
                    lines.append(orjson.dumps({"finish": item.finish}))
                if lines:
                    with self._path(item.prompt_id).open("ab") as handle:
                        handle.write(b"\n".join(lines) + b"\n")
        except OSError as exc:
            raise map_write_error(exc, f"cannot keep the replies in flight in {self.folder}: "
                                       f"{exc.strerror or exc}") from exc

    def remove(self, prompt_ids: list[str]) -> None:
        for prompt_id in prompt_ids:
            self._path(prompt_id).unlink(missing_ok=True)
