"""The run's logic tested directly, without a server process: endpoints on a scripted transport
(tests/scripted_transport.py) under the real Dispatcher, Generator and Swarm. Retry classification,
Retry-After and its cap, avoiding the endpoint that just failed, a stop during the wait, an endpoint taken
out of rotation mid-stream, the worker pool's size, and run.main's exit codes for misuse."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from client.core.errors import RequestRejected, StreamDropped
from client.core.payload import FieldPolicy, RequestShape, SamplingSettings
from client.core.records import Prompt
from client.core.stats import RunStats
from client.engine.retry import Abandoned, GenerationFailed, Generator, RetryPolicy
from client.engine.session import Fleet
from client.engine.swarm import Swarm
from client.fleet.dispatcher import DOWN, Dispatcher
from client.local.sink import ResultSink
from client.local.source import PromptSource
from client.run.__main__ import main as run_entry
from client.wire.endpoint import Endpoint
from tests.scripted_transport import Answer, ScriptedTransport, sse_reply

SHAPE = RequestShape("m", SamplingSettings(max_tokens=32), FieldPolicy.everything())
PROMPT = Prompt(id="p1", messages=[{"role": "user", "content": "hi"}], tools=None, meta=None, source="t", line=1)
QUICK = RetryPolicy(max_attempts=4, initial_backoff_s=0.0, max_backoff_s=0.0, jitter_s=0.0, max_retry_after_s=7.0)


class Fixture:
    def __init__(self, transports: list[ScriptedTransport], retry: RetryPolicy = QUICK,
                 max_in_flight: int = 512) -> None:
        self.transports = transports
        self.endpoints = [Endpoint(f"http://127.0.0.1:{9 + i}", index=i, max_in_flight=max_in_flight, transport=t)
                          for i, t in enumerate(transports)]
        self.dispatcher = Dispatcher(self.endpoints)
        for endpoint in self.endpoints:
            self.dispatcher.starting(endpoint, ready=True)
        self.stats = RunStats()
        self.stats.track(len(self.endpoints))
        self.generator = Generator(dispatcher=self.dispatcher, stats=self.stats, shape=SHAPE, retry=retry)
        self.slept: list[float] = []

    def record_sleeps(self) -> None:
        """Back-off waits are recorded, not slept: the test asserts what the policy chose."""

        async def sleep(seconds: float) -> None:
            self.slept.append(seconds)

        self.generator._sleep = sleep  # type: ignore[method-assign]


@pytest.fixture
async def two() -> AsyncIterator[Fixture]:
    made = Fixture([ScriptedTransport(), ScriptedTransport()])
    yield made
    for endpoint in made.endpoints:
        await endpoint.aclose()


def script(fixture: Fixture, index: int, *answers: Answer) -> None:
    fixture.transports[index].answers = deque(answers)


async def test_a_5xx_is_retried_on_the_other_endpoint(two: Fixture) -> None:
    script(two, 0, (500, b'{"message": "boom"}', {}))
    generation = await two.generator.generate(PROMPT, PROMPT.messages)
    assert (generation.endpoint.index, generation.attempts) == (1, 2)
    assert generation.completion.content == "Hello there"
    assert two.stats.retries == 1 and two.stats.errors_by_kind == {"ServerError": 1}
    assert two.stats.endpoints[0].errors == 1 and two.stats.endpoints[1].errors == 0


async def test_a_4xx_is_permanent(two: Fixture) -> None:
    script(two, 0, (400, b'{"message": "bad field"}', {}))
    with pytest.raises(GenerationFailed) as failed:
        await two.generator.generate(PROMPT, PROMPT.messages)
    assert isinstance(failed.value.error, RequestRejected) and failed.value.attempts == 1
    assert two.stats.retries == 0
    assert sum(len(t.posts) for t in two.transports) == 1


@pytest.mark.parametrize(("retry_after", "slept"), [("2", 2.0), ("100000", 7.0)], ids=["honoured", "capped"])
async def test_retry_after_is_honoured_up_to_the_cap(two: Fixture, retry_after: str, slept: float) -> None:
    two.record_sleeps()
    script(two, 0, (429, b"slow down", {"retry-after": retry_after}))
    generation = await two.generator.generate(PROMPT, PROMPT.messages)
    assert two.slept == [slept]
    assert generation.attempts == 2 and two.stats.errors_by_kind == {"RateLimited": 1}


async def test_every_attempt_failing_gives_up_after_max_attempts(two: Fixture) -> None:
    for index in (0, 1):
        script(two, index, *[(500, b"down", {})] * 2)
    with pytest.raises(GenerationFailed) as failed:
        await two.generator.generate(PROMPT, PROMPT.messages)
    assert failed.value.attempts == QUICK.max_attempts
    assert two.stats.retries == QUICK.max_attempts - 1


async def test_a_stop_during_the_wait_abandons_the_prompt(two: Fixture) -> None:
    long_wait = RetryPolicy(max_attempts=4, initial_backoff_s=3600.0, max_backoff_s=3600.0, jitter_s=0.0)
    fixture = Fixture([ScriptedTransport(answers=deque([(503, b"busy", {})]))], retry=long_wait)
    # The stop (which closes the dispatcher) arrives during the attempt.
    fixture.transports[0].on_post = lambda _: fixture.dispatcher.close()
    try:
        async with asyncio.timeout(10):
            with pytest.raises(Abandoned):
                await fixture.generator.generate(PROMPT, PROMPT.messages)
        assert fixture.stats.retries == 0, "a retry the stop cancels is not counted"
    finally:
        await fixture.endpoints[0].aclose()


class HangingTransport(ScriptedTransport):
    """Its POSTs never answer: the stream stays open until something ends it."""

    started: asyncio.Event

    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()

    async def post(self, path: str, body: bytes, feed: Any, *, idle_timeout: float,
                   expect_type: str | None = None) -> Any:
        self.started.set()
        await asyncio.Event().wait()


async def test_taking_an_endpoint_out_of_rotation_sends_its_stream_elsewhere() -> None:
    hanging = HangingTransport()
    fixture = Fixture([hanging, ScriptedTransport()])
    try:
        request = asyncio.create_task(fixture.generator.generate(PROMPT, PROMPT.messages))
        await hanging.started.wait()
        fixture.dispatcher.set_state(fixture.endpoints[0], DOWN, "health check failed")
        generation = await asyncio.wait_for(request, timeout=10)
        assert generation.endpoint.index == 1 and generation.attempts == 2
        assert fixture.stats.errors_by_kind == {"StreamDropped": 1}
        assert "out of rotation (health check failed)" in fixture.stats.endpoints[0].last_error
    finally:
        for endpoint in fixture.endpoints:
            await endpoint.aclose()


async def test_a_shutdown_cancel_is_not_mistaken_for_an_endpoint_going_down() -> None:
    hanging = HangingTransport()
    fixture = Fixture([hanging])
    try:
        request = asyncio.create_task(fixture.generator.generate(PROMPT, PROMPT.messages))
        await hanging.started.wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        assert fixture.stats.errors_by_kind == {}
    finally:
        await fixture.endpoints[0].aclose()


def _prompt_file(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"n{i}"}]}) + "\n"
                            for i in range(count)))
    return path


@pytest.mark.parametrize("max_in_flight", [512, 1_000_000], ids=["default-cap", "huge-cap"])
async def test_the_swarm_writes_every_prompt_once_with_a_pool_sized_by_the_fleet(tmp_path: Path,
                                                                                max_in_flight: int) -> None:
    fixture = Fixture([ScriptedTransport(), ScriptedTransport(default=sse_reply("Other words here"))],
                      max_in_flight=max_in_flight)
    out = tmp_path / "out"
    ResultSink.prepare(out)
    sink = ResultSink(out, run_id="t")
    swarm = Swarm(Fleet(fixture.endpoints, fixture.dispatcher, SHAPE),
                  PromptSource([_prompt_file(tmp_path / "p.jsonl", 50)], set()), sink, fixture.stats)
    try:
        outcome = await asyncio.wait_for(swarm.run(), timeout=30)
    finally:
        sink.close()
        for endpoint in fixture.endpoints:
            await endpoint.aclose()
    assert not outcome.interrupted and outcome.fatal is None
    lines = [json.loads(line) for path in sorted((out / "segments").glob("*.jsonl"))
             for line in path.read_text().splitlines()]
    assert sorted(r["id"] for r in lines) == sorted(f"q{i}" for i in range(50))
    # 512 (or a million) may be in flight per endpoint, but each can take its 32 assumed slots plus the
    # small queue: the pool is that (2 x 36), not a crowd of parked workers.
    assert swarm.workers == fixture.dispatcher.worker_target() == 72
    assert sum(len(t.posts) for t in fixture.transports) == 50


@pytest.mark.parametrize(("argv", "message"), [
    (["--endpoints", "http://127.0.0.1:9", "--simulate", "1"], "give exactly one of --endpoints or --simulate N"),
    (["--endpoints", "http://127.0.0.1:9", "--delete-uploaded"], "need --s3"),
    (["--endpoints", "http://127.0.0.1:9", "--preserve-thinking"], "needs --turns all"),
], ids=["both-fleets", "s3-option-without-s3", "preserve-thinking-without-turns"])
def test_misuse_exits_2_with_the_usage_line(tmp_path: Path, argv: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run_entry([*argv, "--prompts", str(_prompt_file(tmp_path / "p.jsonl", 1)), "--out", str(tmp_path / "o")])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unreadable_endpoints_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_entry(["--endpoints", f"@{tmp_path / 'missing.txt'}", "--prompts",
                          str(_prompt_file(tmp_path / "p.jsonl", 1)), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "missing.txt" in capsys.readouterr().err


def test_an_unreachable_fleet_is_exit_2_with_nothing_written(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o"
    code = run_entry(["--endpoints", "http://127.0.0.1:9", "--prompts", str(_prompt_file(tmp_path / "p.jsonl", 2)),
                          "--out", str(out)])
    assert code == 2
    assert "cannot reach 1 of 1 endpoint(s)" in capsys.readouterr().err
    assert not list((out / "segments").glob("*.jsonl"))


def test_stream_dropped_is_retryable() -> None:
    assert StreamDropped("x").retryable and not RequestRejected("x", 400).retryable
