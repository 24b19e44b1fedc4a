"""Prompt files -> validated `Prompt`s, as a stream: validation, duplicate ids, done-ID skipping, sharding.

Files are read line by line (plain, gzip or zstd, through `local.prompt_files`) and never held whole
in memory. A record whose id is already done is
recognised from the start of its raw line when it begins `{"id": "...`, so a resume over a million done
records does not parse them again. Every bad record becomes a `LineProblem` naming file and line;
nothing is dropped silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from client.core.errors import InputError
from client.core.ids import leading_id, line_id, not_utf8, shard_of
from client.core.records import LineProblem, Prompt
from client.local.prompt_files import prompt_lines
from prompts.schema import validate_prompt
from prompts.shapes import convert_command, converter_for


@dataclass(frozen=True, slots=True)
class Shard:
    """`--shard K/N`: this client takes the ids whose stable hash falls in shard K of N (K counts from 0)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        match = re.fullmatch(r"(\d+)/(\d+)", text.strip())
        if not match:
            raise ValueError(f"--shard must look like K/N (e.g. 0/4), got {text!r}")
        index, count = int(match.group(1)), int(match.group(2))
        if count < 1 or not 0 <= index < count:
            raise ValueError(f"--shard {text}: K must be in 0..N-1 and N at least 1")
        return cls(index, count)

    def owns(self, prompt_id: str) -> bool:
        if self.count == 1:
            return True
        return shard_of(prompt_id, self.count) == self.index

    @property
    def label(self) -> str:
        return f"{self.index}of{self.count}"


@dataclass
class SourceCounts:
    """What the reader saw; `records` counts every non-blank line."""

    records: int = 0
    invalid: int = 0
    duplicates: int = 0
    skipped_done: int = 0
    skipped_too_long: int = 0  # over the context in an earlier run (--retry-too-long sends them again)
    other_shards: int = 0
    yielded: int = 0
    problems: list[LineProblem] = field(default_factory=list)
    # The command that converts the first invalid record's file, when that record is in a known other shape
    # (prompts.shapes): what to say when no record at all is valid.
    convert_hint: str | None = None

    @property
    def valid(self) -> int:
        """Records that passed validation (done, too_long and other shards' records included)."""
        return self.records - self.invalid - self.duplicates

    def no_valid_record(self) -> str | None:
        """A plain sentence when the prompt set held no valid record at all, else None."""
        if self.records == 0:
            return "the prompt file(s) hold no record at all (empty, or blank lines only)"
        if self.valid == 0:
            hint = f". {self.convert_hint}" if self.convert_hint else ""
            return (f"none of the {self.records:,} record(s) in the prompt file(s) is valid "
                    f"({self.invalid:,} invalid, {self.duplicates:,} duplicate id(s)){hint}")
        return None


class PromptSource:
    """Iterates the prompts still to do. Not thread-safe; one consumer at a time."""

    def __init__(
        self,
        paths: Iterable[Path],
        done_ids: set[str],
        *,
        strict: bool = False,
        shard: Shard | None = None,
        on_problem: Callable[[LineProblem], None] | None = None,
        too_long_ids: set[str] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.done_ids = done_ids
        self.too_long_ids = too_long_ids or set()
        self.strict = strict
        self.shard = shard or Shard(0, 1)
        self.on_problem = on_problem
        self.counts = SourceCounts()
        self._seen: set[str] = set()

    def _problem(self, path: Path, line: int, message: str, *, duplicate: bool = False) -> None:
        problem = LineProblem(str(path), line, message)
        if self.strict:
            raise InputError(f"{problem} (stopping because of --strict)")
        if duplicate:
            self.counts.duplicates += 1
        else:
            self.counts.invalid += 1
        self.counts.problems.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)

    def _duplicate(self, path: Path, line: int, prompt_id: str) -> None:
        self._problem(path, line, f'duplicate id "{prompt_id}" (already seen earlier in the input)', duplicate=True)

    def __iter__(self) -> Iterator[Prompt]:
        for path in self.paths:
            yield from self._read(path)

    def _read(self, path: Path) -> Iterator[Prompt]:
        counts, seen, done = self.counts, self._seen, self.done_ids
        with prompt_lines(path) as handle:
            for number, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                counts.records += 1
                quick_id = leading_id(raw)
                if quick_id is not None and quick_id in done:
                    if quick_id in seen:
                        self._duplicate(path, number, quick_id)
                        continue
                    seen.add(quick_id)
                    counts.skipped_done += 1
                    continue
                prompt = self._parse(path, number, raw)
                if prompt is None:
                    continue
                if prompt.id in seen:
                    self._duplicate(path, number, prompt.id)
                    continue
                seen.add(prompt.id)
                if prompt.id in done:
                    counts.skipped_done += 1
                elif prompt.id in self.too_long_ids:
                    counts.skipped_too_long += 1
                elif not self.shard.owns(prompt.id):
                    counts.other_shards += 1
                else:
                    counts.yielded += 1
                    yield prompt

    def _parse(self, path: Path, number: int, raw: bytes) -> Prompt | None:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            self._problem(path, number, not_utf8(raw) or f"not valid JSON: {exc}")
            return None
        problem = validate_prompt(obj)
        if problem is not None:
            if self.counts.convert_hint is None and (converter := converter_for(obj)) is not None:
                self.counts.convert_hint = (f"{path} holds {converter.shape}: convert it first with "
                                            f"{convert_command(converter, path)}")
            self._problem(path, number, problem)
            return None
        assert isinstance(obj, dict)
        return Prompt(
            id=obj["id"],
            messages=obj["messages"],
            tools=obj.get("tools"),
            meta=obj.get("meta"),
            source=str(path),
            line=number,
        )


def count_remaining(paths: Iterable[Path], done_ids: set[str], shard: Shard | None = None) -> int:
    """A quick upper bound of the prompts left to do, for the ETA: ids only, no validation."""
    shard = shard or Shard(0, 1)
    seen: set[str] = set()
    remaining = 0
    for path in paths:
        with prompt_lines(path) as handle:
            for raw in handle:
                prompt_id = line_id(raw) if raw.strip() else None
                if prompt_id is None or prompt_id in done_ids or prompt_id in seen or not shard.owns(prompt_id):
                    continue
                seen.add(prompt_id)
                remaining += 1
    return remaining
