"""Start-up waits are bounded and said: a `/health` that hangs while `/v1/models` answers makes the server
ready by its models (it used to stay "not ready" for ever), and a port that accepts connections and answers
nothing stops the run with its reason (it used to be 90 s of silence), each with a line naming what is
waited for.

The servers are oddserver's `health_hang` and `mute` modes. The tests wait on the client's answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.core.errors import ConfigError
from client.fleet.startup import check_reachable
from client.wire.endpoint import Endpoint
from tests.conftest import make_prompts, run_client
from tests.servers.harness import ServerGroup


@pytest.fixture
async def endpoints() -> AsyncIterator[list[Endpoint]]:
    made: list[Endpoint] = []
    yield made
    for endpoint in made:
        await endpoint.aclose()


def _endpoint(url: str, made: list[Endpoint]) -> Endpoint:
    endpoint = Endpoint(url, index=len(made), max_in_flight=1)
    made.append(endpoint)
    return endpoint


async def test_hung_health_is_ready_by_models(servers: ServerGroup, endpoints: list[Endpoint]) -> None:
    server = servers.oddserver("health_hang")
    endpoint = _endpoint(server.url, endpoints)
    notes: list[str] = []
    found = await check_reachable([endpoint], 0, notes.append, health_limit_s=1.0, say_waiting_after_s=0.1)
    assert [readiness.ready for readiness in found] == [True]
    assert any("waiting up to 1s for /health" in n and server.url in n for n in notes), notes
    assert f"{server.url}: /health did not answer within 1s; ready because /v1/models answers " \
           "(its health route hangs)" in notes


@pytest.mark.slow
async def test_mute_port_stops_with_its_reason(servers: ServerGroup, endpoints: list[Endpoint]) -> None:
    server = servers.oddserver("mute")
    endpoint = _endpoint(server.url, endpoints)
    notes: list[str] = []
    with pytest.raises(ConfigError, match="accepted the connection but answered nothing: /health did not answer "
                                          r"within 1s, nor /v1/models within 10s.*--wait-ready"):
        await check_reachable([endpoint], 0, notes.append, health_limit_s=1.0, say_waiting_after_s=0.1)
    assert any("waiting up to 1s for /health (then up to 10s for /v1/models)" in n for n in notes), notes


@pytest.mark.slow
def test_run_on_a_mute_port_says_what_it_waits_for(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("mute")
    prompts = make_prompts(tmp_path / "p.jsonl", 2)
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 2, result.stderr
    assert f"waiting up to 30s for /health (then up to 10s for /v1/models) on 1 endpoint(s) that have not " \
           f"answered yet: {server.url}" in result.stderr
    assert "accepted the connection but answered nothing" in result.stderr
    assert "Traceback" not in result.stderr
