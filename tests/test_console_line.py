"""client.run.console's plain progress line (what a run prints when stdout is not a terminal),
table-driven from StatsSnapshots."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from client.core.stats import EndpointSnapshot, StatsSnapshot, SyncView
from client.run.console import progress_line


def endpoint(url: str, state: str = "up", last_error: str = "") -> EndpointSnapshot:
    return EndpointSnapshot(url=url, state=state, in_flight=0, max_in_flight=8, capacity=8, done=0, errors=0,
                            tokens_per_s=0.0, server_running=None, server_waiting=None, last_error=last_error)


def snapshot(**changes: Any) -> StatsSnapshot:
    """A quiet snapshot: every number 0, nothing unknown but the total; `changes` on top."""
    base: dict[str, Any] = {}
    for field in dataclasses.fields(StatsSnapshot):
        base[field.name] = {"total": None, "eta_s": None, "gpu_hours_projected": None, "sync": None,
                            "errors_by_kind": {}, "endpoints": (), "server_tokens_per_s": None, "cache_hit": None,
                            "gpu_hours_so_far": None, "expected_tokens_per_prompt": None,
                            "accept_length": None, "waiting_wake_s": None, "gpus": None, "gpus_source": None,
                            "eta_parts": None, "cancelled_ids": ()}.get(field.name, 0)
    return StatsSnapshot(**{**base, **changes})


@pytest.mark.parametrize(("changes", "parts"), [
    ({}, ["done 0/? failed 0 in-flight 0", "tok/s 0 (5m 0)", "eta ?", "endpoints 0/0 up"]),
    ({"total": 100, "done": 40, "failed": 2, "in_flight": 8}, ["done 40/100 (40.0%) failed 2 in-flight 8"]),
    ({"tokens_per_s_short": 9_999.0, "tokens_per_s_long": 12_345.0}, ["tok/s 9999 (5m 12.3K)"]),
    ({"server_tokens_per_s": 13_010.0}, ["(5m 0, servers 13.0K)"]),
    ({"completion_tokens": 1_234_567, "streamed_tokens": 1_234_567}, ["tokens 1.2M tok/s"]),
    ({"completion_tokens": 42_000, "streamed_tokens": 42_000}, ["tokens 42K tok/s"]),
    # The written replies' tokens (the summary's figure), then those streamed that no record holds yet.
    ({"completion_tokens": 274_726, "streamed_tokens": 334_000}, ["tokens 275K (+59K in flight) tok/s"]),
    ({"eta_s": 3725.0}, ["eta 1h02m"]),
    ({"eta_s": 42.0}, ["eta 42s"]),
    ({"eta_s": 4680.0, "stopping": True}, ["eta stopping"]),  # after Ctrl-C no prompt is sent: no ETA
    ({"gpu_hours_so_far": 3.14, "gpu_hours_projected": 12.345}, ["gpu-h 3.1/~12.3 retries"]),
    ({"gpu_hours_so_far": 0.5}, ["gpu-h 0.5/? retries"]),
    ({"gpu_hours_so_far": 0.0333, "gpu_hours_projected": 0.0411}, ["gpu-h 0.033/~0.041 retries"]),  # a short run
    ({}, ["gpu-h ? (--gpus N) retries"]),  # no GPU count: say how to give one
    ({"cache_hit": 0.873}, ["truncated 0 cache-hit 87% endpoints"]),
    ({"accept_length": 3.14159}, ["truncated 0 accept-len 3.14 tok/step endpoints"]),
    ({"retries": 3, "truncated": 1}, ["retries 3 truncated 1"]),
    ({"sync": SyncView(uploaded=3, pending=2, pending_bytes=5_000_000, oldest_pending_s=75.0)},
     ["up sync:2 seg 5.0 MB pending, oldest 1m15s"]),
    ({"sync": SyncView(uploaded=3, pending=0, pending_bytes=0, oldest_pending_s=None)},
     ["up sync:up to date (3 uploaded)"]),
    ({"sync": SyncView(uploaded=0, pending=1, pending_bytes=10, oldest_pending_s=1.0, last_error="cannot reach S3")},
     ["retrying: cannot reach S3"]),
    ({"endpoints": (endpoint("http://a"), endpoint("http://b"))}, ["endpoints 2/2 up"]),
    ({"endpoints": (endpoint("http://a"), endpoint("http://b", "down", "connection refused"))},
     ["endpoints 1/2 up", " | http://b down: connection refused"]),
], ids=["quiet", "counts", "rates", "server-rate", "tokens-millions", "tokens-thousands", "tokens-in-flight",
        "eta-hours", "eta-seconds", "eta-stopping", "gpu-hours", "gpu-hours-no-eta", "gpu-hours-short-run", "no-gpus",
        "cache-hit",
        "accept-length", "retries", "sync-pending", "sync-up-to-date", "sync-retrying", "all-up", "one-down"])
def test_progress_line(changes: dict[str, Any], parts: list[str]) -> None:
    line = progress_line(snapshot(**changes))
    for part in parts:
        assert part in line, f"{part!r} not in {line!r}"
    assert "\n" not in line


@pytest.mark.parametrize(("changes", "absent"), [
    ({}, ["sync:", " | ", "servers", "cache-hit", "accept-len", "%)", "in flight)"]),
    ({"endpoints": (endpoint("http://a", "up", "an old error"),)}, ["an old error"]),  # up: no error shown
])
def test_progress_line_leaves_out_what_does_not_apply(changes: dict[str, Any], absent: list[str]) -> None:
    line = progress_line(snapshot(**changes))
    for part in absent:
        assert part not in line
