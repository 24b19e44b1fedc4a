"""The lease of one shard on an S3 prefix, `leases/<K>of<N>.json`: one small object that every writer of
that shard holds while it runs, so two hosts given the same shard (a SLURM array submitted twice, one
index resubmitted while the first still runs, a copied command) never both write it, even when they start
at the same moment.

`check` reads it at start-up, before anything is written (client.s3.resume.start): a live holder of
another name refuses the start. `claim` takes it once the start can no longer be refused otherwise:
created with `If-None-Match: *`, or taken over from a holder that is gone with `If-Match` its ETag; a
claim that loses a race reads the lease again and is judged again, so of two clients starting at once
one runs and the other is refused (ManifestConflict, exit 2). Every heartbeat renews it (`If-Match`
the ETag last stored): a writer whose lease was taken over, judged gone while its heartbeats could not
reach S3, stops instead of writing on beside the new holder. A lease object that is not a lease any more
(damaged, written by hand) is nobody's claim: the live writer takes it back and says so, as a client
starting on the shard would. The final manifest write releases it, so
the shard is free at once. Liveness is judged on S3's clock (client.s3.lease).

A store without conditional writes (NotImplemented) gets plain PUTs: the checks at start still hold,
only two clients starting within the same moments are not told apart.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from client.core.errors import ManifestConflict
from client.local.lock import pid_alive
from client.s3.errors_map import MISSING_KEY_CODES
from client.s3.lease import check_holder, check_lease
from client.s3.manifest import same_etag, single_etag
from client.s3.store import DatedObject, S3Conflict, S3Error, S3Store

LEASES_PREFIX = "leases/"
KIND = "regen-swarm lease"
NOT_IMPLEMENTED = "NotImplemented"
_CLAIM_ROUNDS = 5


def lease_key(shard: str) -> str:
    """The lease object of shard "K/N"."""
    return f"{LEASES_PREFIX}{shard.replace('/', 'of')}.json"


@dataclass
class LeaseRecord:
    """What a shard's lease says of its holder (client.s3.lease.Holder)."""

    writer: str
    host: str
    shard: str
    machine: str
    pid: int
    run: str
    sync_interval_s: float
    state: str = "running"  # then "released"
    updated: float = 0.0
    age_s: float | None = None  # not stored: its age on S3's clock when read

    def to_json(self) -> bytes:
        self.updated = time.time()
        return orjson.dumps({"kind": KIND, "writer": self.writer, "host": self.host, "shard": self.shard,
                             "machine": self.machine, "pid": self.pid, "run": self.run, "state": self.state,
                             "sync_interval_s": self.sync_interval_s, "updated": self.updated})

    @classmethod
    def read(cls, got: DatedObject) -> LeaseRecord | None:
        """The stored lease; None when it is not one (damaged: it protects nothing, and is taken over)."""
        try:
            obj = orjson.loads(got.body)
            if not isinstance(obj, dict) or obj.get("kind") != KIND:
                return None
            return cls(writer=str(obj["writer"]), host=str(obj.get("host", "")), shard=str(obj["shard"]),
                       machine=str(obj.get("machine", "")), pid=int(obj.get("pid", 0)), run=str(obj.get("run", "")),
                       sync_interval_s=float(obj.get("sync_interval_s", 0.0)), state=str(obj.get("state", "")),
                       updated=float(obj.get("updated", 0.0)), age_s=got.age_s)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


