"""The status of a run across its shards, from the writers' manifests in S3 alone (no segment is read).

Per shard: its writers and hosts, the state of its newest writer, the last manifest update, done,
failed, tokens, the rate over the last hour (records per second, from the segments' upload times), what remains (with
--prompts) and whether it is complete or stale. The rate compares no host's clock with another's: a
writer's upload times and start are measured against that writer's own "now", its manifest's `updated`
(its clock, as it stored the manifest) plus the manifest's age on S3's clock (`writer_now`); so a writer
15 minutes ahead or behind has the rate it has, and the reader's clock stands in only where S3 dates
nothing. Each writer's rate is its own; a shard's is the sum of its writers'.

A shard is **stale** when its newest writer says "running" but has not rewritten its manifest (the uploader's
heartbeat, once per sync interval) for `stale_after` sync intervals plus a minute: its client is gone without
saying so (a killed node, a lost pod). How long ago a manifest was rewritten is read on S3's clock
(`Manifest.age_s`, the same rule the client's lease uses, client.s3.lease), so neither the writer's clock nor
this host's can make a live writer look stale; only a manifest read without S3's dates falls back to its own
`updated`. A shard is **complete** when nothing of it remains (with --prompts), else when its newest writer
finished with no failure. Shards that the shard counts in use expect but no manifest names are listed as
missing (not started yet, or never). The fleet line adds the totals and the ETA: what remains over the summed
rates of the shards still running (and not stale).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.table import Table
from rich.text import Text

from client.core.durations import format_duration
from client.core.ids import leading_id, shard_of
from client.local.prompt_files import prompt_lines
from client.s3.lease import age_of
from client.s3.manifest import Manifest

RATE_WINDOW_S = 3600.0
STALE_MARGIN_S = 60.0


def eta_from(remaining: int | None, rate: float) -> float | None:
    """Seconds until `remaining` items are done at `rate` a second: 0 when none remain, None when either
    is unknown (no total, or no rate). The one ETA of `client.status`, for the fleet and for an --out."""
    if remaining is None:
        return None
    if remaining == 0:
        return 0.0
    return remaining / rate if rate > 0 else None


@dataclass
class ShardRow:
    shard: str
    writers: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    state: str = ""  # the newest writer's
    shard_source: str = ""  # the newest writer's
    segments: int = 0
    done: int = 0
    failed: int = 0  # the newest writer's latest run
    completion_tokens: int = 0
    last_upload: float | None = None
    updated: float = 0.0
    age_s: float | None = None  # the newest manifest's, on S3's clock
    sync_interval_s: float = 0.0
    recent_records: int = 0  # in segments uploaded within the rate window
    recent_rate: float = 0.0  # the sum of its writers' rates over their windows, each on its own clock
    prompts: int | None = None

    @property
    def remaining(self) -> int | None:
        return None if self.prompts is None else max(0, self.prompts - self.done)

    def age(self, now: float) -> float:
        """Since its newest manifest was stored: on S3's clock when read from S3, else by its `updated`."""
        return self.age_s if self.age_s is not None else max(0.0, now - self.updated)

    def stale(self, now: float, stale_after: float = 3.0) -> bool:
        """Its newest writer says running, but its manifest is older than `stale_after` sync intervals."""
        interval = self.sync_interval_s if self.sync_interval_s > 0 else 60.0
        return self.state == "running" and self.age(now) > stale_after * interval + STALE_MARGIN_S

    def complete(self) -> bool:
        if self.remaining is not None:
            return self.remaining == 0
        return self.state == "finished" and self.failed == 0

    def rate(self) -> float:
        """Records per second over the last hour (or since each writer started, when that is sooner)."""
        return self.recent_rate


