"""A store that refuses multipart uploads (S3's 501 NotImplemented, as S3-compatible stores without a
multipart API answer) still receives every segment: a segment larger than the part size goes up by one
PUT instead, said once, and the segments behind it are not held up; a segment over what one PUT takes is
a clear error naming it, and the others still go up. The store is the S3 protocol server with its
multipart calls refused (tests/s3_server.py, `refuse_multipart`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.s3.manifest import Manifest, manifest_key
from client.s3.store import S3Store, S3Url
from client.s3.uploader import SegmentUploader
from simulator.fleet import SimServerSpec
from tests.conftest import make_prompts, read_results, run_client
from tests.s3_server import BUCKET, S3Server, read_s3_results
from tests.test_s3_sync import write_segment

pytestmark = pytest.mark.usefixtures("aws_env")
KiB = 1024
PREFIX = "nomultipart"


@pytest.fixture
async def refusing(s3_private: S3Server) -> AsyncIterator[tuple[S3Server, S3Store]]:
    s3_private.refuse_multipart()
    async with S3Store(S3Url.parse(f"s3://{BUCKET}/{PREFIX}"), endpoint_url=s3_private.url) as store:
        yield s3_private, store


def uploader(store: S3Store, notes: list[str], **options: Any) -> SegmentUploader:
    return SegmentUploader(store, Manifest(writer="h-0of1", host="h", shard="0/1"), None, part_size=64 * KiB,
                           note=notes.append, **options)


async def test_segments_go_up_by_single_put_when_multipart_is_refused(
        tmp_path: Path, refusing: tuple[S3Server, S3Store]) -> None:
    server, store = refusing
    large = write_segment(tmp_path / "a", range(0, 300), filler=400)  # ~300 KiB: over the 64 KiB part size
    small = write_segment(tmp_path / "b", range(300, 310), run_id="u")
    assert large.size > 4 * 64 * KiB > small.size
    notes: list[str] = []
    up = uploader(store, notes)
    up.segment_closed(large)
    up.segment_closed(small)
    report = await up.drain(60, state="finished")
    assert (report.pending, report.uploaded, report.too_large) == (0, 2, ())
    assert len(notes) == 1 and "refuses multipart uploads (NotImplemented)" in notes[0], notes
    assert "by single PUT" in notes[0] and "5 GiB" in notes[0]
    stored = read_s3_results(server, BUCKET, PREFIX)
    assert sorted(r["id"] for r in stored) == [f"r{i:06d}" for i in range(310)]
    entry = up.manifest.segments[large.path.stem]
    assert "-" not in entry.etag, "one PUT, not parts"
    manifest = Manifest.from_json(server.get(BUCKET, f"{PREFIX}/{manifest_key('h-0of1')}"))
    assert manifest.state == "finished" and set(manifest.segments) == {large.path.stem, small.path.stem}


async def test_a_segment_over_one_put_is_a_clear_error(tmp_path: Path, refusing: tuple[S3Server, S3Store]) -> None:
    server, store = refusing
    large = write_segment(tmp_path / "a", range(0, 300), filler=400)
    small = write_segment(tmp_path / "b", range(300, 310), run_id="u")
    notes: list[str] = []
    up = uploader(store, notes, single_put_limit=128 * KiB)
    up.segment_closed(large)
    up.segment_closed(small)
    report = await up.drain(60, state="finished")
    assert report.pending == 0 and report.uploaded == 1
    [line] = report.too_large
    assert str(large.path) in line and "over the 128 KiB one PUT takes" in line
    assert "refuses multipart uploads" in line and "--segment-mb" in line
    assert notes[-1] == f"error: {line}"
    assert sorted(r["id"] for r in read_s3_results(server, BUCKET, PREFIX)) == [f"r{i:06d}" for i in range(300, 310)]
    assert large.path.exists(), "it stays on local disk"


@pytest.mark.slow
def test_a_run_to_a_store_without_multipart_exits_0(tmp_path: Path, fleet_factory: Any,
                                                    s3_private: S3Server) -> None:
    s3_private.refuse_multipart()
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0, extra_args=("--mean-tokens", "60"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 40)
    out = tmp_path / "out"
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                         "--segment-mb", "0.01", "--s3", f"s3://{BUCKET}/{PREFIX}", "--s3-endpoint-url",
                         s3_private.url])
    assert result.code == 0, result.stderr[-3000:]
    assert "every closed segment is uploaded and listed" in result.stderr
    stored = read_s3_results(s3_private, BUCKET, PREFIX)
    assert sorted(r["id"] for r in stored) == sorted(r["id"] for r in read_results(out)) != []
    [key] = s3_private.keys(BUCKET, f"{PREFIX}/manifests/")
    assert orjson.loads(s3_private.get(BUCKET, key))["state"] == "finished"
