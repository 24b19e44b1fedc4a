"""A synthetic prompt file, the workload of a benchmark on a simulated fleet: `count` valid PromptRecords
(`{prefix}000000`, `{prefix}000001`, ...), each one short user question, every `tools_every`-th carrying
`tool`. The tests' `make_prompts` (tests/conftest.py) writes its prompt files with it too, so the
benchmarks need nothing of tests/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


def write_prompts(path: Path, count: int, *, tool: dict[str, Any] | None = None, tools_every: int = 0,
                  prefix: str = "p") -> Path:
    """Write `count` PromptRecords to `path` (JSONL) and return it; with `tool` and `tools_every`, every
    `tools_every`-th record (the first included) carries that tool schema."""
    lines = []
    for i in range(count):
        record: dict[str, Any] = {"id": f"{prefix}{i:06d}",
                                  "messages": [{"role": "user", "content": f"Question number {i}: explain {i % 17}."}],
                                  "meta": {"source": "test", "n": i}}
        if tool is not None and tools_every and i % tools_every == 0:
            record["tools"] = [tool]
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path
