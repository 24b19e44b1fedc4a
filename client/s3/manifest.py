"""The S3 layout of a run and the manifest format: pure data and codecs, no I/O.

Under the run's prefix:
    segments/<name>.jsonl[.gz]   a closed result segment, as written locally (gzip when --s3-gzip)
    segments/<name>.ids.gz       its id index: the segment's ids, one per line, gzip
    manifests/<writer>.json      one manifest per writer (`<host>-<K>of<N>`), listing its uploaded segments

Each writer only ever writes its own manifest, so many hosts share one prefix without racing. A segment
counts as uploaded only once a manifest lists it: an object with no manifest entry is an interrupted
upload and is ignored (and overwritten when its writer uploads it again under the same name).
"""

from __future__ import annotations

import gzip
import hashlib
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from client.core.ids import decode_ledger, encode_ledger

SEGMENTS_PREFIX = "segments/"
MANIFESTS_PREFIX = "manifests/"
FORMAT = 1
KIND = "regen-swarm manifest"


def manifest_key(writer: str) -> str:
    return f"{MANIFESTS_PREFIX}{writer}.json"


def segment_key(name: str, gzipped: bool) -> str:
    return f"{SEGMENTS_PREFIX}{name}.jsonl" + (".gz" if gzipped else "")


def ids_key(name: str) -> str:
    return f"{SEGMENTS_PREFIX}{name}.ids.gz"


def writer_name(host: str, shard_label: str) -> str:
    return f"{host}-{shard_label}"


def encode_ids(ids: Iterable[str]) -> bytes:
    # mtime=0: the same ids give the same bytes, so a re-upload has the same checksum.
    return gzip.compress(encode_ledger(ids), compresslevel=6, mtime=0)


def decode_ids(blob: bytes) -> list[str]:
    return decode_ledger(gzip.decompress(blob))


def single_etag(md5_digest: bytes) -> str:
    """The ETag S3 gives an object stored by one PUT (without SSE-KMS): the hex MD5 of its bytes."""
    return md5_digest.hex()


def multipart_etag(part_md5s: list[bytes]) -> str:
    """The ETag S3 gives a multipart object: the MD5 of the parts' MD5s, then `-<number of parts>`."""
    return hashlib.md5(b"".join(part_md5s)).hexdigest() + f"-{len(part_md5s)}"


def same_etag(a: str, b: str) -> bool:
    return a.strip('"') == b.strip('"')


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One uploaded, verified segment. `bytes` is the local (uncompressed) size; `stored_bytes` the object's."""

    name: str
    key: str
    ids_key: str
    records: int
    completion_tokens: int
    bytes: int
    stored_bytes: int
    gzip: bool
    sha256: str
    etag: str
    ids_sha256: str
    uploaded: float

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SegmentEntry:
        return cls(
            name=str(obj["name"]), key=str(obj["key"]), ids_key=str(obj["ids_key"]),
            records=int(obj["records"]), completion_tokens=int(obj.get("completion_tokens", 0)),
            bytes=int(obj["bytes"]), stored_bytes=int(obj["stored_bytes"]), gzip=bool(obj.get("gzip", False)),
            sha256=str(obj["sha256"]), etag=str(obj["etag"]), ids_sha256=str(obj.get("ids_sha256", "")),
            uploaded=float(obj["uploaded"]),
        )


def listed_problem(entry: SegmentEntry, size: int | None, etag: str | None) -> str | None:
    """Why the object a listing shows for `entry` is not the one uploaded (None when it is): missing, another
    size, or another ETag. A listing gives both for every object at once, so this costs no segment read."""
    if size is None:
        return "missing from the bucket"
    if size != entry.stored_bytes:
        return f"{size:,} bytes in the bucket, {entry.stored_bytes:,} in the manifest (truncated or replaced)"
    if etag is not None and entry.etag and not same_etag(etag, entry.etag):
        return f"ETag {etag.strip(chr(34))} in the bucket, {entry.etag} in the manifest (replaced)"
    return None


def body_problem(entry: SegmentEntry, body: bytes) -> str | None:
    """Why `body` (the object as read) is not the segment the manifest lists (None when it is)."""
    if len(body) != entry.stored_bytes:
        return f"{len(body):,} bytes read, {entry.stored_bytes:,} in the manifest (truncated or replaced)"
    if entry.sha256 and hashlib.sha256(body).hexdigest() != entry.sha256:
        return "its sha256 differs from the manifest's (damaged or replaced)"
    return None


def _iso(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


@dataclass
class Manifest:
    """What one writer has uploaded, plus what `client.status` shows without reading any segment.

    `failed` counts the prompts that failed after all attempts in the writer's latest run (they are
    retried by the next run); `state` is "running" while a run is on, then "finished" or "stopped".
    """

    writer: str
    host: str
    shard: str
    run: str = ""
    state: str = "running"
    sync_interval_s: float = 0.0
    started: float = field(default_factory=time.time)
    updated: float = 0.0
    failed: int = 0
    segments: dict[str, SegmentEntry] = field(default_factory=dict)
    # Who writes it now: the lease that keeps two live writers of one name apart (client.s3.lease).
    machine: str = ""
    pid: int = 0
    # Where the shard came from: "--shard K/N", or the scheduler's variables with --shard auto.
    shard_source: str = ""
    # Not stored: how old the manifest was when read, on S3's clock (client.s3.store.object_age); None
    # for one built here or read without a date. The lease rules judge liveness by it (client.s3.lease).
    age_s: float | None = None

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments.values())

    @property
    def completion_tokens(self) -> int:
        return sum(s.completion_tokens for s in self.segments.values())

    @property
    def last_upload(self) -> float | None:
        return max((s.uploaded for s in self.segments.values()), default=None)

    def to_json(self) -> bytes:
        self.updated = time.time()
        return orjson.dumps({
            "kind": KIND,
            "format": FORMAT,
            "writer": self.writer,
            "host": self.host,
            "machine": self.machine,
            "pid": self.pid,
            "shard": self.shard,
            "shard_source": self.shard_source,
            "run": self.run,
            "state": self.state,
            "sync_interval_s": self.sync_interval_s,
            "started": self.started,
            "updated": self.updated,
            "updated_utc": _iso(self.updated),
            "failed": self.failed,
            "totals": {"segments": len(self.segments), "records": self.records,
                       "completion_tokens": self.completion_tokens},
            "segments": [asdict(s) for s in self.segments.values()],
        }, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, blob: bytes, *, source: str = "manifest") -> Manifest:
        """Parse a manifest; a ValueError names `source` and what is wrong."""
        try:
            obj = orjson.loads(blob)
            if not isinstance(obj, dict) or obj.get("kind") != KIND:
                raise ValueError("not a regen-swarm manifest")
            if int(obj.get("format", 0)) > FORMAT:
                raise ValueError(f"format {obj.get('format')} is newer than this client understands ({FORMAT})")
            entries = [SegmentEntry.from_json(s) for s in obj.get("segments", [])]
            return cls(
                writer=str(obj["writer"]), host=str(obj.get("host", "")), shard=str(obj.get("shard", "0/1")),
                run=str(obj.get("run", "")), state=str(obj.get("state", "")),
                sync_interval_s=float(obj.get("sync_interval_s", 0.0)), started=float(obj.get("started", 0.0)),
                updated=float(obj.get("updated", 0.0)), failed=int(obj.get("failed", 0)),
                segments={e.name: e for e in entries},
                machine=str(obj.get("machine", "")), pid=int(obj.get("pid", 0)),
                shard_source=str(obj.get("shard_source", "")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: unreadable manifest: {exc}") from exc
