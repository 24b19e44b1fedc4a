"""`python -m client.status`: the totals of a run across every shard and host, read from the manifests
alone (no segment is downloaded): done, failed, completion tokens, and how fresh each shard's sync is.
With --prompts it also counts what remains, per shard and in total.

Exit codes: 0 the figures were printed; 2 the bucket or a manifest could not be read.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from client.core.durations import format_duration
from client.core.errors import ConfigError, InputError
from client.core.ids import leading_id, shard_of
from client.core.options import add_s3_endpoint_url
from client.local.prompt_files import prompt_lines, resolve_prompt_files
from client.s3.manifest import Manifest
from client.s3.resume import read_manifests
from client.s3.store import S3Error, S3Store, S3Url


@dataclass
class ShardRow:
    shard: str
    writers: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    segments: int = 0
    done: int = 0
    failed: int = 0
    completion_tokens: int = 0
    last_upload: float | None = None
    updated: float = 0.0
    sync_interval_s: float = 0.0
    prompts: int | None = None

    @property
    def remaining(self) -> int | None:
        return None if self.prompts is None else max(0, self.prompts - self.done)

    def stale(self, now: float) -> bool:
        """A writer says it is running but has not written its manifest for several sync intervals."""
        limit = 3 * self.sync_interval_s + 60
        return "running" in self.states and self.sync_interval_s > 0 and now - self.updated > limit



def count_prompts(paths: Iterable[Path], shard_counts: set[int]) -> tuple[int, dict[int, Counter[int]]]:
    """Distinct prompt ids in the files, in total and per shard for each shard count N in use."""
    seen: set[str] = set()
    per: dict[int, Counter[int]] = {n: Counter() for n in shard_counts}
    for path in paths:
        with prompt_lines(path) as handle:
            for raw in handle:
                prompt_id = leading_id(raw) if raw.strip() else None
                if prompt_id is None and raw.strip():
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    value = obj.get("id") if isinstance(obj, dict) else None
                    prompt_id = value if isinstance(value, str) else None
                if prompt_id is None or prompt_id in seen:
                    continue
                seen.add(prompt_id)
                for n, counter in per.items():
                    counter[shard_of(prompt_id, n)] += 1
    return len(seen), per


def summarize(manifests: Sequence[Manifest], prompts: tuple[int, dict[int, Counter[int]]] | None) -> list[ShardRow]:
    rows: dict[str, ShardRow] = {}
    for m in sorted(manifests, key=lambda m: (m.shard, m.writer)):
        row = rows.setdefault(m.shard, ShardRow(m.shard))
        row.writers.append(m.writer)
        row.states.append(m.state)
        row.segments += len(m.segments)
        row.done += m.records
        row.failed += m.failed
        row.completion_tokens += m.completion_tokens
        if m.last_upload is not None:
            row.last_upload = max(row.last_upload or 0.0, m.last_upload)
        row.updated = max(row.updated, m.updated)
        row.sync_interval_s = max(row.sync_interval_s, m.sync_interval_s)
    if prompts is not None:
        for row in rows.values():
            index, _, count = row.shard.partition("/")
            if index.isdigit() and count.isdigit() and int(count) in prompts[1]:
                row.prompts = prompts[1][int(count)][int(index)]
    return list(rows.values())


def _shard_count(shard: str) -> int | None:
    _, _, count = shard.partition("/")
    return int(count) if count.isdigit() and int(count) > 0 else None


def as_json(url: S3Url, rows: list[ShardRow], total_prompts: int | None, now: float) -> bytes:
    done = sum(r.done for r in rows)
    remaining = None if total_prompts is None else max(0, total_prompts - done)
    return orjson.dumps({
        "prefix": str(url),
        "shards": [{**asdict(r), "remaining": r.remaining, "stale": r.stale(now)} for r in rows],
        "totals": {"done": done, "failed": sum(r.failed for r in rows),
                   "completion_tokens": sum(r.completion_tokens for r in rows),
                   "segments": sum(r.segments for r in rows),
                   "prompts": total_prompts, "remaining": remaining},
    }, option=orjson.OPT_INDENT_2)


def render(url: S3Url, rows: list[ShardRow], total_prompts: int | None, now: float) -> Table:
    table = Table(title=f"{url}  ({len(rows)} shard(s))", header_style="bold", show_edge=False)
    for column in ("shard", "writers", "state", "segments", "done", "failed", "tokens", "remaining", "last upload"):
        table.add_column(column, justify="left" if column in ("shard", "writers", "state", "last upload") else "right")
    for r in rows:
        age = "never" if r.last_upload is None else f"{format_duration(now - r.last_upload)} ago"
        fresh = Text(age, style="red") if r.stale(now) else Text(age)
        if r.stale(now):
            fresh.append(" (stale)", style="red")
        table.add_row(r.shard, ", ".join(r.writers), ", ".join(sorted(set(r.states))), f"{r.segments:,}",
                      f"{r.done:,}", f"{r.failed:,}", f"{r.completion_tokens:,}",
                      "?" if r.remaining is None else f"{r.remaining:,}", fresh)
    done = sum(r.done for r in rows)
    remaining = "?" if total_prompts is None else f"{max(0, total_prompts - done):,}"
    table.add_section()
    table.add_row(Text("total", style="bold"), "", "", f"{sum(r.segments for r in rows):,}", f"{done:,}",
                  f"{sum(r.failed for r in rows):,}", f"{sum(r.completion_tokens for r in rows):,}", remaining, "")
    return table


async def _read(url: S3Url, endpoint_url: str | None) -> list[Manifest]:
    async with S3Store(url, endpoint_url=endpoint_url) as store:
        await store.check_bucket()
        return [m for m, _ in await read_manifests(store)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m client.status", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--s3", required=True, metavar="s3://BUCKET/PREFIX", help="the prefix the clients sync to")
    add_s3_endpoint_url(parser)
    parser.add_argument("--prompts", action="append", metavar="FILE|DIR",
                        help="the run's prompt file(s) (.jsonl, .jsonl.gz, .jsonl.zst, or a directory of them), "
                             "to count what remains; repeat for several")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        url = S3Url.parse(args.s3)
        paths = resolve_prompt_files([Path(p) for p in args.prompts]).paths if args.prompts else []
        manifests = asyncio.run(_read(url, args.s3_endpoint_url))
        prompts = None
        if paths:
            counts = {n for m in manifests if (n := _shard_count(m.shard)) is not None}
            prompts = count_prompts(paths, counts)
    except (ConfigError, InputError, S3Error) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    now = time.time()
    rows = summarize(manifests, prompts)
    total = prompts[0] if prompts is not None else None
    if args.json:
        sys.stdout.write(as_json(url, rows, total, now).decode() + "\n")
    else:
        # A pipe gets the full table, not one squeezed to 80 columns.
        Console(width=None if sys.stdout.isatty() else 140).print(render(url, rows, total, now))
    return 0
