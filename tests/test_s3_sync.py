"""The S3 sync parts on their own: codecs and parts (pure), then the uploader and the start-up against a
real S3 protocol server (moto in a subprocess): multipart, gzip, checksums, manifest conflicts, crash
leftovers, and a bounded drain while S3 is down."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.durations import format_duration
from client.core.errors import ConfigError
from client.core.ids import decode_ledger, shard_of
from client.local.sink import ClosedSegment, ResultSink
from client.local.source import Shard
from client.s3.manifest import Manifest, SegmentEntry, decode_ids, encode_ids, manifest_key, multipart_etag
from client.s3.resume import commit, fetch_ids, start
from client.s3.segment_upload import BodyReader, PendingSegment
from client.s3.store import S3AccessError, S3Conflict, S3Error, S3Store, S3Unavailable, S3Url
from client.s3.uploader import ManifestConflict, SegmentUploader
from tests.s3_server import BUCKET, S3Server

# The pure tests need no S3 server (and carry no s3 marker), but none may see the host's AWS settings.
pytestmark = pytest.mark.usefixtures("aws_env")
MiB = 1 << 20


@pytest.fixture
async def store(s3: S3Server, s3_prefix: str) -> AsyncIterator[S3Store]:
    """A store on the shared server, under this test's own prefix."""
    async with S3Store(S3Url.parse(f"s3://{BUCKET}/{s3_prefix}"), endpoint_url=s3.url) as opened:
        yield opened


def result(i: int, *, filler: int = 40, tokens: int = 7) -> Any:
    return {"id": f"r{i:06d}", "messages": [], "sampling": {}, "reasoning": os.urandom(filler).hex(),
            "content": "c", "tool_calls": [], "finish_reason": "stop", "usage": {"completion_tokens": tokens},
            "model": "m", "endpoint": "e", "timings": {"queued_s": 0, "ttft_s": 0, "total_s": 0}, "attempts": 1,
            "created": 0.0}


def write_segment(out: Path, ids: range, *, run_id: str = "t", filler: int = 40) -> ClosedSegment:
    """One closed local segment holding `ids`, written by the real sink."""
    closed: list[ClosedSegment] = []
    ResultSink.prepare(out)
    sink = ResultSink(out, run_id=run_id, max_segment_bytes=1 << 40, on_segment_closed=closed.append)
    for i in ids:
        sink.write_result(result(i, filler=filler))
    sink.close()
    return closed[0]


def uploader_for(store: S3Store, writer: str = "h-0of1", **options: Any) -> SegmentUploader:
    return SegmentUploader(store, Manifest(writer=writer, host="h", shard="0/1"), None, **options)


# -- pure parts ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "bucket", "prefix"), [
    ("s3://bucket", "bucket", ""),
    ("s3://bucket/", "bucket", ""),
    ("s3://my.bucket-1/a/b/", "my.bucket-1", "a/b/"),
    ("s3://bucket/run1", "bucket", "run1/"),
])
def test_s3_url_parse(text: str, bucket: str, prefix: str) -> None:
    url = S3Url.parse(text)
    assert (url.bucket, url.prefix) == (bucket, prefix)
    assert url.relative(url.key("manifests/x.json")) == "manifests/x.json"


@pytest.mark.parametrize("text", ["bucket/prefix", "s3://", "s3://UPPER/x", "https://bucket/x"])
def test_s3_url_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        S3Url.parse(text)


