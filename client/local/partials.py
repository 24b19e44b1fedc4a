"""`OUT/partials/`: the replies in flight under `--continue-replies`, kept so that a run that ends before they
do (Ctrl-C, a crash, kill -9) leaves their exact ids to the next run, which continues them instead of
generating them again (client.engine.partials).

One small JSON file per prompt, replaced whole (a temporary file, then a rename: a reader never sees half
of one; a kill -9 loses at most what came since the last save): the prompt's id, the digest of its content
and its sampling (a partial of an edited prompt or other settings is not continued), the prompt's ids, the
ids so far and each attempt's share. Bounded: one file per reply in flight, each at most its max_tokens ids;
a file goes when its reply is written. Blocking: call from a thread.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from client.core.errors import map_write_error
from client.core.records import ContinuedPart

PARTIALS_DIR = "partials"


@dataclass(frozen=True, slots=True)
class SavedReply:
    prompt_id: str
    key: str  # the prompt's content digest and sampling, as the run computes them: equal, or not continued
    prompt_ids: list[int]
    ids: list[int]
    parts: list[ContinuedPart]
    finish: str | None = None  # the server ended it ("stop", "length"), and its record was not written yet

    def to_json(self) -> bytes:
        return orjson.dumps({"id": self.prompt_id, "key": self.key, "prompt_ids": self.prompt_ids, "ids": self.ids,
                             "parts": self.parts, "finish": self.finish})


def _from_json(raw: bytes) -> SavedReply | None:
    try:
        doc: Any = orjson.loads(raw)
        parts = [ContinuedPart(attempt=int(p["attempt"]), tokens=int(p["tokens"])) for p in doc["parts"]]
        finish = doc.get("finish")
        saved = SavedReply(str(doc["id"]), str(doc["key"]), [int(i) for i in doc["prompt_ids"]],
                           [int(i) for i in doc["ids"]], parts, finish if finish in ("stop", "length") else None)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    return saved if sum(p["tokens"] for p in saved.parts) == len(saved.ids) else None


class PartialStore:
    def __init__(self, out_dir: Path) -> None:
        self.folder = out_dir / PARTIALS_DIR

    def _path(self, prompt_id: str) -> Path:
        return self.folder / (hashlib.sha256(prompt_id.encode()).hexdigest()[:32] + ".json")

    def load(self, done_ids: set[str]) -> tuple[dict[str, SavedReply], int]:
        """The saved replies of prompts not done yet, and how many files were unreadable (removed: their
        prompts are generated again). Files of done prompts (a run that ended between writing a record and
        removing its partial) are removed."""
        saved: dict[str, SavedReply] = {}
        unreadable = 0
        if not self.folder.is_dir():
            return saved, 0
        for path in sorted(self.folder.glob("*.json")):
            found = _from_json(path.read_bytes())
            if found is None or found.prompt_id in done_ids:
                unreadable += found is None
                path.unlink(missing_ok=True)
                continue
            saved[found.prompt_id] = found
        for path in self.folder.glob("*.json.tmp"):
            path.unlink(missing_ok=True)
        return saved, unreadable

    def save(self, replies: list[SavedReply]) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            for reply in replies:
                path = self._path(reply.prompt_id)
                temporary = path.with_suffix(".json.tmp")
                temporary.write_bytes(reply.to_json())
                os.replace(temporary, path)
        except OSError as exc:
            raise map_write_error(exc, f"cannot keep the replies in flight in {self.folder}: "
                                       f"{exc.strerror or exc}") from exc

    def remove(self, prompt_ids: list[str]) -> None:
        for prompt_id in prompt_ids:
            self._path(prompt_id).unlink(missing_ok=True)