@dataclass(frozen=True, slots=True)
class FleetStatus:
    rows: list[ShardRow]
    missing: list[str]
    total_prompts: int | None
    now: float
    stale_after: float

    @property
    def done(self) -> int:
        return sum(r.done for r in self.rows)

    @property
    def remaining(self) -> int | None:
        return None if self.total_prompts is None else max(0, self.total_prompts - self.done)

    @property
    def rate(self) -> float:
        """Records per second of the shards still working (running, and not stale: that client is gone)."""
        return sum(r.rate() for r in self.rows
                   if r.state == "running" and not r.stale(self.now, self.stale_after))

    @property
    def eta_s(self) -> float | None:
        return eta_from(self.remaining, self.rate)

    def stale(self) -> list[ShardRow]:
        return [r for r in self.rows if r.stale(self.now, self.stale_after)]


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


def shard_count(shard: str) -> int | None:
    _, _, count = shard.partition("/")
    return int(count) if count.isdigit() and int(count) > 0 else None


def summarize(manifests: Sequence[Manifest], prompts: tuple[int, dict[int, Counter[int]]] | None, *,
              now: float, stale_after: float = 3.0) -> FleetStatus:
    rows: dict[str, ShardRow] = {}
    newest: dict[str, Manifest] = {}
    for m in sorted(manifests, key=lambda m: (m.shard, m.writer)):
        _add_writer(rows.setdefault(m.shard, ShardRow(m.shard)), m, now)
        if m.shard not in newest or age_of(m, now) <= age_of(newest[m.shard], now):
            newest[m.shard] = m
    for shard, m in newest.items():
        row = rows[shard]
        row.state, row.updated, row.failed, row.age_s = m.state, m.updated, m.failed, m.age_s
        row.sync_interval_s, row.shard_source = m.sync_interval_s, m.shard_source
    if prompts is not None:
        _owed(rows.values(), prompts[1])
    counts = {n for shard in rows if (n := shard_count(shard)) is not None}
    missing = [f"{k}/{n}" for n in sorted(counts) for k in range(n) if f"{k}/{n}" not in rows]
    return FleetStatus(list(rows.values()), missing, None if prompts is None else prompts[0], now, stale_after)


def writer_now(m: Manifest, now: float) -> float:
    """The time on the writer's own clock as this status reads its manifest: its `updated` (stamped as it
    stored it) plus the time since on S3's clock. `now` (this host's clock) stands in only where S3 dated
    nothing; then the writer's clock is compared with this one, the one case the age rules also allow."""
    return m.updated + m.age_s if m.age_s is not None else now


def writer_rate(m: Manifest, now: float) -> tuple[int, float]:
    """A writer's records uploaded in the last hour, and their rate a second over the last hour (or since
    it started, when sooner): every time in it is the writer's own, so its clock's offset cancels."""
    mine = writer_now(m, now)
    recent = sum(s.records for s in m.segments.values() if mine - s.uploaded <= RATE_WINDOW_S)
    window = min(RATE_WINDOW_S, max(1.0, mine - m.started)) if m.started else RATE_WINDOW_S
    return recent, recent / window


def _add_writer(row: ShardRow, m: Manifest, now: float) -> None:
    """One writer's manifest into its shard's row: the sums over every writer of the shard."""
    row.writers.append(m.writer)
    if m.host and m.host not in row.hosts:
        row.hosts.append(m.host)
    row.states.append(m.state)
    row.segments += len(m.segments)
    row.done += m.records
    row.completion_tokens += m.completion_tokens
    recent, rate = writer_rate(m, now)
    row.recent_records += recent
    row.recent_rate += rate
    if m.last_upload is not None:
        row.last_upload = max(row.last_upload or 0.0, m.last_upload)


def _owed(rows: Iterable[ShardRow], per: dict[int, Counter[int]]) -> None:
    """Each row's prompts, for the shards whose count N the prompts were counted for."""
    for row in rows:
        index, _, count = row.shard.partition("/")
        if index.isdigit() and count.isdigit() and int(count) in per:
            row.prompts = per[int(count)][int(index)]


