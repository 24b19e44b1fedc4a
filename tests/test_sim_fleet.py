"""SimFleet: real server subprocesses that start, die, restart on the same port, and stop."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from simulator.fleet import SimFleet, SimServerSpec

REQUEST = {"model": "Qwen/Qwen3.6-27B", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}


def chat(url: str) -> dict[str, object]:
    resp = httpx.post(url + "/v1/chat/completions", json=REQUEST, timeout=10)
    resp.raise_for_status()
    return resp.json()  # type: ignore[no-any-return]


def test_fleet_start_kill_restart_stop(tmp_path: Path) -> None:
    specs = [SimServerSpec(speed=50), SimServerSpec(speed=50, dp_size=2, max_running=8)]
    with SimFleet(specs, seed=3, log_dir=tmp_path) as fleet:
        urls = fleet.urls
        assert len(urls) == 2 and len(set(urls)) == 2
        a, b = chat(urls[0]), chat(urls[1])
        # Same seed on every member: the same request gets the same reply anywhere.
        assert a["choices"][0]["message"] == b["choices"][0]["message"]  # type: ignore[index]
        loads = httpx.get(urls[1] + "/v1/loads").json()["loads"]
        assert [x["max_running_requests"] for x in loads] == [8, 8]

        fleet.kill(0)
        assert not fleet.is_running(0)
        with pytest.raises(httpx.ConnectError):
            chat(urls[0])
        fleet.restart(0)
        assert fleet.urls == urls
        assert chat(urls[0])["choices"] == a["choices"]

        fleet.stop(1)
        assert not fleet.is_running(1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(urls[1] + "/health")
    assert (tmp_path / "sim-0.log").exists()


def test_fleet_without_waiting_for_ready_sees_503() -> None:
    fleet = SimFleet([SimServerSpec(startup_delay=30)])
    try:
        fleet.start(wait_ready=False, timeout=15)
        assert httpx.get(fleet.urls[0] + "/health").status_code == 503
    finally:
        fleet.close()
    assert not fleet.is_running(0)


def test_fleet_reports_a_server_that_cannot_start() -> None:
    fleet = SimFleet([SimServerSpec(extra_args=("--no-such-flag",))])
    with pytest.raises(RuntimeError, match="no-such-flag"):
        fleet.start(timeout=15)
