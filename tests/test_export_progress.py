"""The export's progress: records read of those the run holds, rows checked, the rate and the time left,
as a plain line every 30 seconds when stderr is not a terminal (a fake clock here, never the wall clock),
and the records a run holds counted before reading them, from its sidecars."""

from __future__ import annotations

import io
from pathlib import Path

from client.export.progress import ExportProgress, Figures, line
from client.results.reader import ReadReport, expected_records, iter_records, segment_files
from tests.results_fixture import result, write_segment


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_line_says_rows_rate_and_time_left() -> None:
    figures = Figures(read=120_000, checked=118_500, total=914_000, elapsed_s=300.0)
    assert line(figures) == ("export: 120,000 of 914,000 records (13.1%), 118,500 checked, 400 records/s, "
                             "33m05s left, 5m00s so far")
    assert line(Figures(read=0, checked=0, total=None, elapsed_s=0.0)) == (
        "export: 0 records, 0 checked, - records/s, 0s so far")


def test_a_plain_line_every_30_seconds_when_not_a_terminal() -> None:
    clock, stream, counts = Clock(), io.StringIO(), [0, 0]
    with ExportProgress(lambda: (counts[0], counts[1], 100), stream=stream, clock=clock) as progress:
        assert not progress.live  # a StringIO is no terminal
        for _ in range(40):
            counts[0] += 1
            counts[1] += 1
            clock.now += 1.0
            progress.tick()
    lines = stream.getvalue().splitlines()
    assert lines == ["export: 30 of 100 records (30.0%), 30 checked, 1.0 records/s, 1m10s left, 30s so far"]


# A stream that failed is remembered by its id (client.core.human_out): held here, so that no later test's
# stream can be given its id.
BROKEN: list[io.StringIO] = []


def test_a_stream_that_cannot_be_written_stops_the_progress_not_the_export() -> None:
    clock, stream = Clock(), io.StringIO()
    BROKEN.append(stream)
    progress = ExportProgress(lambda: (1, 1, None), stream=stream, clock=clock)
    stream.close()
    with progress:
        for _ in range(3):
            clock.now += 31.0
            progress.tick()
    assert progress.stopped


def test_the_records_a_run_holds_are_counted_before_they_are_read(tmp_path: Path) -> None:
    segment = write_segment(tmp_path / "run", [result(f"r{i}") for i in range(7)])
    assert expected_records(segment_files(tmp_path / "run")) == 7  # no sidecar: the segment's own lines
    segment.with_suffix(".ids").write_text("".join(f'"r{i}"\n' for i in range(7)))
    assert expected_records(segment_files(tmp_path / "run")) == 7
    reading = ReadReport()
    assert sum(1 for _ in iter_records(str(tmp_path / "run"), reading)) == 7
    assert reading.expected == 7


def test_on_a_terminal_the_bar_goes_and_its_last_figures_stay() -> None:
    clock, stream = Clock(), io.StringIO()
    with ExportProgress(lambda: (5, 4, 10), stream=stream, live=True, clock=clock):
        clock.now += 10.0
    assert stream.getvalue().splitlines()[-1] == ("export: 5 of 10 records (50.0%), 4 checked, 0.5 records/s, "
                                                  "10s left, 10s so far")