def test_manifest_round_trip_and_ids_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = SegmentEntry(name="n", key="segments/n.jsonl", ids_key="segments/n.ids.gz", records=2,
                         completion_tokens=9, bytes=10, stored_bytes=10, gzip=False, sha256="s", etag="e",
                         ids_sha256="i", uploaded=1.5)
    manifest = Manifest(writer="h-0of2", host="h", shard="0/2", run="r", failed=3, segments={"n": entry})
    again = Manifest.from_json(manifest.to_json())
    assert again.segments == {"n": entry}
    assert (again.writer, again.shard, again.failed) == ("h-0of2", "0/2", 3)
    assert (again.records, again.completion_tokens) == (2, 9)
    # The same ids give the same bytes at any time (a re-upload has the same checksum): gzip would stamp
    # the clock into its header, so the two encodings are made a day apart on the clock gzip reads.
    clock = iter([1_700_000_000.0, 1_700_086_400.0])
    with monkeypatch.context() as patched:
        patched.setattr(gzip.time, "time", lambda: next(clock))
        first, second = encode_ids(["a", "b"]), encode_ids(["a", "b"])
    assert first == second, "the same ids give the same bytes"
    assert decode_ids(encode_ids(["a", "b"])) == ["a", "b"]
    with pytest.raises(ValueError, match="unreadable manifest"):
        Manifest.from_json(b'{"kind": "something else"}')


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59, "59s"), (61, "1m01s"), (3600, "1h00m"),
                                               (7322, "2h02m")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(("size", "part", "gzipped", "parts"), [
    (0, 100, False, 1), (99, 100, False, 1), (100, 100, False, 1), (101, 100, False, 2), (1000, 100, False, 10),
    (5000, 1000, True, None),
])
def test_body_reader_parts(tmp_path: Path, size: int, part: int, gzipped: bool, parts: int | None) -> None:
    path = tmp_path / "s.jsonl"
    data = os.urandom(size).hex().encode()[:size]
    path.write_bytes(data)
    reader = BodyReader(path, gzipped, part)
    got: list[bytes] = []
    while not reader.eof:
        chunk, md5 = reader.next_part()
        assert md5 == hashlib.md5(chunk).digest()
        got.append(chunk)
        assert reader.eof or len(chunk) >= part, "only the last part may be small"
    reader.close()
    body = b"".join(got)
    assert (gzip.decompress(body) if gzipped else body) == data
    assert reader.sha256.hexdigest() == hashlib.sha256(body).hexdigest() and reader.total == len(body)
    if parts is not None:
        assert len(got) == parts


@pytest.mark.parametrize(("code", "status", "kind", "says"), [
    ("AccessDenied", 403, S3AccessError, "access denied"),
    ("InvalidAccessKeyId", 403, S3AccessError, "check the AWS credentials"),
    ("NoSuchBucket", 404, S3AccessError, "does not exist"),
    ("SlowDown", 503, S3Unavailable, "busy"),
    ("InternalError", 500, S3Unavailable, "busy"),
    ("PreconditionFailed", 412, S3Conflict, "conditional write"),
    ("InvalidArgument", 400, S3Error, "refused"),
])
def test_client_errors_map_onto_the_error_tree(code: str, status: int, kind: type[Exception], says: str) -> None:
    from botocore.exceptions import ClientError

    store = S3Store(S3Url.parse("s3://bucket/run"))
    error = ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                        "PutObject")
    mapped = store._map(error, "upload x")
    assert type(mapped) is kind and says in str(mapped)


def test_transport_errors_are_unavailable() -> None:
    from botocore.exceptions import EndpointConnectionError

    mapped = S3Store(S3Url.parse("s3://bucket/run"))._map(EndpointConnectionError(endpoint_url="http://x"), "list")
    assert isinstance(mapped, S3Unavailable) and "cannot reach S3" in str(mapped)


def test_status_shard_hash_is_the_source_hash() -> None:
    for i in range(200):
        for n in (1, 2, 3, 7):
            assert Shard(shard_of(f"id{i}", n), n).owns(f"id{i}")


# -- the uploader against S3 ---------------------------------------------------------------------------

@pytest.mark.parametrize("gzipped", [False, True])
async def test_multipart_upload_is_verified_and_listed(tmp_path: Path, s3: S3Server, store: S3Store,
                                                       gzipped: bool) -> None:
    segment = write_segment(tmp_path / "out", range(3000), filler=2000)  # ~12 MiB, half of it compressible
    assert segment.size > 2 * 5 * MiB
    uploader = uploader_for(store, gzipped=gzipped, part_size=5 * MiB)
    uploader.segment_closed(segment)
    report = await uploader.drain(60, state="finished")
    assert report.pending == 0 and report.uploaded == 1
    entry = uploader.manifest.segments[segment.path.stem]
    body = s3.get(BUCKET, store.url.key(entry.key))
    assert entry.etag.endswith("-2" if gzipped else "-3"), "went up in parts"
    if not gzipped:  # plain parts are exactly the part size, so the ETag can be recomputed here
        parts = [body[i:i + 5 * MiB] for i in range(0, len(body), 5 * MiB)]
        assert entry.etag == multipart_etag([hashlib.md5(p).digest() for p in parts])
    assert (gzip.decompress(body) if gzipped else body) == segment.path.read_bytes()
    assert entry.sha256 == hashlib.sha256(body).hexdigest() and entry.records == 3000
    assert entry.completion_tokens == 7 * 3000
    stored = Manifest.from_json(s3.get(BUCKET, store.url.key(manifest_key("h-0of1"))))
    assert stored.state == "finished" and list(stored.segments) == [segment.path.stem]
    assert not s3.client().list_multipart_uploads(Bucket=BUCKET, Prefix=store.url.prefix).get("Uploads")


