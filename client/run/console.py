"""Rendering of run progress: a rich live view on a terminal, a plain line every few seconds otherwise.

Reads `StatsSnapshot`s only; it never touches the swarm's state.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from client.core.durations import format_duration
from client.core.stats import StatsSnapshot

_STATE_STYLE = {"up": "green", "starting": "yellow", "down": "red"}



def _rate(value: float) -> str:
    return f"{value / 1000:.1f}K" if value >= 10_000 else f"{value:.0f}"


def progress_line(snap: StatsSnapshot) -> str:
    total = "?" if snap.total is None else str(snap.total)
    gpu = "" if snap.gpu_hours_projected is None else f" gpu-h~{snap.gpu_hours_projected:.1f}"
    sync = f" sync:{snap.sync_lag}" if snap.sync_lag else ""
    up = sum(1 for e in snap.endpoints if e.state == "up")
    return (
        f"done {snap.done}/{total} failed {snap.failed} in-flight {snap.in_flight} "
        f"tok/s {_rate(snap.tokens_per_s_short)} (5m {_rate(snap.tokens_per_s_long)}) "
        f"eta {format_duration(snap.eta_s)}{gpu} retries {snap.retries} truncated {snap.truncated} "
        f"endpoints {up}/{len(snap.endpoints)} up{sync}"
    ) + "".join(f" | {e.url} {e.state}: {e.last_error}" for e in snap.endpoints if e.state != "up")


def render(snap: StatsSnapshot) -> Group:
    total = "?" if snap.total is None else f"{snap.total:,}"
    share = f" ({snap.done / snap.total:.1%})" if snap.total else ""
    head = Table.grid(padding=(0, 2))
    head.add_row(
        Text(f"done {snap.done:,}/{total}{share}", style="bold"),
        Text(f"tok/s {_rate(snap.tokens_per_s_short)} now, {_rate(snap.tokens_per_s_long)} 5-min"),
        Text(f"ETA {format_duration(snap.eta_s)}"),
        Text("GPU-h ?" if snap.gpu_hours_projected is None else f"GPU-h ~{snap.gpu_hours_projected:,.1f}"),
    )
    head.add_row(
        Text(f"elapsed {format_duration(snap.elapsed_s)}"),
        Text(f"retries {snap.retries}  failed {snap.failed}  truncated {snap.truncated}"),
        Text(f"tokens {snap.completion_tokens:,}"),
        Text(f"sync {snap.sync_lag}" if snap.sync_lag else ""),
    )
    table = Table(expand=False, show_edge=False, header_style="bold")
    for column in ("endpoint", "state", "in flight", "slots", "srv run", "srv queue", "tok/s", "done", "errors",
                   "last error"):
        table.add_column(column, justify="left" if column in ("endpoint", "state", "last error") else "right")
    for e in snap.endpoints:
        table.add_row(
            e.url,
            Text(e.state, style=_STATE_STYLE.get(e.state, "")),
            str(e.in_flight),
            "-" if e.capacity is None else str(e.capacity),
            "-" if e.server_running is None else str(e.server_running),
            "-" if e.server_waiting is None else str(e.server_waiting),
            _rate(e.tokens_per_s),
            f"{e.done:,}",
            str(e.errors),
            Text(e.last_error[:60], style="dim"),
        )
    errors = ", ".join(f"{kind} {count}" for kind, count in sorted(snap.errors_by_kind.items()))
    parts: list[Table | Text] = [head, table]
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
    """Runs until cancelled. `live=None` picks the rich view when the stream is a terminal."""
    out = stream or sys.stdout
    if live is None:
        live = out.isatty()
    if not live:
        while True:
            await asyncio.sleep(plain_every_s)
            print(progress_line(snapshot()), file=out, flush=True)
    console = Console(file=out)
    with Live(render(snapshot()), console=console, refresh_per_second=4, transient=False) as view:
        try:
            while True:
                await asyncio.sleep(refresh_s)
                view.update(render(snapshot()))
        finally:
            view.update(render(snapshot()), refresh=True)  # leave the final figures on screen


def say(message: str) -> None:
    """A line for the person running the job: on stderr, so stdout stays free for the progress view."""
    print(message, file=sys.stderr, flush=True)
