"""Who may write on an S3 prefix: the rules that keep two live writers of the same ids apart (pure; the
reads and writes are client.s3.resume's and client.s3.shard_lease's).

A running writer rewrites its manifest and its shard's lease at least once per sync interval (the
uploader's heartbeat), with its machine and pid. A record (a manifest, or a shard's lease) that says
"running" is **live** while its age is below two sync intervals plus a minute, unless it names this
machine and a pid that is gone (a crash here, restarted at once: known dead at once). The age is taken on
S3's clock, S3's `Date` minus the object's `LastModified` (client.s3.store.object_age), so no host's clock
is compared with another's: a writer whose clock is 15 minutes slow is judged by when S3 stored its
heartbeat. Only where S3 dates nothing does the record's own `updated` stand in, against this host's clock.

Three rules, each a one-line ManifestConflict (exit 2) that names the live writer and when its lease lapses:
- one writer name (host and shard): a second client with a live writer's name is refused (`check_lease`);
  a gone writer's name is taken over, and the takeover is said;
- one shard: a live writer of the same shard K/N under another name (another host, whatever its clock)
  refuses the start (`check_holder`, `check_same_shard`);
- one shard count: a live writer of another count N shares ids with this one (`check_shard_counts`).
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from client.core.durations import format_duration
from client.core.errors import ManifestConflict
from client.local.lock import pid_alive

# A record is fresh for this many sync intervals, plus a margin for a slow upload.
FRESH_INTERVALS = 2
FRESH_MARGIN_S = 60.0


class Holder(Protocol):
    """What a manifest and a shard's lease both say of their writer."""

    writer: str
    host: str
    shard: str
    run: str
    state: str
    machine: str
    pid: int
    sync_interval_s: float
    updated: float  # the writer's own clock: shown, and used only where S3 dates nothing
    age_s: float | None  # on S3's clock, when read


def machine_id() -> str:
    """This machine, as apart from another with the same host name (a container, a cloned VM)."""
    return f"{socket.gethostname()}/{uuid.getnode():012x}"


def fresh_for(previous: Holder) -> float:
    return FRESH_INTERVALS * max(previous.sync_interval_s, 1.0) + FRESH_MARGIN_S


def age_of(previous: Holder, now: float | None = None) -> float:
    """How long ago the record was stored: on S3's clock when it was read from S3, else by `updated`."""
    if previous.age_s is not None:
        return previous.age_s
    return max(0.0, (time.time() if now is None else now) - previous.updated)


def gone_here(previous: Holder, *, machine: str, alive: Callable[[int], bool] = pid_alive) -> bool:
    """The record's writer ran on this machine and its process is gone (a crash, a kill -9)."""
    return bool(machine) and previous.machine == machine and previous.pid > 0 and not alive(previous.pid)


def is_live(previous: Holder, *, machine: str, now: float | None = None,
            alive: Callable[[int], bool] = pid_alive) -> bool:
    return (previous.state == "running" and age_of(previous, now) < fresh_for(previous)
            and not gone_here(previous, machine=machine, alive=alive))


def _who(previous: Holder) -> str:
    return f"host {previous.host}, pid {previous.pid}, run {previous.run or '?'}"


def _lapses(previous: Holder, now: float | None) -> str:
    return format_duration(max(0.0, fresh_for(previous) - age_of(previous, now)))


def check_lease(previous: Holder, *, machine: str, now: float | None = None,
                alive: Callable[[int], bool] = pid_alive) -> str | None:
    """The record of this writer's own name: None when the name is free; a line to show when a dead
    writer's lease is taken over; ManifestConflict (exit 2) when a live writer holds it."""
    if previous.state != "running" or not previous.machine:
        return None
    age = age_of(previous, now)
    if gone_here(previous, machine=machine, alive=alive):
        return f"taking over writer {previous.writer}: its last client on this machine ({_who(previous)}) is gone"
    if age >= fresh_for(previous):
        return (f"taking over writer {previous.writer}: it says running but S3 has had no heartbeat from it "
                f"for {format_duration(age)} ({_who(previous)})")
    raise ManifestConflict(
        f"writer {previous.writer} is running on this S3 prefix ({_who(previous)}; S3 stored its heartbeat "
        f"{format_duration(age)} ago). Two writers with one name would overwrite each other's manifest: stop "
        "that one, give this one another --shard or run it on another host; if that writer is gone, its name "
        f"is free in {_lapses(previous, now)}.")


def check_holder(previous: Holder, *, writer: str, url: str, machine: str, now: float | None = None,
                 alive: Callable[[int], bool] = pid_alive) -> str | None:
    """A record of this writer's shard: this writer's own name goes by `check_lease`; another writer's
    refuses the start (ManifestConflict) while it lives, and a takeover line is returned once it is gone."""
    if previous.writer == writer:
        return check_lease(previous, machine=machine, now=now, alive=alive)
    if previous.state != "running":
        return None
    age = age_of(previous, now)
    if is_live(previous, machine=machine, now=now, alive=alive):
        raise ManifestConflict(
            f"shard {previous.shard} is already being written to {url} by writer {previous.writer} "
            f"({_who(previous)}; S3 stored its heartbeat {format_duration(age)} ago): two writers of one shard "
            "would both generate its ids. Stop that one, or give this one another shard; if that writer is "
            f"gone, the shard is free in {_lapses(previous, now)}.")
    why = ("its client on this machine is gone" if gone_here(previous, machine=machine, alive=alive)
           else f"S3 has had no heartbeat from it for {format_duration(age)}")
    return f"taking over shard {previous.shard} from writer {previous.writer} ({_who(previous)}): {why}"


def check_same_shard(records: Iterable[Holder], *, writer: str, shard: str, url: str, machine: str,
                     now: float | None = None, alive: Callable[[int], bool] = pid_alive) -> None:
    """ManifestConflict (exit 2) when another writer of this very shard is live on the prefix."""
    for record in records:
        if record.shard == shard and record.writer != writer:
            check_holder(record, writer=writer, url=url, machine=machine, now=now, alive=alive)


def _count(shard: str) -> int | None:
    _, _, count = shard.partition("/")
    return int(count) if count.isdigit() else None


def check_shard_counts(manifests: Iterable[Holder], *, writer: str, shard: str, url: str,
                       now: float | None = None, machine: str = "",
                       alive: Callable[[int], bool] = pid_alive) -> None:
    """ManifestConflict (exit 2) when a live writer of another shard count is on the prefix.

    Shards of different counts share ids (K/3 and K/2 overlap), so two live writers of different counts
    would both generate the ids they share. Writers that are gone (stopped, finished, stale by the lease's
    rule, or dead on this machine) do not count: changing the shard count between runs is fine, the done
    ids are skipped.
    """
    mine = _count(shard)
    live = [m for m in manifests
            if m.writer != writer and _count(m.shard) not in (None, mine)
            and is_live(m, machine=machine, now=now, alive=alive)]
    if not live:
        return
    counts = sorted({c for m in live if (c := _count(m.shard)) is not None})
    names = ", ".join(f"{m.writer} (shard {m.shard}, heartbeat {format_duration(age_of(m, now))} ago)"
                      for m in live[:5])
    raise ManifestConflict(
        f"this client takes shard {shard}, but {url} has live writer(s) of shard count "
        f"{'/'.join(map(str, counts))}: {names}. Shards of different counts share ids, so both would generate "
        f"them. Use the same count (--shard K/{counts[0]}; with --shard auto on a partial resubmission, "
        f"REGEN_SHARD_COUNT={counts[0]} or --shard-count {counts[0]}), or stop those writers first.")
