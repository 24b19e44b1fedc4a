"""The live view stays readable on a narrow terminal: at 80 columns the endpoint table keeps fewer columns,
whole, with each endpoint's address in full; the head's figures are never cut inside one (client.run.console)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from client.core.stats import EndpointSnapshot
from client.run.console import render
from tests.test_console_line import snapshot


def _endpoint(port: int, state: str = "up", last_error: str = "") -> EndpointSnapshot:
    return EndpointSnapshot(url=f"http://127.0.0.1:{port}", state=state, in_flight=36, max_in_flight=512,
                            capacity=32, done=1234, errors=2, tokens_per_s=812.0, server_running=32,
                            server_waiting=4, last_error=last_error, server_tokens_per_s=800.0, token_usage=0.41,
                            cache_hit=0.44)


def _screen(width: int) -> str:
    endpoints = (*(_endpoint(30000 + i) for i in range(3)), _endpoint(30003, "down", "connection refused"))
    snap = snapshot(total=264_000, done=12_345, in_flight=144, completion_tokens=5_000_000,
                    streamed_tokens=5_100_000, tokens_per_s_short=3199.0, tokens_per_s_long=3142.0, eta_s=7200.0,
                    gpu_hours_so_far=1.2, gpu_hours_projected=9.9, gpus=4, server_tokens_per_s=3200.0,
                    cache_hit=0.44, endpoints=endpoints, elapsed_s=600.0)
    out = io.StringIO()
    Console(width=width, file=out, color_system=None).print(render(snap, width))
    return out.getvalue()


@pytest.mark.parametrize(("width", "headers"), [
    (80, ["endpoint", "state", "in flight", "tok/s", "done", "errors"]),
    (120, ["endpoint", "state", "in flight", "slots", "tok/s", "KV", "cache hit", "done", "errors"]),
    (170, ["endpoint", "state", "in flight", "slots", "srv run", "srv queue", "tok/s", "srv tok/s", "KV",
           "cache hit", "done", "errors", "last error"]),
])
def test_the_view_fits_the_terminal_with_whole_columns(width: int, headers: list[str]) -> None:
    screen = _screen(width)
    assert "…" not in screen, screen
    assert all(len(line) <= width for line in screen.splitlines()), screen
    header = next(line for line in screen.splitlines() if "endpoint" in line and "state" in line)
    assert [cell.strip() for cell in header.split("┃")] == headers
    for port in range(30000, 30004):
        assert f"127.0.0.1:{port}" in screen
    for figure in ("done 12,345/264,000 4.7%", "ETA 2h00m", "GPU-h 1.2/~9.9", "tok/s 3199 now  3142 5-min"):
        assert figure in screen, screen
    assert "connection refused" in screen  # the last error: a column when wide, a line under the table when not
