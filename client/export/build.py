"""Results -> checked rows -> the parquet file: the part of `client.export` that needs the `export` extra.

Columns: `id` (string), `input_ids` (list<int32>), `loss_mask` (list<int8>: 0 on the prompt, 1 on the
completion), `seq_len` (int32). Rows are written in row groups as the results stream by, to OUT.part,
renamed to OUT at the end. This module owns the checks that decide whether a row is trusted and the
report's figures; how a record becomes tokens is `export_render`, the command line is `export_main`.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from client.core.ids import id_hash
from client.export.render import ChatTokenizer, RenderError, has_exact_ids, render_record

__all__ = ["SCHEMA", "ChatTokenizer", "ExportReport", "export", "summary"]
from client.results.reader import ReadReport, iter_records
from client.results.rules import usage_int

SCHEMA = pa.schema([
    ("id", pa.string()),
    ("input_ids", pa.list_(pa.int32())),
    ("loss_mask", pa.list_(pa.int8())),
    ("seq_len", pa.int32()),
])


@dataclass
class ExportReport:
    records: int = 0
    exported: int = 0
    exact: int = 0
    rendered: int = 0
    dropped_truncated: int = 0
    duplicates: int = 0
    completion_mismatch: int = 0
    prompt_mismatch: int = 0
    kept_mismatched: int = 0
    failed: int = 0
    without_ids: int = 0  # --require-exact-ids: records that would have been re-rendered
    written: bool = False  # OUT was written (not with --require-exact-ids and records without ids)
    tokens: int = 0
    problems: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def note(self, kind: str, where: str, detail: str) -> None:
        self.problems[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{where}: {detail}")

    @property
    def left_out(self) -> int:
        return self.records - self.exported - self.dropped_truncated


def _check(record: dict[str, Any], prompt: list[int], completion: list[int]) -> list[tuple[str, str]]:
    """(kind, detail) for every count that differs from what the server reported."""
    usage = record.get("usage")
    problems = []
    expected = usage_int(usage, "completion_tokens")
    if expected is not None and expected != len(completion):
        problems.append(("completion", f"completion has {len(completion)} tokens, usage.completion_tokens is "
                                       f"{expected}"))
    expected_prompt = usage_int(usage, "prompt_tokens")
    if expected_prompt is not None and expected_prompt != len(prompt):
        problems.append(("prompt", f"prompt has {len(prompt)} tokens, usage.prompt_tokens is {expected_prompt}"))
    return problems


class _Writer:
    """Buffers rows and writes one parquet row group per `size` rows."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.columns: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
        self.writer = pq.ParquetWriter(str(path), SCHEMA, compression="zstd")

    def add(self, row_id: str, prompt: list[int], completion: list[int]) -> None:
        self.columns["id"].append(row_id)
        self.columns["input_ids"].append(prompt + completion)
        self.columns["loss_mask"].append([0] * len(prompt) + [1] * len(completion))
        self.columns["seq_len"].append(len(prompt) + len(completion))
        if len(self.columns["id"]) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.columns["id"]:
            self.writer.write_table(pa.table(self.columns, schema=SCHEMA), row_group_size=self.size)
            self.columns = {name: [] for name in SCHEMA.names}

    def close(self) -> None:
        self.flush()
        self.writer.close()


def export(location: str, tok: ChatTokenizer, out: Path, *, drop_truncated: bool, keep_mismatched: bool,
           row_group_size: int, s3_endpoint_url: str | None = None, require_exact: bool = False) -> ExportReport:
    """`require_exact`: a record without server token ids is counted, not rendered, and OUT is not written
    when there is any."""
    report = ExportReport()
    seen: set[int] = set()
    part = out.with_name(out.name + ".part")
    writer = _Writer(part, row_group_size)
    finished = False
    try:
        for item, record in iter_records(location, ReadReport(), s3_endpoint_url=s3_endpoint_url):
            where = f"{item.where}:{item.line}: {record['id']}"
            report.records += 1
            key = id_hash(record["id"])
            if key in seen:
                report.duplicates += 1
                report.note("duplicate id", where, "id already exported from an earlier line; left out")
                continue
            seen.add(key)
            if drop_truncated and record.get("finish_reason") == "length":
                report.dropped_truncated += 1
                continue
            if require_exact and not has_exact_ids(record):
                report.without_ids += 1
                report.note("no server token ids", where, "would be re-rendered (--require-exact-ids)")
                continue
            try:
                tokens = render_record(record, tok)
            except RenderError as exc:
                report.failed += 1
                report.note("render failed", where, str(exc))
                continue
            problems = _check(record, tokens.prompt, tokens.completion)
            for kind, detail in problems:
                setattr(report, f"{kind}_mismatch", getattr(report, f"{kind}_mismatch") + 1)
                report.note(f"{kind} count mismatch", where, detail + ("" if tokens.exact else " (re-rendered)"))
            if problems and not keep_mismatched:
                continue
            report.kept_mismatched += bool(problems)
            report.exact += tokens.exact
            report.rendered += not tokens.exact
            report.exported += 1
            report.tokens += len(tokens.prompt) + len(tokens.completion)
            writer.add(record["id"], tokens.prompt, tokens.completion)
        finished = not report.without_ids
    finally:
        writer.close()
        if finished:
            os.replace(part, out)
            report.written = True
        else:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
    return report


def summary(report: ExportReport) -> dict[str, Any]:
    data: dict[str, Any] = {k: v for k, v in vars(report).items() if k not in ("problems", "examples")}
    data["problems"] = dict(report.problems)
    data["examples"] = report.examples
    data["left_out"] = report.left_out
    return data
