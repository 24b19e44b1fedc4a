"""The shared results reader (locations, gzip, torn tails) and the histogram's pure parts."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import orjson
import pytest

from client.audit.png import histogram_png, log2_bins, short_count
from client.core.errors import ConfigError
from client.results.reader import ReadReport, iter_records, segment_files
from tests.results_fixture import result, write_segment


def test_locations_run_dir_segments_dir_and_file(tmp_path: Path) -> None:
    first = write_segment(tmp_path / "run", [result("a"), result("b")], name="h-0of1-r-00001")
    second = tmp_path / "run" / "segments" / "h-0of1-r-00002.jsonl.gz"
    second.write_bytes(gzip.compress(orjson.dumps(result("c")) + b"\n"))
    (tmp_path / "run" / "segments" / "h-0of1-r-00001.ids").write_text("a\nb\n")  # sidecars are not results
    assert segment_files(tmp_path / "run") == [first, second]
    assert segment_files(tmp_path / "run" / "segments") == [first, second]
    assert segment_files(first) == [first]
    report = ReadReport()
    found = [(item.where, item.line, record["id"]) for item, record in iter_records(str(tmp_path / "run"), report)]
    assert found == [(str(first), 1, "a"), (str(first), 2, "b"), (str(second), 1, "c")]
    assert (report.segments, report.lines, report.corrupt, report.torn_tails) == (2, 3, 0, 0)


def test_missing_and_empty_locations(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such results directory"):
        segment_files(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no result segments"):
        segment_files(tmp_path / "empty")


def test_bad_lines_are_counted_and_named_not_repaired(tmp_path: Path) -> None:
    path = write_segment(tmp_path / "run", [result("a")])
    with path.open("ab") as handle:
        handle.write(b"[1, 2]\n\n{broken\n" + orjson.dumps(result("b")) + b"\n" + b'{"id": "c", "mes')
    before = path.read_bytes()
    report = ReadReport()
    assert [r["id"] for _, r in iter_records(str(path), report)] == ["a", "b"]
    assert (report.corrupt, report.torn_tails) == (2, 1)
    assert [str(b).split(": ", 1)[0] for b in report.examples] == [f"{path}:2", f"{path}:4", f"{path}:6"]
    assert path.read_bytes() == before


@pytest.mark.parametrize(("lengths", "bins"), [
    ([], []),
    ([0], [1]),
    ([1, 2, 3, 4, 7, 8], [0, 1, 2, 2, 1]),
    ([6, 6, 6], [0, 0, 0, 3]),
    ([-5, 1024], [1] + [0] * 10 + [1]),
])
def test_log2_bins(lengths: list[int], bins: list[int]) -> None:
    assert log2_bins(lengths) == bins


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (999, "999"), (1000, "1K"), (1536, "1.5K"), (16384, "16K"),
                                             (2_000_000, "2M")])
def test_short_count(value: int, text: str) -> None:
    assert short_count(value) == text


def test_histogram_is_a_valid_png(tmp_path: Path) -> None:
    path = tmp_path / "h.png"
    histogram_png([6] * 870 + [900] * 130, path, short_tokens=16, title="STUBS")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(data):
        (size,) = struct.unpack(">I", data[offset:offset + 4])
        kind = data[offset + 4:offset + 8]
        body = data[offset + 8:offset + 8 + size]
        assert struct.unpack(">I", data[offset + 8 + size:offset + 12 + size])[0] == zlib.crc32(kind + body)
        chunks[kind] = body
        offset += 12 + size
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    pixels = zlib.decompress(chunks[b"IDAT"])
    assert len(pixels) == height * (1 + 3 * width)
    assert b"\xd2\x3c\x32" in pixels  # the stub bars are red