class ShardLease:
    """This writer's hold on its shard's lease on one prefix."""

    def __init__(self, store: S3Store, mine: LeaseRecord, *, alive: Callable[[int], bool] = pid_alive) -> None:
        self.store = store
        self.mine = mine
        self.key = lease_key(mine.shard)
        self.alive = alive
        self.held = False
        self._etag: str | None = None
        self._conditional = True
        self._unconfirmed: list[str] = []  # ETags of bodies sent whose reply was lost

    def _judge(self, got: DatedObject) -> str | None:
        """None (free) or a takeover line for the stored lease; ManifestConflict when a live writer holds it."""
        holder = LeaseRecord.read(got)
        if holder is None:
            return f"taking over the lease {self.store.url}{self.key}: it is not a readable lease"
        if holder.writer == self.mine.writer:
            if holder.machine == self.mine.machine and holder.run == self.mine.run:
                return None  # our own, from a claim whose reply was lost
            # An earlier client of this writer's name: the manifest's own check says the takeover.
            check_lease(holder, machine=self.mine.machine, alive=self.alive)
            return None
        return check_holder(holder, writer=self.mine.writer, url=str(self.store.url), machine=self.mine.machine,
                            alive=self.alive)

    async def check(self) -> None:
        """At start-up, changing nothing: ManifestConflict when a live writer holds this shard."""
        got = await self.store.get_dated(self.key)
        if got is not None:
            self._judge(got)

    async def claim(self) -> str | None:
        """Take the lease (ManifestConflict when a live writer holds it); a takeover line, or None."""
        for _ in range(_CLAIM_ROUNDS):
            got = await self.store.get_dated(self.key)
            said = None if got is None else self._judge(got)
            try:
                await self._put(if_match=got.etag if got is not None else None)
            except S3Conflict:
                continue  # another client wrote it between our read and our write: judge it again
            except S3Error as exc:
                if exc.code in MISSING_KEY_CODES:
                    continue  # deleted between our read and our write
                raise
            self.held = True
            return said
        raise ManifestConflict(f"the lease {self.store.url}{self.key} of shard {self.mine.shard} changed under "
                               f"this client {_CLAIM_ROUNDS} times while it tried to take it: several clients "
                               "are starting on this shard; run one of them")

    async def renew(self) -> str | None:
        """The heartbeat: rewrite the lease if it is still ours; ManifestConflict when it was taken over.
        A line to show when the lease had to be taken again (it was deleted, or is not a lease any more)."""
        if not self.held:
            return None
        try:
            await self._put(if_match=self._etag)
        except S3Conflict:
            current = await self.store.get_dated(self.key)
            if current is not None and any(same_etag(current.etag, sent) for sent in self._unconfirmed):
                self._etag = current.etag  # our own write, whose reply was lost
                return await self.renew()
            self.held = False
            if current is None:  # deleted since: take it again as at the start (or be refused)
                return await self.claim()
            holder = LeaseRecord.read(current)
            if holder is None:
                # Not a lease (damaged, or written by hand): it is no other client's claim, and at the
                # start the same object is taken over (`_judge`); so this writer takes it back, and says so.
                self._etag, self.held = current.etag, True
                await self.renew()
                return (f"took back the lease {self.store.url}{self.key} of shard {self.mine.shard}: it had been "
                        "overwritten by something that is not a readable lease, which no client holds")
            who = f"writer {holder.writer} (host {holder.host}, pid {holder.pid}, run {holder.run or '?'})"
            raise ManifestConflict(
                f"the lease of shard {self.mine.shard} on {self.store.url} was taken over by {who}: this "
                "writer's heartbeats did not reach S3 in time and it was judged gone. It stops, so that the "
                "shard has one writer; what it uploaded is listed in its manifest, the rest stays in --out "
                "and goes up with its next run") from None
        except S3Error as exc:
            if exc.code not in MISSING_KEY_CODES:
                raise
            self.held = False  # someone deleted it: take it again as at the start (or be refused)
            return await self.claim()
        return None

    async def release(self) -> None:
        """At the end: mark the lease released (the shard is free at once); a failure only leaves it to lapse."""
        if not self.held:
            return
        self.mine.state = "released"
        try:
            await self._put(if_match=self._etag)
        except S3Error:
            return  # taken over, or S3 is away: it lapses on its own
        self.held = False

    async def _put(self, *, if_match: str | None) -> None:
        body = self.mine.to_json()
        md5 = hashlib.md5(body).digest()
        self._unconfirmed.append(single_etag(md5))
        try:
            etag, _ = await self.store.put(self.key, body, md5, content_type="application/json",
                                           if_match=if_match if self._conditional else None,
                                           if_none_match=self._conditional and if_match is None)
        except S3Error as exc:
            if exc.code == NOT_IMPLEMENTED and self._conditional:
                self._conditional = False  # a store without conditional writes: checks at start still hold
                return await self._put(if_match=None)
            raise
        self._etag = etag
        self._unconfirmed.clear()
