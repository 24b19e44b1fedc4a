"""Rendering of run progress: a rich live view on a terminal (a progress bar, the fleet's figures, one row
per endpoint), a plain line with the same figures every few seconds otherwise.

Reads `StatsSnapshot`s only; it never touches the swarm's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from client.core.durations import format_duration
from client.core.human_out import give_up, note, reason, write_line
from client.core.stats import EndpointSnapshot, StatsSnapshot, SyncView

_STATE_STYLE = {"up": "green", "starting": "yellow", "down": "red"}



def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f}K" if value >= 10_000 else f"{value:.0f}"


def _count(value: int) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e4, "K")):
        if value >= size:
            return f"{value / size:.1f}{unit}" if unit != "K" else f"{value / 1e3:.0f}K"
    return str(value)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _gpu_hours(snap: StatsSnapshot) -> str | None:
    if snap.gpu_hours_so_far is None:
        return None
    projected = "?" if snap.gpu_hours_projected is None else f"~{_hours(snap.gpu_hours_projected)}"
    return f"{_hours(snap.gpu_hours_so_far)}/{projected}"


def _hours(value: float) -> str:
    """GPU-hours: one decimal from 1 up; under one, enough digits that a short run does not read 0.0."""
    return f"{value:,.1f}" if value >= 1 else f"{value:.2g}"


# Without a GPU count (no --gpus, and the servers do not say): where the figure would be, how to get it.
NO_GPUS = "? (--gpus N)"


def _tokens(snap: StatsSnapshot) -> str:
    """`275K (+59K in flight)`: the tokens of written replies, the summary's figure, then those streamed
    that no written record holds yet (requests in flight, and failed attempts)."""
    extra = snap.unwritten_tokens
    return _count(snap.completion_tokens) + (f" (+{_count(extra)} in flight)" if extra else "")


def _accept(snap: StatsSnapshot) -> str:
    """The servers' MTP figure, named for what it averages: completion tokens per verify step."""
    return f"{snap.accept_length:.2f} tok/step"


def sync_text(sync: SyncView) -> str:
    """The S3 column: `up to date (12 uploaded)`, or what is pending and how old it is, and any error."""
    if sync.stopped:
        return "STOPPED: " + sync.stopped
    retrying = f"; retrying: {sync.last_error[:80]}" if sync.last_error else ""
    if not sync.pending:
        if sync.last_error:
            return f"manifest not stored yet; retrying: {sync.last_error[:80]}"
        return f"up to date ({sync.uploaded} uploaded)"
    return (f"{sync.pending} seg {sync.pending_bytes / 1e6:.1f} MB pending, oldest "
            f"{format_duration(sync.oldest_pending_s)}{retrying}")


def _waiting(snap: StatsSnapshot) -> str | None:
    """`waiting 3 (wake in 12s-4m58s)`: requests sleeping before a retry, and when they wake."""
    if not snap.waiting or snap.waiting_wake_s is None:
        return None
    soonest, latest = (format_duration(s) for s in snap.waiting_wake_s)
    when = soonest if soonest == latest else f"{soonest}-{latest}"
    return f"waiting {snap.waiting} (wake in {when})"


def progress_line(snap: StatsSnapshot) -> str:
    """The plain-text view (stdout not a terminal): the live view's figures on one line."""
    total = "?" if snap.total is None else str(snap.total)
    share = f" ({snap.done / snap.total:.1%})" if snap.total else ""
    servers = "" if snap.server_tokens_per_s is None else f", servers {_rate(snap.server_tokens_per_s)}"
    gpu_hours = _gpu_hours(snap)
    gpu = f" gpu-h {NO_GPUS}" if gpu_hours is None else f" gpu-h {gpu_hours}"
    cache = "" if snap.cache_hit is None else f" cache-hit {_share(snap.cache_hit)}"
    accept = "" if snap.accept_length is None else f" accept-len {_accept(snap)}"
    sync = "" if snap.sync is None else f" sync:{sync_text(snap.sync)}"
    waiting = _waiting(snap)
    wait = "" if waiting is None else f" {waiting}"
    loops = f" loops {snap.loops_stopped}" if snap.loops_stopped else ""
    up = sum(1 for e in snap.endpoints if e.state == "up")
    return (
        f"done {snap.done}/{total}{share} failed {snap.failed} in-flight {snap.in_flight}{wait} "
        f"tokens {_tokens(snap)} "
        f"tok/s {_rate(snap.tokens_per_s_short)} (5m {_rate(snap.tokens_per_s_long)}{servers}) "
        f"eta {_eta(snap)}{gpu} retries {snap.retries} truncated {snap.truncated}{loops}"
        f"{cache}{accept} "
        f"endpoints {up}/{len(snap.endpoints)} up{sync}"
    ) + "".join(f" | {e.url} {e.state}: {e.last_error}" for e in snap.endpoints if e.state != "up")