def _stored(now: float, row: ShardRow) -> str:
    return "never" if not row.updated and row.age_s is None else f"{format_duration(row.age(now))} ago"


def _eta(status: FleetStatus) -> str:
    eta = status.eta_s
    if eta is None:
        return "? (give --prompts)" if status.total_prompts is None else "? (no progress in the last hour)"
    return "done" if eta == 0 else format_duration(eta)


def as_json(prefix: str, status: FleetStatus) -> dict[str, Any]:
    now = status.now
    shards = [{
        "shard": r.shard, "writers": r.writers, "hosts": r.hosts, "states": r.states, "state": r.state,
        "shard_source": r.shard_source, "segments": r.segments, "done": r.done, "failed": r.failed,
        "completion_tokens": r.completion_tokens, "last_upload": r.last_upload, "updated": r.updated,
        "age_s": round(r.age(now), 1),
        "sync_interval_s": r.sync_interval_s, "prompts": r.prompts, "remaining": r.remaining,
        "rate_per_s": round(r.rate(), 4), "stale": r.stale(now, status.stale_after), "complete": r.complete(),
    } for r in status.rows]
    return {
        "prefix": prefix,
        "shards": shards,
        "missing_shards": status.missing,
        "totals": {"done": status.done, "failed": sum(r.failed for r in status.rows),
                   "completion_tokens": sum(r.completion_tokens for r in status.rows),
                   "segments": sum(r.segments for r in status.rows), "prompts": status.total_prompts,
                   "remaining": status.remaining, "rate_per_s": round(status.rate, 4), "eta_s": status.eta_s,
                   "shards": len(status.rows), "complete_shards": sum(r.complete() for r in status.rows),
                   "stale_shards": [r.shard for r in status.stale()]},
    }


def render(prefix: str, status: FleetStatus) -> Table:
    now = status.now
    table = Table(title=f"{prefix}  ({len(status.rows)} shard(s))", header_style="bold", show_edge=False)
    left = ("shard", "hosts", "state", "manifest updated")
    for column in ("shard", "hosts", "state", "manifest updated", "done", "failed", "tokens", "done/s",
                   "remaining"):
        table.add_column(column, justify="left" if column in left else "right")
    for r in status.rows:
        stale = r.stale(now, status.stale_after)
        state = Text("stale", style="bold red") if stale else Text("complete" if r.complete() else r.state)
        updated = Text(_stored(now, r), style="red" if stale else "")
        table.add_row(r.shard, ", ".join(r.hosts), state, updated, f"{r.done:,}", f"{r.failed:,}",
                      f"{r.completion_tokens:,}", "-" if r.state != "running" else f"{r.rate():.2f}",
                      "?" if r.remaining is None else f"{r.remaining:,}")
    for shard in status.missing:
        table.add_row(shard, "", Text("missing", style="yellow"), "no manifest", "", "", "", "", "")
    table.add_section()
    remaining = "?" if status.remaining is None else f"{status.remaining:,}"
    complete = f"{sum(r.complete() for r in status.rows)}/{len(status.rows) + len(status.missing)} complete"
    table.add_row(Text("fleet", style="bold"), "", complete, f"ETA {_eta(status)}", f"{status.done:,}",
                  f"{sum(r.failed for r in status.rows):,}", f"{sum(r.completion_tokens for r in status.rows):,}",
                  f"{status.rate:.2f}", remaining)
    return table


def stale_lines(status: FleetStatus) -> list[str]:
    """One line per stale shard, for stderr: which, where, how long, and what to do."""
    lines = []
    for r in status.stale():
        lines.append(f"stale shard {r.shard} (host {', '.join(r.hosts) or '?'}): its manifest says running but "
                     f"was last stored {_stored(status.now, r)} (on S3's clock), over {status.stale_after:g} sync "
                     f"interval(s) of {format_duration(r.sync_interval_s or 60.0)}; its client is gone or "
                     "cannot reach S3: check the job, then run or resubmit that shard (it resumes from S3)")
    return lines
