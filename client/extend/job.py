"""`client.run --extend FROM`: a new run under --out holding every record of the finished run FROM, with the
replies FROM's limit cut continued under the new one (client.extend.select decides which, with what budget).

One TaskGroup: a producer reads FROM's records in a thread, in batches; a record that is not continued is
written as it is, one that is goes into a bounded channel; a pool of workers (the fleet's target depth,
never one per record) continues each on the endpoint the balancer picks, retries what fails as the main job
does (tenacity, the error class's rule), and writes the stitched record. Resume: the ids already under --out
are skipped, so running the same command again goes on where a stop or a crash left it.

`OUT/run.json` is FROM's, its settings carrying the new limits and its history the extension; a resume
whose FROM or limits differ is refused. FROM is only read.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from client.core.errors import AttemptError, ConfigError
from client.core.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM
from client.core.human_out import note as say
from client.core.options import DEFAULT_SEGMENT_AGE_S
from client.engine.continuation import Stitched
from client.engine.result_rows import failure_record
from client.extend.select import Decision, Limits, Verdict, decide
from client.extend.stitch import continue_record, extended_record, split_record
from client.extend.summary import Tally, print_summary
from client.fleet.dispatcher import DispatchClosed, Dispatcher, DispatchSettings
from client.fleet.options import FleetConfig
from client.fleet.startup import check_reachable, resolve_model
from client.local.failures import latest_failures
from client.local.ledger import read_done_ids
from client.local.run_settings import RunRecord, read_run_file, write_run_file
from client.local.sink import ResultSink, new_run_id
from client.results.reader import iter_records
from client.wire.endpoint import Endpoint
from client.wire.native import Parsers

_BATCH = 256


@dataclass(frozen=True, slots=True)
class ExtendConfig:
    source: Path
    out: Path
    limits: Limits
    fleet: FleetConfig
    max_attempts: int
    progress_every: float = 10.0
    segment_mb: float = 256.0
    segment_age: float = DEFAULT_SEGMENT_AGE_S


@dataclass
class _Work:
    record: dict[str, Any]
    decision: Decision


@dataclass
class _State:
    tally: Tally = field(default_factory=Tally)
    done: set[str] = field(default_factory=set)


def _source_run(source: Path) -> RunRecord:
    if not (source / "segments").is_dir():
        raise ConfigError(f"--extend {source}: not a run folder (no segments/ in it); give the --out of the "
                          "finished run whose cut replies should be continued")
    run = read_run_file(source)
    if run is None:
        raise ConfigError(f"--extend {source}: it has no run.json, so the settings its replies were made with are "
                          "unknown; an extension continues them with those settings")
    return run


def _check_wider(source: Path, run: RunRecord, limits: Limits) -> None:
    old_window = run.settings.get("train_window")
    if limits.train_window is not None and isinstance(old_window, int) and limits.train_window <= old_window:
        raise ConfigError(f"--train-window {limits.train_window:,} is not wider than {source}'s "
                          f"{old_window:,}: an extension continues replies under a larger limit")
    sampling = run.settings.get("sampling")
    old_max = sampling.get("max_tokens") if isinstance(sampling, dict) else None
    if limits.train_window is None and not (isinstance(old_max, int) and (limits.max_tokens or 0) > old_max):
        raise ConfigError(f"--extend needs a new limit: a --train-window wider than {source}'s "
                          f"({old_window or 'none'}) or a --max-tokens above its {old_max or 'unknown'}")


def _extension(source: Path, limits: Limits) -> dict[str, Any]:
    return {"extended_from": str(source), "train_window": limits.train_window, "max_tokens": limits.max_tokens}


def _extended_run(source: Path, run: RunRecord, limits: Limits) -> RunRecord:
    """FROM's run.json with the new window in its settings (so a plain run with the same settings may later add
    to --out what FROM never had, e.g. the prompts that filled FROM's window) and the extension in its history."""
    settings = dict(run.settings)
    if limits.train_window is not None:
        settings["train_window"] = limits.train_window
    return replace(run, settings=settings, history=(*run.history, {**_extension(source, limits), "at": time.time()}),
                   sync=None, created=time.time())


def _check_resume(out: Path, source: Path, limits: Limits) -> bool:
    """True when --out already holds this extension (a resume); ConfigError for another run."""
    existing = read_run_file(out)
    if existing is None:
        return False
    done = [{k: v for k, v in h.items() if k != "at"} for h in existing.history if "extended_from" in h]
    if not done or done[-1] != _extension(source, limits):
        what = f"the extension {done[-1]}" if done else "a run that is not an extension"
        raise ConfigError(f"--out {out} holds {what}; give a new --out for this extension, or the same --extend and "
                          "limits to resume it")
    return True