def _eta(snap: StatsSnapshot) -> str:
    return "stopping" if snap.stopping else format_duration(snap.eta_s)


def _head_rows(snap: StatsSnapshot) -> tuple[list[Text], list[Text]]:
    """The head's two rows of figures (the progress bar apart)."""
    total = "?" if snap.total is None else f"{snap.total:,}"
    share = f" {snap.done / snap.total:.1%}" if snap.total else ""
    gpu_hours = _gpu_hours(snap)
    first = [
        Text(f"done {snap.done:,}/{total}{share}", style="bold"),
        Text(f"tokens {_tokens(snap)}"),
        Text(f"elapsed {format_duration(snap.elapsed_s)}"),
        Text(f"ETA {_eta(snap)}", style="bold"),
        Text(f"GPU-h {NO_GPUS}" if gpu_hours is None else f"GPU-h {gpu_hours}"),
    ]
    servers = "" if snap.server_tokens_per_s is None else f"  servers {_rate(snap.server_tokens_per_s)}"
    second = [
        Text(f"tok/s {_rate(snap.tokens_per_s_short)} now  {_rate(snap.tokens_per_s_long)} 5-min{servers}",
             style="bold cyan"),
        Text(f"in flight {snap.in_flight:,}" + ("" if _waiting(snap) is None else f"  {_waiting(snap)}"),
             style="" if _waiting(snap) is None else "yellow"),
        Text(f"retries {snap.retries}  failed {snap.failed}  truncated {snap.truncated}"
             + (f"  loops stopped {snap.loops_stopped}" if snap.loops_stopped else "")),
        Text("" if snap.cache_hit is None else f"cache hit {_share(snap.cache_hit)}"),
        Text("" if snap.accept_length is None else f"MTP accept length {_accept(snap)}"),
        Text("" if snap.sync is None else f"sync {sync_text(snap.sync)}"),
    ]
    return first, second


def _head(snap: StatsSnapshot, width: int | None = None) -> Table | Group:
    """The progress bar and the run's figures: a grid of two rows on a wide terminal (`width` None or at least
    FULL_WIDTH), else the bar beside the count and the other figures packed into lines of `width`, broken
    between figures, never inside one."""
    first, second = _head_rows(snap)
    if width is None or width >= FULL_WIDTH:
        bar = ProgressBar(total=float(snap.total or 0) or None, completed=float(snap.done + snap.failed), width=36)
        head = Table.grid(padding=(0, 2))
        head.add_row(bar, *first)
        head.add_row(*second)
        return head
    bar = ProgressBar(total=float(snap.total or 0) or None, completed=float(snap.done + snap.failed),
                      width=20)
    head = Table.grid(padding=(0, 2))
    head.add_row(bar, first[0])
    lines: list[Text] = []
    for figure in (text for text in [*first[1:], *second] if text.plain):
        if lines and lines[-1].cell_len + 2 + figure.cell_len <= width:
            lines[-1].append("  ").append_text(figure)
        else:
            lines.append(figure.copy())
    return Group(head, *lines)


# Every column of the endpoint table, and the ones kept on narrower terminals (the rest still show in the
# plain progress line and on /metrics).
_COLUMNS = ("endpoint", "state", "in flight", "slots", "srv run", "srv queue", "tok/s", "srv tok/s", "KV",
            "cache hit", "done", "errors", "last error")
