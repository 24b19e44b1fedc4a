"""Result segments: append, rotate, sidecar id lists, and repair of what a crash leaves behind."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.errors import ConfigError, SinkError
from client.core.ids import decode_ledger
from client.local.ledger import read_done_ids, repair_torn_tail
from client.local.sink import ClosedSegment, ResultSink


def record(i: int) -> Any:
    return {"id": f"r{i}", "messages": [], "sampling": {}, "reasoning": "r" * 50, "content": "c", "tool_calls": [],
            "finish_reason": "stop", "usage": {"completion_tokens": 3}, "model": "m", "endpoint": "e",
            "timings": {"queued_s": 0, "ttft_s": 0, "total_s": 0}, "attempts": 1, "created": 0.0}


@pytest.mark.parametrize(("content", "kept"), [
    (b"", b""),
    (b'{"id":"a"}\n', b'{"id":"a"}\n'),
    (b'{"id":"a"}\n{"id":"b', b'{"id":"a"}\n'),
    (b'{"id":"a', b""),
    (b'{"id":"a"}\n{"id":"b"}\n{', b'{"id":"a"}\n{"id":"b"}\n'),
])
def test_repair_torn_tail(tmp_path: Path, content: bytes, kept: bytes) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(content)
    assert repair_torn_tail(path) == len(content) - len(kept)
    assert path.read_bytes() == kept


def test_rotation_by_size_writes_sidecars_and_reports(tmp_path: Path) -> None:
    closed: list[ClosedSegment] = []
    sink = ResultSink(tmp_path, run_id="t", max_segment_bytes=1000, on_segment_closed=closed.append)
    ResultSink.prepare(tmp_path)
    for i in range(20):
        sink.write_result(record(i))
    sink.close()
    segments = sorted((tmp_path / "segments").glob("*.jsonl"))
    assert len(segments) == len(closed) > 2
    assert sum(c.records for c in closed) == 20
    for segment in segments:
        ids = decode_ledger(segment.with_suffix(".ids").read_bytes())
        assert ids == [orjson.loads(line)["id"] for line in segment.read_bytes().splitlines()]
    done, report = read_done_ids(tmp_path / "segments")
    assert done == {f"r{i}" for i in range(20)} and report.records == 20


def test_crashed_segment_is_repaired_and_indexed(tmp_path: Path) -> None:
    ResultSink.prepare(tmp_path)
    sink = ResultSink(tmp_path, run_id="t")
    for i in range(3):
        sink.write_result(record(i))
    # A crash: no close, no sidecar, and half a line at the end.
    segment = next((tmp_path / "segments").glob("*.jsonl"))
    with segment.open("ab") as handle:
        handle.write(b'{"id":"r3","messages":[')
    done, report = read_done_ids(tmp_path / "segments")
    assert done == {"r0", "r1", "r2"}
    assert report.repaired_bytes > 0
    assert segment.with_suffix(".ids").exists()
    assert all(orjson.loads(line) for line in segment.read_bytes().splitlines())


def test_unwritable_out_is_a_config_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot be written"):
        ResultSink.prepare(blocker / "out")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full to simulate a full disk")
def test_full_disk_raises_sink_error_and_stops_writing(tmp_path: Path) -> None:
    ResultSink.prepare(tmp_path)
    sink = ResultSink(tmp_path, run_id="t")
    sink.write_result(record(0))
    assert sink._handle is not None
    # Swap the open segment's descriptor for /dev/full, which fails every write with ENOSPC.
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, sink._handle.fileno())
    os.close(full)
    with pytest.raises(SinkError, match="No space left"):
        sink.write_result(record(1))
    with pytest.raises(SinkError):
        sink.write_result(record(2))
    sink.close()
    segment = next((tmp_path / "segments").glob("*.jsonl"))
    assert not segment.with_suffix(".ids").exists(), "a failed segment must be rescanned, not trusted"
    done, _ = read_done_ids(tmp_path / "segments")
    assert done == {"r0"}
