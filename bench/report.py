"""How a benchmark hands over its result: the markdown table on stdout, and appended to `--out` if given."""

from __future__ import annotations

from pathlib import Path


def emit(lines: list[str], out: Path | None) -> None:
    table = "\n".join(lines)
    print(table)
    if out is not None:
        with out.open("a") as handle:
            handle.write(table + "\n\n")