_MEDIUM = ("endpoint", "state", "in flight", "slots", "tok/s", "KV", "cache hit", "done", "errors")
_NARROW = ("endpoint", "state", "in flight", "tok/s", "done", "errors")
FULL_WIDTH = 150  # the full table and the head's grid need about this many columns
MEDIUM_WIDTH = 100


def _cells(e: EndpointSnapshot, short_url: bool) -> dict[str, str | Text]:
    return {
        "endpoint": e.url.split("://", 1)[-1] if short_url else e.url,
        "state": Text(e.state, style=_STATE_STYLE.get(e.state, "")),
        "in flight": str(e.in_flight),
        "slots": "-" if e.capacity is None else str(e.capacity),
        "srv run": "-" if e.server_running is None else str(e.server_running),
        "srv queue": "-" if e.server_waiting is None else str(e.server_waiting),
        "tok/s": _rate(e.tokens_per_s),
        "srv tok/s": _rate(e.server_tokens_per_s),
        "KV": _share(e.token_usage),
        "cache hit": _share(e.cache_hit),
        "done": f"{e.done:,}",
        "errors": str(e.errors),
        "last error": Text(e.last_error[:60], style="dim"),
    }


def render(snap: StatsSnapshot, width: int | None = None) -> Group:
    """The live view at a terminal `width` (None: wide): below FULL_WIDTH the head stacks and the endpoint
    table keeps fewer columns (below MEDIUM_WIDTH: the essentials, the URL without its scheme), and an
    endpoint's last error goes under the table."""
    full = width is None or width >= FULL_WIDTH
    columns = _COLUMNS if width is None or full else _MEDIUM if width >= MEDIUM_WIDTH else _NARROW
    table = Table(expand=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, justify="left" if column in ("endpoint", "state", "last error") else "right",
                         no_wrap=column == "endpoint")
    for e in snap.endpoints:
        cells = _cells(e, short_url=not full)
        table.add_row(*(cells[column] for column in columns))
    errors = ", ".join(f"{kind} {count}" for kind, count in sorted(snap.errors_by_kind.items()))
    parts: list[Table | Text | Group] = [_head(snap, width), table]
    if not full:
        parts.extend(Text(f"{e.url} {e.state}: {e.last_error[:200]}", style="dim")
                     for e in snap.endpoints if e.last_error)
    if errors:
        parts.append(Text(f"errors: {errors}", style="dim"))
    return Group(*parts)


async def show_progress(
    snapshot: Callable[[], StatsSnapshot],
    *,
    stream: TextIO | None = None,
    live: bool | None = None,
    refresh_s: float = 1.0,
    plain_every_s: float = 10.0,
) -> None:
    """Runs until cancelled. `live=None` picks the rich view when the stream is a terminal.

    A stream that cannot be written (a full disk under the log, a closed pipe, a terminal gone) ends the
    progress, never the run: one line on stderr says so (if stderr still works) and this returns."""
    out = stream or sys.stdout
    if live is None:
        live = out.isatty()
    if not live:
        while True:
            await asyncio.sleep(plain_every_s)
            error = write_line(out, progress_line(snapshot()))
            if error is not None:
                _progress_stopped(out, error)
                return
    console = Console(file=out)
    try:
        with Live(render(snapshot(), console.width), console=console, refresh_per_second=4,
                  transient=False) as view:
            try:
                while True:
                    await asyncio.sleep(refresh_s)
                    view.update(render(snapshot(), console.width))
            finally:
                with contextlib.suppress(OSError):  # a stream that broke must not hide a cancellation
                    view.update(render(snapshot(), console.width), refresh=True)  # leave the final figures
    except OSError as exc:
        give_up(out)
        _progress_stopped(out, exc)


def _progress_stopped(out: TextIO, error: OSError) -> None:
    name = "stdout" if out is sys.stdout else "stderr" if out is sys.stderr else str(getattr(out, "name", out))
    say(f"warning: cannot write the progress to {name} ({reason(error)}); progress lines stopped, the run goes on "
        "and its results are written to --out as before")


def say(message: str) -> None:
    """A line for the person running the job: on stderr, so stdout stays free for the progress view. A stderr
    that cannot be written loses the line; the run goes on (client.core.human_out)."""
    note(message)
