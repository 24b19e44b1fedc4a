"""One closed segment to S3: its body (gzip when asked; multipart when larger than the part size and the
store takes multipart uploads, else one PUT), its id index, and the check of both against the bytes sent
(the ETag S3 reports must be the one those bytes give, and the length must match).

A store that refuses multipart uploads (S3's `NotImplemented`: some S3-compatible stores have no
multipart API) is found at the first large segment: from then on every segment goes up by a single PUT,
said once through `note`. A single PUT holds the body in memory and takes at most `SINGLE_PUT_LIMIT`
bytes (S3's 5 GiB); a larger segment cannot go up to such a store and is a SegmentTooLarge, which names
the segment, its size, the limit and what to change. Everything else the store refuses is an S3Error,
which the uploader retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from client.core.errors import SegmentTooLarge
from client.core.ids import decode_ledger
from client.local.sink import ClosedSegment
from client.s3.manifest import SegmentEntry, encode_ids, ids_key, multipart_etag, same_etag, segment_key, single_etag
from client.s3.store import S3Error, S3Store

READ_BLOCK = 4 << 20
# The largest object one PUT may store (S3's limit; the part limit of a multipart upload is the same).
SINGLE_PUT_LIMIT = 5 << 30
NOT_IMPLEMENTED = "NotImplemented"


@dataclass(frozen=True, slots=True)
class PendingSegment:
    """A closed local segment not yet listed in a manifest. `closed_at` is wall-clock time."""

    name: str
    path: Path
    ids_path: Path
    records: int
    size: int
    completion_tokens: int
    closed_at: float

    @classmethod
    def from_closed(cls, segment: ClosedSegment) -> PendingSegment:
        return cls(segment.path.stem, segment.path, segment.ids_path, segment.records, segment.size,
                   segment.completion_tokens, time.time())


class BodyReader:
    """A segment file read as upload parts of at least `part_size` bytes (the last may be smaller), gzip
    on the fly when asked; MD5 per part, SHA-256 of the whole body. Blocking: call it in a thread."""

    def __init__(self, path: Path, gzipped: bool, part_size: int) -> None:
        self._file: BinaryIO = path.open("rb")
        self._remaining = path.stat().st_size
        self._compressor = zlib.compressobj(6, zlib.DEFLATED, 31) if gzipped else None  # 31: gzip container
        self.part_size = part_size
        self.sha256 = hashlib.sha256()
        self.total = 0
        self.eof = False

    def next_part(self) -> tuple[bytes, bytes]:
        chunks: list[bytes] = []
        size = 0
        while size < self.part_size and not self.eof:
            # Uncompressed parts come out exactly part_size long; gzip output size is only known after.
            wanted = READ_BLOCK if self._compressor else min(READ_BLOCK, self.part_size - size)
            block = self._file.read(max(1, min(wanted, self._remaining)))
            self._remaining -= len(block)
            if not block or self._remaining <= 0:
                self.eof = True
            data = self._compressor.compress(block) if self._compressor else block
            if self.eof and self._compressor:
                data += self._compressor.flush()
            chunks.append(data)
            size += len(data)
        part = b"".join(chunks)
        self.sha256.update(part)
        self.total += len(part)
        return part, hashlib.md5(part).digest()

    def close(self) -> None:
        self._file.close()


def _read_ids_blob(path: Path) -> bytes:
    return encode_ids(decode_ledger(path.read_bytes()))


class _MultipartRefused(Exception):
    """The store answered NotImplemented to a multipart call."""


class SegmentPut:
    """Uploads segments to one store; remembers whether the store takes multipart uploads."""

    def __init__(self, store: S3Store, *, gzipped: bool, part_size: int,
                 single_put_limit: int = SINGLE_PUT_LIMIT, note: Callable[[str], None] = lambda line: None) -> None:
        self.store = store
        self.gzipped = gzipped
        self.part_size = part_size
        self.single_put_limit = single_put_limit
        self.note = note
        self.multipart = True  # until the store refuses it

    async def upload(self, segment: PendingSegment) -> SegmentEntry:
        """Upload and verify `segment`; SegmentTooLarge, S3Error, OSError (the local file)."""
        try:
            return await self._upload(segment)
        except _MultipartRefused:
            self.multipart = False
            self.note(f"the store refuses multipart uploads ({NOT_IMPLEMENTED}): segments go up by single PUT "
                      f"from now on, each up to {_gib(self.single_put_limit)}")
            return await self._upload(segment)

    def _too_large(self, segment: PendingSegment, size: int) -> SegmentTooLarge:
        return SegmentTooLarge(
            f"{segment.path} is {_gib(size)} to store, over the {_gib(self.single_put_limit)} one PUT takes, and "
            "the store refuses multipart uploads: it stays on local disk and is not in S3. Copy it up with a "
            "tool that splits it, or use a store with multipart uploads; rotate segments smaller "
            "(--segment-mb) so later ones fit")

    async def _upload(self, segment: PendingSegment) -> SegmentEntry:
        if not self.multipart and not self.gzipped and segment.size > self.single_put_limit:
            raise self._too_large(segment, segment.size)
        key = segment_key(segment.name, self.gzipped)
        content_type = "application/gzip" if self.gzipped else "application/x-ndjson"
        # Without multipart the whole body is one part: read up to one byte past the limit to tell.
        part_size = self.part_size if self.multipart else self.single_put_limit + 1
        reader = await asyncio.to_thread(BodyReader, segment.path, self.gzipped, part_size)
        try:
            part, md5 = await asyncio.to_thread(reader.next_part)
            if reader.eof and reader.total <= self.single_put_limit:
                etag, encryption = await self.store.put(key, part, md5, content_type=content_type)
                expected = single_etag(md5)
            elif not self.multipart:
                raise self._too_large(segment, reader.total)
            else:
                etag, encryption, expected = await self._upload_multipart(key, content_type, reader, part, md5)
        finally:
            reader.close()
        await self._verify(key, reader.total, expected, etag, encryption)
        ids_blob = await asyncio.to_thread(_read_ids_blob, segment.ids_path)
        ids_md5 = hashlib.md5(ids_blob).digest()
        ids_etag, ids_encryption = await self.store.put(ids_key(segment.name), ids_blob, ids_md5,
                                                        content_type="application/gzip")
        if not ids_encryption.startswith("aws:kms") and not same_etag(ids_etag, single_etag(ids_md5)):
            raise S3Error(f"checksum mismatch on {ids_key(segment.name)}: S3 reports {ids_etag}")
        return SegmentEntry(
            name=segment.name, key=key, ids_key=ids_key(segment.name), records=segment.records,
            completion_tokens=segment.completion_tokens, bytes=segment.size, stored_bytes=reader.total,
            gzip=self.gzipped, sha256=reader.sha256.hexdigest(), etag=etag.strip('"'),
            ids_sha256=hashlib.sha256(ids_blob).hexdigest(), uploaded=time.time(),
        )

    async def _upload_multipart(self, key: str, content_type: str, reader: BodyReader, part: bytes,
                                md5: bytes) -> tuple[str, str, str]:
        try:
            upload_id = await self.store.create_multipart(key, content_type)
        except S3Error as exc:
            if exc.code == NOT_IMPLEMENTED:
                raise _MultipartRefused from exc
            raise
        md5s: list[bytes] = []
        etags: list[str] = []
        try:
            while True:
                md5s.append(md5)
                etags.append(await self.store.upload_part(key, upload_id, len(md5s), part, md5))
                if reader.eof:
                    break
                part, md5 = await asyncio.to_thread(reader.next_part)
            etag, encryption = await self.store.complete_multipart(key, upload_id, etags)
        except S3Error as exc:
            # Best effort: an upload left behind is aborted at the next start-up anyway.
            with contextlib.suppress(S3Error):
                await self.store.abort_multipart(key, upload_id)
            if exc.code == NOT_IMPLEMENTED:
                raise _MultipartRefused from exc
            raise
        return etag, encryption, multipart_etag(md5s)

    async def _verify(self, key: str, size: int, expected: str, reported: str, encryption: str) -> None:
        info = await self.store.head(key)
        if info is None:
            raise S3Error(f"{key} is missing right after its upload")
        if info.size != size:
            raise S3Error(f"{key}: S3 holds {info.size} bytes, {size} were sent")
        # With SSE-KMS the ETag is not an MD5; S3 has still checked each body against its Content-MD5.
        matches = same_etag(reported, expected) and same_etag(info.etag, expected)
        if not encryption.startswith("aws:kms") and not matches:
            raise S3Error(f"checksum mismatch on {key}: S3 reports ETag {info.etag}, the bytes sent give {expected}")


def _gib(size: int) -> str:
    """A size as people read it: "5 GiB", "2.77 MiB", "128 KiB"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size / (1 << shift):.3g} {unit}"
    return f"{size} bytes"
