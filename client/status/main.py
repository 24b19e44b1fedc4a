"""`python -m client.status`: how far a run is, from its S3 prefix (every shard and host, from the
manifests alone) or from one local --out directory (its segments, run.json and lock).

Exit codes: 0 the status was printed and no shard is stale; 2 bad options, or the bucket, a manifest
or the --out directory could not be read; 4 stdout is full; 3 (--s3) at least one shard is stale: its newest writer says
running but has not updated its manifest for --stale-after sync intervals (the shards are named on
stderr), so a cron job or CI can alert on it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from rich.table import Table

from argchecks import positive_float
from argchecks.parser import ToolParser
from client.core.exit_codes import EXIT_NOT_DONE, EXIT_OK
from client.core.human_out import write_report
from client.core.options import add_run_location, add_s3_endpoint_url, run_location
from client.core.report_text import print_report
from client.local.prompt_files import resolve_prompt_files
from client.s3.manifest import Manifest
from client.s3.resume import read_manifests
from client.s3.store import S3Store, S3Url
from client.status import fleet, local

_EPILOG = """\
examples:
  python -m client.status s3://my-bucket/regen/run1 --prompts data.jsonl   # every shard, fleet ETA
  python -m client.status runs/full --prompts data.jsonl                   # one host's --out
  (--s3 s3://... and --out DIR name the run as well, as client.run spells them)

exit codes (one scheme for every tool: docs/exit-codes.md):
  0    printed, no shard stale
  2    bad options or an unreadable location
  3    a shard is stale (--s3)
  4    no room: the status (stdout) could not be written
  130  stopped by Ctrl-C or SIGTERM
"""


async def _read(url: S3Url, endpoint_url: str | None) -> list[Manifest]:
    async with S3Store(url, endpoint_url=endpoint_url) as store:
        await store.check_bucket()
        return [m for m, _ in await read_manifests(store)]


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser(prog="python -m client.status", description=__doc__.split("\n\n")[0],
                        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_location(parser, "the run: its local --out directory (its segments, run.json and lock), or the S3 "
                             "prefix the clients sync to (every shard)")
    add_s3_endpoint_url(parser)
    parser.add_argument("--prompts", action="append", metavar="FILE|DIR",
                        help="the run's prompt file(s) (.jsonl, .jsonl.gz, .jsonl.zst, or a directory of them), "
                             "to count the total, what remains and the ETA; repeat for several (with --out, "
                             "default: the files run.json records, when they are all there)")
    parser.add_argument("--stale-after", type=positive_float, default=3.0, metavar="N",
                        help="with --s3: a running shard whose manifest is older than N sync intervals (plus a "
                             "minute) is stale, exit 3 (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def _print(table: Table, doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        write_report(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        # A pipe gets the full table, not one squeezed to 80 columns.
        print_report(lambda console: console.print(table), 160)


def _s3_status(args: argparse.Namespace, location: str, paths: list[Path]) -> int:
    url = S3Url.parse(location)
    manifests = asyncio.run(_read(url, args.s3_endpoint_url))
    prompts = None
    if paths:
        counts = {n for m in manifests if (n := fleet.shard_count(m.shard)) is not None}
        prompts = fleet.count_prompts(paths, counts)
    status = fleet.summarize(manifests, prompts, now=time.time(), stale_after=args.stale_after)
    _print(fleet.render(str(url), status), fleet.as_json(str(url), status), args.json)
    if not manifests:
        print(f"note: no manifest under {url}manifests/ yet: no client has synced to this prefix", file=sys.stderr)
    stale = fleet.stale_lines(status)
    for line in stale:
        print(line, file=sys.stderr)
    return EXIT_NOT_DONE if stale else EXIT_OK


def _local_status(args: argparse.Namespace, location: str, paths: list[Path]) -> int:
    status = local.read_local(Path(location), paths, now=time.time())
    _print(local.render(status), local.as_json(status), args.json)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    location = run_location(parser, args)
    on_s3 = location.startswith("s3://")
    if not on_s3 and args.s3_endpoint_url:
        parser.error("--s3-endpoint-url goes with an s3:// run")
    paths = resolve_prompt_files([Path(p) for p in args.prompts]).paths if args.prompts else []
    if on_s3:
        return _s3_status(args, location, paths)
    return _local_status(args, location, paths)
