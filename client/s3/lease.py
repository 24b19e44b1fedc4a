"""Two live writers with one name (the same host name and shard) on one S3 prefix would overwrite each
other's manifest: the manifest is the lease that keeps them apart.

A running writer rewrites its manifest at least once per sync interval (the uploader's heartbeat), with
its machine and pid. At start-up, a manifest of this writer's name that still says "running" is held
by a live writer when it is fresh, unless it names this machine and a pid that is gone (a crash here,
restarted at once). A stale one, or one from a client that wrote no machine, is taken over, and the
takeover is said.

The same freshness keeps shards of different counts apart: a live writer of shard count 3 and a new
one of count 2 would share ids and both generate them, so the new one is refused at start. A writer
that ran on this machine and whose pid is gone is known dead at once, here too.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable

from client.core.durations import format_duration
from client.core.errors import ManifestConflict
from client.local.lock import pid_alive
from client.s3.manifest import Manifest

# A manifest is fresh for this many sync intervals, plus a margin for a slow upload.
FRESH_INTERVALS = 2
FRESH_MARGIN_S = 60.0


def machine_id() -> str:
    """This machine, as apart from another with the same host name (a container, a cloned VM)."""
    return f"{socket.gethostname()}/{uuid.getnode():012x}"


def fresh_for(previous: Manifest) -> float:
    return FRESH_INTERVALS * max(previous.sync_interval_s, 1.0) + FRESH_MARGIN_S


def gone_here(previous: Manifest, *, machine: str, alive: Callable[[int], bool] = pid_alive) -> bool:
    """The manifest's writer ran on this machine and its process is gone (a crash, a kill -9)."""
    return bool(machine) and previous.machine == machine and previous.pid > 0 and not alive(previous.pid)


def check_lease(previous: Manifest, *, machine: str, now: float | None = None,
                alive: Callable[[int], bool] = pid_alive) -> str | None:
    """None when the name is free; a line to show when a dead writer's lease is taken over; ManifestConflict
    (exit 2) when a live writer holds it."""
    if previous.state != "running" or not previous.machine:
        return None
    now = time.time() if now is None else now
    age = now - previous.updated
    who = f"host {previous.host}, pid {previous.pid}, run {previous.run or '?'}"
    if gone_here(previous, machine=machine, alive=alive):
        return f"taking over writer {previous.writer}: its last client on this machine ({who}) is gone"
    if age >= fresh_for(previous):
        return (f"taking over writer {previous.writer}: its manifest says running but has not been updated for "
                f"{format_duration(age)} ({who})")
    raise ManifestConflict(
        f"writer {previous.writer} is running on this S3 prefix ({who}; its manifest was updated "
        f"{format_duration(age)} ago). Two writers with one name would overwrite each other's manifest: stop "
        "that one, give this one another --shard or run it on another host; if that writer is gone, its "
        f"name is free once its manifest is {format_duration(fresh_for(previous))} old.")


def _count(shard: str) -> int | None:
    _, _, count = shard.partition("/")
    return int(count) if count.isdigit() else None


def check_shard_counts(manifests: Iterable[Manifest], *, writer: str, shard: str, url: str,
                       now: float | None = None, machine: str = "",
                       alive: Callable[[int], bool] = pid_alive) -> None:
    """ManifestConflict (exit 2) when a live writer of another shard count is on the prefix.

    Shards of different counts share ids (K/3 and K/2 overlap), so two live writers of different counts
    would both generate the ids they share. Writers that are gone (stopped, finished, stale by the lease's
    rule, or dead on this machine) do not count: changing the shard count between runs is fine, the done
    ids are skipped.
    """
    mine = _count(shard)
    now = time.time() if now is None else now
    live = [m for m in manifests
            if m.writer != writer and m.state == "running" and now - m.updated < fresh_for(m)
            and _count(m.shard) not in (None, mine) and not gone_here(m, machine=machine, alive=alive)]
    if not live:
        return
    counts = sorted({c for m in live if (c := _count(m.shard)) is not None})
    names = ", ".join(f"{m.writer} (shard {m.shard}, updated {format_duration(max(0.0, now - m.updated))} ago)"
                      for m in live[:5])
    raise ManifestConflict(
        f"this client takes shard {shard}, but {url} has live writer(s) of shard count "
        f"{'/'.join(map(str, counts))}: {names}. Shards of different counts share ids, so both would generate "
        f"them. Use the same count (--shard K/{counts[0]}; with --shard auto on a partial resubmission, "
        f"REGEN_SHARD_COUNT={counts[0]} or --shard-count {counts[0]}), or stop those writers first.")