async def test_delete_uploaded_removes_local_files_only_after_the_manifest(tmp_path: Path, store: S3Store) -> None:
    segment = write_segment(tmp_path / "out", range(10))
    uploader = uploader_for(store, delete_uploaded=True)
    uploader.segment_closed(segment)
    assert uploader.view().pending == 1
    await uploader.drain(30, state="finished")
    assert not segment.path.exists() and not segment.ids_path.exists()
    assert uploader.view().pending == 0 and uploader.view().uploaded == 1


async def test_second_writer_with_the_same_name_is_caught(tmp_path: Path, store: S3Store) -> None:
    first = uploader_for(store)
    await first.write_manifest()
    second = uploader_for(store)
    second.segment_closed(write_segment(tmp_path / "out", range(3)))
    # The conflict is raised: in a run it ends the swarm's TaskGroup with it.
    with pytest.raises(ManifestConflict) as raised:
        async with asyncio.timeout(30):
            await second.run()
    assert second.fatal is raised.value
    assert "same host name and shard" in str(second.fatal)
    await first.write_manifest()  # the first writer is untouched and goes on


class LostReplyStore:
    """The real store, except that the next manifest PUT is stored and then its reply is lost, as when the
    connection drops after S3 has written the object."""

    def __init__(self, store: S3Store) -> None:
        self._store = store
        self.lose_next_reply = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def put(self, key: str, body: bytes, md5_digest: bytes, **options: Any) -> tuple[str, str]:
        stored = await self._store.put(key, body, md5_digest, **options)
        if self.lose_next_reply and "/manifests/" in f"/{key}":
            self.lose_next_reply = False
            raise S3Unavailable(f"connection lost after sending PUT {key}")
        return stored


async def test_a_lost_manifest_reply_is_recognised_as_our_own_write(s3: S3Server, store: S3Store) -> None:
    lossy = LostReplyStore(store)
    uploader = SegmentUploader(lossy, Manifest(writer="h-0of1", host="h", shard="0/1"), None)  # type: ignore[arg-type]
    await uploader.write_manifest()
    # The next PUT is stored, but its reply never arrives: the uploader only knows what it sent.
    uploader.manifest.state = "stopped"
    lossy.lose_next_reply = True
    with pytest.raises(S3Unavailable, match="connection lost"):
        await uploader.write_manifest()
    stored = s3.get(BUCKET, store.url.key(manifest_key("h-0of1")))
    assert Manifest.from_json(stored).state == "stopped", "the lost write was stored"
    # If-Match now fails (S3 holds the lost write, not the last confirmed one); the stored ETag is one this
    # uploader sent, so it adopts it and writes again instead of reporting a second writer.
    uploader.manifest.state = "finished"
    await uploader.write_manifest()
    assert uploader.fatal is None
    assert Manifest.from_json(s3.get(BUCKET, store.url.key(manifest_key("h-0of1")))).state == "finished"
    # And the write after that is conditional on the adopted ETag again: it holds.
    uploader.manifest.state = "running"
    await uploader.write_manifest()
    assert Manifest.from_json(s3.get(BUCKET, store.url.key(manifest_key("h-0of1")))).state == "running"


async def test_drain_is_bounded_while_s3_is_down(tmp_path: Path) -> None:
    url = S3Url.parse(f"s3://{BUCKET}/down")
    async with S3Store(url, endpoint_url="http://127.0.0.1:9", connect_timeout=1, attempts=1) as dead:
        uploader = uploader_for(dead, max_backoff_s=0.5)
        uploader.segment_closed(write_segment(tmp_path / "out", range(5)))
        async with asyncio.timeout(20):
            report = await uploader.drain(2.0, state="finished")
        assert report.pending == 1 and "cannot reach S3" in report.last_error
        assert "cannot reach S3" in uploader.view().last_error
        skip = asyncio.Event()
        skip.set()
        async with asyncio.timeout(60):
            assert (await uploader.drain(600, state="finished", skip=skip)).pending == 1


