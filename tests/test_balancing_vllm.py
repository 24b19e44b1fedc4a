"""Load polling and dispatch against two real vLLM 0.32 servers on the CPU.

The servers serve the same random-weights tiny Qwen3 with different batch sizes (`--max-num-seqs 1` and
`--max-num-seqs 4`). vLLM answers the client's first two load sources (`/v1/loads`, `/get_load`) with 404,
so the client settles on `/metrics` (`vllm:num_requests_running|waiting`). vLLM does not report its batch
size there: the client starts from DispatchSettings.default_capacity and learns a server's slots only from
a poll that shows a queue (`waiting > 0` means the batch was full at `running`).

- `test_idle_vllm_servers_look_alike_to_the_dispatcher`: the client's own Dispatcher polls both idle
  servers, ends on `/metrics`, and (having seen no queue) gives both the same depth, `--max-in-flight`.
- `test_dispatch_follows_the_vllm_queues`: with a backlog queued at the 1-slot server, the client's poll of
  its /metrics sees the queue, learns that it has one slot, and sends every next request to the other.
- `test_cli_run_against_two_vllm_servers`: `python -m client.run` over both ends on `/metrics`, does every
  prompt once, and never has more than `--max-in-flight` requests at a server.

What is not asserted, and why: that in a whole CLI run the 4-slot server gets clearly more of the work.
On a shared 2-core CPU the two servers decode on every core there is, their API servers answer
`/metrics` only after many seconds while they decode (often after the run), and a server's throughput
hardly grows with its batch size, so neither a queue to learn from nor a throughput gap to follow
lasts through a whole run here. The split is printed; docs/engines.md ("Balancing") has the
measurements.

The two servers are started here rather than with `vllm_server_factory`: both are spawned before either
is waited for, so they load at once, and both are stopped when this module ends.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from client.fleet.balancer import target_depth
from client.fleet.dispatcher import DispatchClosed, Dispatcher, DispatchSettings
from client.fleet.startup import check_reachable
from client.wire.endpoint import Endpoint
from tests.conftest import make_prompts, read_failures, read_results, run_client, wait_until
from tests.engines.conftest_vllm import LOG_DIR
from tests.engines.start_time import server_start
from tests.engines.tiny_models import MODEL_NAMES
from tests.engines.vllm_server import VLLMServer, VLLMServerError

pytestmark = pytest.mark.vllm

SMALL, LARGE = 1, 4  # --max-num-seqs of the two servers
MAX_IN_FLIGHT = 8  # above the learned targets (3 and 6), below the default one (36)
MODEL = MODEL_NAMES["random"]


@pytest.fixture(scope="module")
def servers(vllm_venv_python: Path, tiny_model_dirs: dict[str, Path]) -> Iterator[tuple[VLLMServer, VLLMServer]]:
    pair = tuple(
        VLLMServer(tiny_model_dirs["random"], MODEL, extra_args=["--max-num-seqs", str(seqs)],
                   python=vllm_venv_python, log_path=LOG_DIR / f"balance-max-num-seqs-{seqs}.log")
        for seqs in (SMALL, LARGE)
    )
    message = None
    try:
        with server_start():  # their own bound, not the time limit of the test that needs them first
            for server in pair:
                server.log_path.unlink(missing_ok=True)
                # Spawned from this thread: a server gets SIGTERM when the thread that spawned it ends.
                server.spawn()
            for server in pair:
                server.wait_ready()
    except VLLMServerError as exc:
        message = str(exc)
    if message is not None:
        for server in pair:
            server.stop()
        pytest.fail(message, pytrace=False)
    try:
        yield pair[0], pair[1]
    finally:
        for server in pair:
            server.stop()


# -- helpers ---------------------------------------------------------------------------------------

def _load_requests(server: VLLMServer) -> list[tuple[str, str]]:
    """(path, status) of every load poll the server logged, in order."""
    log = server.log_path.read_text(errors="replace")
    return re.findall(r'"GET (/v1/loads|/get_load|/metrics) HTTP/1.1" (\d{3})', log)


def _metrics_polls_logged(server: VLLMServer, since: int, count: int) -> bool:
    return sum(path == "/metrics" for path, _ in _load_requests(server)[since:]) >= count


def _assert_discovery(polls: list[tuple[str, str]]) -> None:
    """The client's first load polls: SGLang's two documents are refused, then /metrics answers."""
    assert polls[:3] == [("/v1/loads", "404"), ("/get_load", "404"), ("/metrics", "200")], polls[:6]
    assert {status for path, status in polls if path == "/metrics"} == {"200"}


async def _fill(dispatcher: Dispatcher) -> list[int]:
    """Slots the dispatcher hands out, per endpoint, before it blocks; then they are all released."""
    taken: list[Endpoint] = []
    while True:
        try:
            taken.append(await asyncio.wait_for(dispatcher.acquire(), timeout=0.3))
        except (TimeoutError, DispatchClosed):
            break
    for endpoint in taken:
        dispatcher.release(endpoint)
    return [sum(e.index == i for e in taken) for i in range(len(dispatcher.endpoints))]


def _endpoints(servers: tuple[VLLMServer, ...]) -> list[Endpoint]:
    return [Endpoint(s.url, index=i, max_in_flight=MAX_IN_FLIGHT)
            for i, s in enumerate(servers)]


# -- what the dispatcher sees --------------------------------------------------------------------------

async def test_idle_vllm_servers_look_alike_to_the_dispatcher(servers: tuple[VLLMServer, VLLMServer]) -> None:
    """vLLM's /metrics says how many requests run and wait, never how many could run: until a poll shows a
    queue, a 1-slot and a 4-slot server both count as DispatchSettings.default_capacity slots, and the
    client sends each as many requests as --max-in-flight lets it."""
    endpoints = _endpoints(servers)
    try:
        found = await check_reachable(endpoints, 0)
        dispatcher = Dispatcher(endpoints)
        for endpoint, readiness in zip(endpoints, found, strict=True):
            dispatcher.starting(endpoint, readiness.ready, readiness.reason)
        marks = [len(_load_requests(server)) for server in servers]
        await dispatcher.prime()  # the load polls at the start of a run
        for server, mark in zip(servers, marks, strict=True):
            _assert_discovery(_load_requests(server)[mark:])
        assert [(e.server_running, e.server_waiting) for e in dispatcher.live()] == [(0, 0), (0, 0)]
        capacity = dispatcher.settings.default_capacity
        assert [dispatcher.capacity(0), dispatcher.capacity(1)] == [capacity, capacity]
        assert target_depth(capacity) > MAX_IN_FLIGHT
        assert await _fill(dispatcher) == [MAX_IN_FLIGHT, MAX_IN_FLIGHT]
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints))


async def test_dispatch_follows_the_vllm_queues(servers: tuple[VLLMServer, VLLMServer]) -> None:
    """A queue at one server (vllm:num_requests_waiting > 0) sends the next requests to the other, and
    teaches the client that server's slots: its running count while it had a queue."""
    small = servers[0]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 1500,
            "ignore_eos": True, "stream": False}
    endpoints = _endpoints(servers)
    async with httpx.AsyncClient(timeout=300) as load_client:
        # The tiny model decodes ~1K tok/s even alone, and vLLM's API server answers /metrics late (often
        # only after tens of seconds) while it decodes: the backlog must outlast a few such answers.
        backlog = [asyncio.create_task(load_client.post(f"{small.url}/v1/chat/completions", json=body))
                   for _ in range(60)]
        try:
            found = await check_reachable(endpoints, 0)
            dispatcher = Dispatcher(endpoints, DispatchSettings(poll_timeout=120.0))
            for endpoint, readiness in zip(endpoints, found, strict=True):
                dispatcher.starting(endpoint, readiness.ready, readiness.reason)
            seen = []
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline and not all(task.done() for task in backlog):
                await dispatcher.prime()  # the client's own load poll, as at the start of a run
                small_now = dispatcher.live()[0]
                seen.append((small_now.server_running, small_now.server_waiting))
                if small_now.server_waiting:
                    break
                await asyncio.sleep(0.2)
            assert dispatcher.live()[0].server_waiting, f"no poll caught the 1-slot server's queue: {seen}"
            assert dispatcher.capacity(0) == SMALL, "a queue at `running` requests means that many slots"
            taken = [await asyncio.wait_for(dispatcher.acquire(), timeout=5) for _ in range(MAX_IN_FLIGHT)]
            assert [e.index for e in taken] == [1] * MAX_IN_FLIGHT, "every request goes where there is no queue"
        finally:
            for task in backlog:
                task.cancel()
            await asyncio.gather(*backlog, return_exceptions=True)
            await asyncio.gather(*(e.aclose() for e in endpoints))


