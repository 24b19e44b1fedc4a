"""The export's output files: one writer per format, all streaming to OUT.part as the rows come.

`parquet`: columns `id` (string), `input_ids` (list<int32>), `loss_mask` (list<int8>), `seq_len` (int32),
one row group per `row_group_size` rows (pyarrow, imported only for this format). The JSONL formats write
one object a line with orjson; what a line holds is `client.export.rows`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

from client.export.formats import FORMATS
from client.export.rows import Sample, specforge_line, speculators_line, tokenized_line


class Writer(Protocol):
    def add(self, sample: Sample, input_ids: list[int], loss_mask: list[int]) -> None: ...

    def close(self) -> None: ...


class ParquetWriter:
    """Buffers rows and writes one parquet row group per `size` rows."""

    def __init__(self, path: Path, size: int) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        self._pa = pa
        self.schema = pa.schema([("id", pa.string()), ("input_ids", pa.list_(pa.int32())),
                                 ("loss_mask", pa.list_(pa.int8())), ("seq_len", pa.int32())])
        self.size = size
        self.columns: dict[str, list[Any]] = {name: [] for name in self.schema.names}
        self.writer = pq.ParquetWriter(str(path), self.schema, compression="zstd")

    def add(self, sample: Sample, input_ids: list[int], loss_mask: list[int]) -> None:
        self.columns["id"].append(sample.id)
        self.columns["input_ids"].append(input_ids)
        self.columns["loss_mask"].append(loss_mask)
        self.columns["seq_len"].append(len(input_ids))
        if len(self.columns["id"]) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.columns["id"]:
            self.writer.write_table(self._pa.table(self.columns, schema=self.schema), row_group_size=self.size)
            self.columns = {name: [] for name in self.schema.names}

    def close(self) -> None:
        self.flush()
        self.writer.close()


LineBuilder = Callable[[Sample, list[int], list[int]], dict[str, Any]]
# What one line of each JSONL format holds (client.export.rows); a test holds the keys to the registry.
JSONL_LINES: dict[str, LineBuilder] = {"specforge": specforge_line, "specforge-tokenized": tokenized_line,
                                       "speculators": speculators_line}


class JsonlWriter:
    def __init__(self, path: Path, line: LineBuilder) -> None:
        self.line = line
        self.file: IO[bytes] = path.open("wb")

    def add(self, sample: Sample, input_ids: list[int], loss_mask: list[int]) -> None:
        self.file.write(orjson.dumps(self.line(sample, input_ids, loss_mask)) + b"\n")

    def close(self) -> None:
        self.file.close()


def open_writer(fmt: str, path: Path, row_group_size: int) -> Writer:
    if FORMATS[fmt].storage == "parquet":
        return ParquetWriter(path, row_group_size)
    return JsonlWriter(path, JSONL_LINES[fmt])