# -- start-up ------------------------------------------------------------------------------------------

async def test_start_reads_s3_ids_filters_overlap_and_cleans_up(tmp_path: Path, s3: S3Server, store: S3Store) -> None:
    # Another host uploaded ids 0..99; this host holds a never-uploaded segment with ids 90..129.
    other = uploader_for(store, writer="other-0of1")
    other.segment_closed(write_segment(tmp_path / "other", range(100), run_id="o"))
    await other.drain(30, state="finished")
    out = tmp_path / "mine"
    mine = write_segment(out, range(90, 130), run_id="m")
    # A multipart upload a crash of this writer left behind, and one of another writer (kept).
    writer = "me-0of1"
    s3.client().create_multipart_upload(Bucket=BUCKET, Key=store.url.key(f"segments/{writer}-x-00001.jsonl"))
    s3.client().create_multipart_upload(Bucket=BUCKET, Key=store.url.key("segments/other-0of1-y-00001.jsonl"))

    done = {f"r{i:06d}" for i in range(90, 130)}
    found = await start(store, segments_dir=out / "segments", writer=writer, host="me", shard="0/1",
                        run_id="r2", sync_interval_s=5, done=done)
    assert found.aborted_uploads == 0 and found.duplicates and len(mine.path.read_bytes().splitlines()) == 40, (
        "start changes nothing: the clean-up waits for commit")
    await commit(store, found, writer=writer)
    assert done == {f"r{i:06d}" for i in range(130)}
    assert found.s3_ids_added == 90 and found.s3_segments == 1 and found.manifests == 1
    assert found.aborted_uploads == 1
    uploads = s3.client().list_multipart_uploads(Bucket=BUCKET, Prefix=store.url.prefix).get("Uploads", [])
    assert [u["Key"].rsplit("/", 1)[1] for u in uploads] == ["other-0of1-y-00001.jsonl"]
    assert found.manifest.writer == writer and found.etag is None and found.manifest.run == "r2"
    assert [p.name for p in found.pending] == [mine.path.stem] and found.dropped
    kept = [orjson.loads(line)["id"] for line in mine.path.read_bytes().splitlines()]
    assert kept == [f"r{i:06d}" for i in range(100, 130)], "lines already in S3 were dropped before upload"
    assert decode_ledger(mine.ids_path.read_bytes()) == kept and found.pending[0].records == 30


async def test_start_deletes_uploaded_local_segments_when_asked(tmp_path: Path, store: S3Store) -> None:
    out = tmp_path / "out"
    segment = write_segment(out, range(20))
    uploader = uploader_for(store, writer="me-0of1")
    uploader.add(PendingSegment.from_closed(segment))
    await uploader.drain(30, state="stopped")
    assert segment.path.exists()
    done: set[str] = set()
    found = await start(store, segments_dir=out / "segments", writer="me-0of1", host="me", shard="0/1",
                        run_id="r", sync_interval_s=5, done=done)
    assert segment.path.exists()
    await commit(store, found, writer="me-0of1", delete_uploaded=True)
    assert found.deleted_local == 1 and not segment.path.exists() and not found.pending
    assert found.s3_ids_added == 0, "ids of local segments are read locally, not again from S3"


async def test_ids_come_from_the_segment_when_its_index_is_gone(tmp_path: Path, s3: S3Server, store: S3Store) -> None:
    uploader = uploader_for(store)
    segment = write_segment(tmp_path / "out", range(25))
    uploader.segment_closed(segment)
    await uploader.drain(30, state="finished")
    entry = uploader.manifest.segments[segment.path.stem]
    s3.client().delete_object(Bucket=BUCKET, Key=store.url.key(entry.ids_key))
    assert await fetch_ids(store, entry) == [f"r{i:06d}" for i in range(25)]


async def test_an_unreadable_manifest_stops_the_start(tmp_path: Path, store: S3Store) -> None:
    await store.put(manifest_key("bad"), b"{not json", hashlib.md5(b"{not json").digest())
    with pytest.raises(ConfigError, match="unreadable manifest"):
        await start(store, segments_dir=tmp_path, writer="me-0of1", host="me", shard="0/1", run_id="r",
                    sync_interval_s=5, done=set())