# -- the whole client ------------------------------------------------------------------------------

def _intervals(records: list[dict[str, Any]], url: str) -> list[tuple[float, float]]:
    """(sent, ended) of every request the client had in flight at `url`, from its ResultRecords.

    A record is written just after its slot was released, so a refill can be sent a moment before the
    record's `created`: ends are taken 20 ms early so that a refill is not counted as one more request.
    """
    spans = []
    for record in records:
        if record["endpoint"] != url:
            continue
        timings = record["timings"]
        ended = record["created"]
        spans.append((ended - timings["total_s"] + timings["queued_s"], ended - 0.02))
    return spans


def _peak_in_flight(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def test_cli_run_against_two_vllm_servers(servers: tuple[VLLMServer, VLLMServer], tmp_path: Path) -> None:
    small, large = servers
    before = {server.url: len(_load_requests(server)) for server in servers}
    count = 200
    prompts = make_prompts(tmp_path / "prompts.jsonl", count, with_tools_every=0)
    out = tmp_path / "out"
    started = time.monotonic()
    result = run_client(["--endpoints", f"{small.url},{large.url}", "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "32", "--max-in-flight", str(MAX_IN_FLIGHT)], timeout=240)
    elapsed = time.monotonic() - started
    records = read_results(out)
    assert result.code == 0, result.stderr[-3000:]
    assert not read_failures(out)
    assert sorted(r["id"] for r in records) == [f"p{i:06d}" for i in range(count)]

    summary = [f"{count} prompts in {elapsed:.1f}s"]
    for server in servers:
        # The server logs a request once its answer starts: a poll answered late (vLLM answers /metrics
        # between decode steps) is logged after the run has returned; wait for the log to catch up.
        wait_until(functools.partial(_metrics_polls_logged, server, before[server.url], 2),
                   f"two /metrics polls in {server.url}'s log", timeout=300)  # minutes late on a loaded CPU
        polls = _load_requests(server)[before[server.url]:]
        _assert_discovery(polls)  # this run found its load source afresh and ended on /metrics
        assert sum(path == "/metrics" for path, _ in polls) >= 2
        spans = _intervals(records, server.url)
        peak = _peak_in_flight(spans)
        assert len(spans) > 0 and peak <= MAX_IN_FLIGHT, (server.url, len(spans), peak)
        rediscovered = sum(path == "/v1/loads" for path, _ in polls) - 1
        summary.append(f"max-num-seqs {server.extra_args[1]}: {len(spans)} prompts, peak in flight {peak}, "
                       f"{sum(path == '/metrics' for path, _ in polls)} /metrics polls, "
                       f"{rediscovered} re-discoveries")
    print("; ".join(summary))
