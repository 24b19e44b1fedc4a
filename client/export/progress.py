"""The export's progress on stderr: records read of those the run holds, rows checked by the template
check, the rate and the time left. On a terminal a rich bar, redrawn twice a second; otherwise (a log, a
pipe, a batch job) a plain line every 30 seconds, so that a check of hours is never hours of silence.

The figures are the pass's own counts (client.export.build), read through a snapshot function; this module
draws them and never changes them. The rich view redraws from its own thread and only reads integers.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.text import Text

from client.core.durations import format_duration
from client.core.human_out import give_up, write_line

PLAIN_EVERY_S = 30.0


@dataclass(frozen=True, slots=True)
class Figures:
    read: int  # records read
    checked: int  # rows the template check compared
    total: int | None  # the records the run holds (None: not known before reading)
    elapsed_s: float

    @property
    def rate(self) -> float | None:
        """Records a second since the start."""
        return self.read / self.elapsed_s if self.elapsed_s > 0 and self.read else None

    @property
    def left_s(self) -> float | None:
        rate = self.rate
        if rate is None or self.total is None:
            return None
        return max(0, self.total - self.read) / rate


def line(figures: Figures) -> str:
    """The plain line: `export: 120,000 of 914,000 records (13.1%), 118,500 checked, 410 records/s, 32m05s left`."""
    total = "" if figures.total is None else f" of {figures.total:,}"
    share = f" ({min(1.0, figures.read / figures.total):.1%})" if figures.total else ""
    rate = "-" if figures.rate is None else f"{figures.rate:,.1f}" if figures.rate < 10 else f"{figures.rate:,.0f}"
    left = f", {format_duration(figures.left_s)} left" if figures.left_s is not None else ""
    return (f"export: {figures.read:,}{total} records{share}, {figures.checked:,} checked, {rate} records/s"
            f"{left}, {format_duration(figures.elapsed_s)} so far")


def render(figures: Figures) -> RenderableType:
    """The terminal view: a bar over the records read, then the figures of the plain line."""
    bar = ProgressBar(total=float(figures.total) if figures.total else None, completed=float(figures.read),
                      width=36)
    return Group(bar, Text(line(figures)))


class _View:
    """A rich renderable that reads the figures each time it is drawn."""

    def __init__(self, figures: Callable[[], Figures]) -> None:
        self.figures = figures

    def __rich__(self) -> RenderableType:
        return render(self.figures())


class ExportProgress:
    """`with ExportProgress(counts):` around the pass; `tick()` after each record (cheap: a clock read)."""

    def __init__(self, counts: Callable[[], tuple[int, int, int | None]], *, stream: TextIO | None = None,
                 live: bool | None = None, every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.counts = counts
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.every_s = every_s
        self.clock = clock
        self.started = clock()
        self.next = self.started + every_s
        self.view: Live | None = None
        self.stopped = False  # the stream could not be written: no more progress, the export goes on

    def figures(self) -> Figures:
        read, checked, total = self.counts()
        return Figures(read, checked, total, self.clock() - self.started)

    def __enter__(self) -> ExportProgress:
        if self.live:
            self.view = Live(_View(self.figures), console=Console(file=self.stream), refresh_per_second=2,
                             transient=True)
            try:
                self.view.start()
            except OSError:
                self._stop()
        return self

    def tick(self) -> None:
        if self.live or self.stopped:
            return
        now = self.clock()
        if now < self.next:
            return
        self.next = now + self.every_s
        if write_line(self.stream, line(self.figures())) is not None:
            self.stopped = True

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        shown = self.view is not None
        self._stop()
        if shown and kind is None:  # the bar is gone; its last figures stay, as a line above the summary
            write_line(self.stream, line(self.figures()))

    def _stop(self) -> None:
        if self.view is not None:
            view, self.view = self.view, None
            try:
                view.stop()
            except OSError:
                give_up(self.stream)
        self.stopped = True