async def _parsers(endpoint: Endpoint) -> Parsers:
    try:
        info = await endpoint.get_json("/server_info")
    except (AttemptError, ValueError) as exc:
        raise ConfigError(f"{endpoint.url} does not tell its output parsers (/server_info: {exc}); --extend needs "
                          "SGLang, whose parsers split the continued replies as its chat completions do") from exc
    reasoning = info.get("reasoning_parser") if isinstance(info, dict) else None
    tool_call = info.get("tool_call_parser") if isinstance(info, dict) else None
    if not isinstance(reasoning, str) or not isinstance(tool_call, str):
        raise ConfigError(f"{endpoint.url} runs without --reasoning-parser or --tool-call-parser (its /server_info "
                          f"names {reasoning!r} and {tool_call!r}); serve the model with the parsers the run was "
                          "made with (the launcher's defaults), so the continued replies split as the others did")
    return Parsers(reasoning, tool_call)


def _take(records: Iterator[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    return list(itertools.islice(records, count))


class Extension:
    def __init__(self, cfg: ExtendConfig, fleet: list[Endpoint], dispatcher: Dispatcher, parsers: Parsers,
                 sink: ResultSink, done: set[str]) -> None:
        self.cfg = cfg
        self.endpoints = fleet
        self.dispatcher = dispatcher
        self.parsers = parsers
        self.sink = sink
        self.state = _State(done=done)
        self._send, self._receive = anyio.create_memory_object_stream[_Work](max(8, dispatcher.worker_target()))
        self._backoff = wait_exponential_jitter(initial=1.0, max=60.0, jitter=1.0)

    async def run(self) -> None:
        await self.dispatcher.prime()
        async with asyncio.TaskGroup() as group:
            side = [group.create_task(self.dispatcher.watch(e)) for e in self.endpoints]
            side.append(group.create_task(self._progress()))
            side.append(group.create_task(self._produce()))
            async with asyncio.TaskGroup() as pool:
                for _ in range(max(1, self.dispatcher.worker_target())):
                    pool.create_task(self._work())
            for task in side:
                task.cancel()

    async def _produce(self) -> None:
        records = (record for _, record in iter_records(str(self.cfg.source)))
        tally = self.state.tally
        with self._send:
            while batch := await asyncio.to_thread(_take, records, _BATCH):
                for record in batch:
                    record_id = str(record.get("id"))
                    if record_id in self.state.done:
                        tally.already += 1
                        continue
                    decision = decide(record, self.cfg.limits)
                    tally.verdicts[decision.verdict] += 1
                    if decision.verdict is Verdict.CONTINUE:
                        tally.kept_tokens += len(record["completion_token_ids"])
                        await self._send.send(_Work(record, decision))
                    else:
                        self.sink.write_result(record)  # type: ignore[arg-type]
                        self.state.done.add(record_id)
            tally.read_all = True

    async def _work(self) -> None:
        async for work in self._receive:
            await self._extend(work)

    async def _extend(self, work: _Work) -> None:
        tally = self.state.tally
        record = work.record
        try:
            stitched, endpoint = await self._attempts(lambda e: continue_record(e, record, work.decision))
            assert isinstance(stitched, Stitched)
            tally.generated_tokens += len(stitched.completion_ids) - len(record["completion_token_ids"])
            split, _ = await self._attempts(lambda e: split_record(e, stitched.completion_ids, record, self.parsers),
                                            prefer=endpoint.index)
        except _Failed as failed:
            tally.failed += 1
            self.sink.write_failure(failure_record(str(record["id"]), failed.error, failed.attempts,
                                                   failed.endpoint.url if failed.endpoint else None))
            return
        self.sink.write_result(extended_record(record, work.decision, stitched, split, endpoint))
        tally.finished[stitched.finish_reason] += 1
        self.state.done.add(str(record["id"]))

    async def _attempts(self, call: Any, prefer: int | None = None) -> tuple[Any, Endpoint]:
        """`call(endpoint)` on the balancer's endpoint, tried again on another after a retryable failure."""
        last: Endpoint | None = None
        attempts = 0
        retrying = AsyncRetrying(stop=stop_after_attempt(self.cfg.max_attempts), wait=self._backoff,
                                 retry=retry_if_exception(lambda e: isinstance(e, AttemptError) and e.retryable),
                                 reraise=True)
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    try:
                        endpoint = await self.dispatcher.acquire(avoid=last.index if last else None,
                                                                 prefer=prefer if last is None else None)
                    except DispatchClosed:
                        raise asyncio.CancelledError from None
                    last = endpoint
                    try:
                        async with self.dispatcher.scope(endpoint):
                            result = await call(endpoint)
                    except AttemptError as exc:
                        self.dispatcher.report_failure(endpoint, exc)
                        raise
                    finally:
                        self.dispatcher.release(endpoint)
                    self.dispatcher.report_success(endpoint)
                    return result, endpoint
        except AttemptError as exc:
            raise _Failed(exc, attempts, last) from exc
        raise AssertionError("tenacity ended without an outcome")

    async def _progress(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.progress_every)
            say(self.state.tally.progress_line())


class _Failed(Exception):
    def __init__(self, error: AttemptError, attempts: int, endpoint: Endpoint | None) -> None:
        super().__init__(str(error))
        self.error, self.attempts, self.endpoint = error, attempts, endpoint


async def run_extension(cfg: ExtendConfig) -> int:
    """The whole extension; the exit code (0, 1 when some replies could not be continued, 130 when stopped)."""
    source_run = _source_run(cfg.source)
    _check_wider(cfg.source, source_run, cfg.limits)
    wanted = _extended_run(cfg.source, source_run, cfg.limits)
    resuming = _check_resume(cfg.out, cfg.source, cfg.limits)
    done, _ = await asyncio.to_thread(read_done_ids, cfg.out / "segments")
    endpoints = [Endpoint(url, index=n, max_in_flight=cfg.fleet.max_in_flight, idle_timeout=cfg.fleet.idle_timeout,
                          api_key=cfg.fleet.api_key, network=cfg.fleet.network) for n, url in enumerate(cfg.fleet.urls)]
    dispatcher = Dispatcher(endpoints, DispatchSettings(failure_threshold=cfg.fleet.circuit_failures,
                                                        default_capacity=cfg.fleet.slots))
    sink: ResultSink | None = None
    extension: Extension | None = None
    try:
        found = await check_reachable(endpoints, cfg.fleet.wait_ready, note=say)
        for endpoint, readiness in zip(endpoints, found, strict=True):
            dispatcher.starting(endpoint, readiness.ready, readiness.reason)
        model = await resolve_model(endpoints, cfg.fleet.model, max(cfg.fleet.wait_ready, 60.0), note=say)
        made_with = source_run.settings.get("model")
        if made_with is not None and model != made_with:
            raise ConfigError(f"the fleet serves {model}, and {cfg.source} was made with {made_with}: a reply is "
                              "continued only by the model that began it")
        parsers = await _parsers(endpoints[0])
        if not resuming:
            await asyncio.to_thread(write_run_file, cfg.out, wanted)
        say(f"extending {cfg.source} into {cfg.out} on {len(endpoints)} endpoint(s), {model}; "
            f"{_limits_text(cfg.limits)}" + (f"; resuming after {len(done):,} record(s)" if done else ""))
        sink = ResultSink(cfg.out, run_id=new_run_id(), max_segment_bytes=int(cfg.segment_mb * (1 << 20)),
                          max_segment_age_s=cfg.segment_age)
        extension = Extension(cfg, endpoints, dispatcher, parsers, sink, done)
        await extension.run()
    except asyncio.CancelledError:
        if extension is not None:
            print_summary(extension.state.tally, cfg.out, interrupted=True)
        say("stopped: run the same command again to continue where this one stopped")
        return EXIT_INTERRUPTED
    finally:
        dispatcher.close()
        if sink is not None:
            with contextlib.suppress(Exception):
                sink.announce(await asyncio.to_thread(sink.close, announce=False))
        for endpoint in endpoints:
            await endpoint.aclose()
    print_summary(extension.state.tally, cfg.out, interrupted=False)
    _say_left_behind(cfg, extension.state.done)
    return EXIT_PROBLEM if extension.state.tally.failed else EXIT_OK


def _say_left_behind(cfg: ExtendConfig, done: set[str]) -> None:
    """FROM's failed prompts have no record to continue: said, with how to generate them into --out."""
    failed = {i: why for i, why in latest_failures(cfg.source).items() if i not in done}
    if not failed:
        return
    classes = Counter(error_class for error_class, _ in failed.values())
    named = ", ".join(f"{n:,} {error_class}" for error_class, n in classes.most_common())
    say(f"  {len(failed):,} prompt(s) of {cfg.source} have no record there ({named}: see its failures/), so nothing "
        f"was continued for them; to generate them into {cfg.out}, run client.run on it with --prompts and the "
        "settings of its run.json (prompts that filled the old window fit the new one)")


def _limits_text(limits: Limits) -> str:
    parts = [f"--train-window {limits.train_window:,}" if limits.train_window else "",
             f"--max-tokens {limits.max_tokens:,}" if limits.max_tokens else ""]
    return "to " + " and ".join(p for p in parts if p)
