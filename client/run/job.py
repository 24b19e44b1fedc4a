"""One `client.run`, in three steps: `prepare` (everything that can refuse, before any prompt is sent),
`run` (the swarm with its companions: console, metrics, S3 uploader) and `finish` (close, upload,
summarise), which returns the exit code. The command line and the mapping of errors to exit codes are
client.run.main's; the signal policy is client.run.stop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.core.errors import ConfigError, InputError, RenderError, RequestRejected
from client.core.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM, EXIT_SYNC_PENDING
from client.core.payload import FieldPolicy, RequestShape, chat_template_kwargs, sampling_block
from client.core.records import Prompt
from client.core.sampling_plan import SamplingPlan, SamplingSettings, plan_line, single
from client.core.stats import RunStats, StatsSnapshot
from client.engine.partials import PartialKeeper, reply_key
from client.engine.rate import RequestRate
from client.engine.retry import LocalCount
from client.engine.session import Fleet, open_fleet
from client.engine.swarm import RetryPolicy, Swarm, SwarmOutcome, SwarmSettings
from client.engine.turns import TurnLedger, add_records, count_remaining_events, load_turn_ledger, skip_too_long
from client.fleet.sim_clock import describe_fleet
from client.fleet.sim_clock import probe as probe_sim_clock
from client.local.estimate_file import expected_tokens_per_prompt
from client.local.ledger import ScanReport, read_done_ids
from client.local.partials import PARTIALS_DIR, PartialStore
from client.local.prompt_files import resolve_prompt_files
from client.local.run_settings import shaping_settings
from client.local.sink import ResultSink, new_run_id
from client.local.source import PromptSource, Shard, count_remaining
from client.results.lengths import recent_lengths
from client.results.reader import iter_records
from client.run.config import RunConfig
from client.run.console import say, show_progress
from client.run.edited_prompts import check_edited
from client.run.metrics import MetricsServer, linger_for_final_scrape
from client.run.next_steps import RunOutput, print_next_steps
from client.run.s3_wiring import drain, open_s3, register_s3
from client.run.settings_gate import SettingsGate, check_sync_target
from client.run.shard_auto import resolve_shard
from client.run.stop import StopController
from client.run.stopped_loops import redo_stopped
from client.run.summary import print_summary
from client.s3.uploader import SegmentUploader, SyncReport

Companion = Callable[[], Coroutine[Any, Any, None]]


def local_counter(tokenizer: Path, plan: SamplingPlan, seed: int | None) -> LocalCount:
    """--tokenizer DIR: count a prompt as its chat request renders, with the model's template and tokenizer,
    and the `chat_template_kwargs` (thinking, preserve_thinking, the plan's others) of the prompt's draw
    from the sampling plan. A prompt the template cannot render fails alone (RequestRejected, named in the
    failures file); the run goes on."""
    try:
        from client.local.chat_template import ChatTokenizer, prompt_count
    except ImportError as exc:
        raise ConfigError(f"--tokenizer needs the [export] extra ({exc.name} is missing): pip install -e "
                          "'.[export]'") from exc

    def kwargs(values: SamplingSettings) -> dict[str, Any] | None:
        return chat_template_kwargs(sampling_block(values, FieldPolicy.everything()))

    tok = ChatTokenizer.load(tokenizer)
    try:
        prompt_count(tok, [{"role": "user", "content": "hi"}], None, kwargs=kwargs(plan.settings[0].values))
    except RenderError as exc:
        raise ConfigError(f"--tokenizer {tokenizer}: {exc}") from exc

    def count(prompt: Prompt, messages: list[dict[str, Any]]) -> int:
        try:
            values = plan.draw(seed, prompt.id, prompt.meta).setting.values
            return prompt_count(tok, messages, prompt.tools, kwargs=kwargs(values))
        except RenderError as exc:  # this prompt only: a failed prompt, not a stopped run
            raise RequestRejected(f"--tokenizer could not render this prompt to count it: {exc}", 0) from exc

    return count


@dataclass(frozen=True, slots=True)
class Prepared:
    """What `Run.prepare` opened and checked: all `run` and `finish` need."""

    fleet: Fleet
    source: PromptSource
    sink: ResultSink
    swarm: Swarm
    uploader: SegmentUploader | None
    metrics: MetricsServer | None
    companions: tuple[Companion, ...]  # loops beside the swarm's own: counting the total, seeding the ETA
    done_before: int  # records under --out before this run


def _prompt_paths(prompts: Sequence[Path], *, strict: bool) -> list[Path] | None:
    """The prompt files to read; None when every one is empty (nothing to do; under --strict, an error)."""
    prompt_files = resolve_prompt_files(list(prompts), note=say)
    if prompt_files.all_empty:
        nothing = "the prompt file(s) hold no record at all (" + ", ".join(map(str, prompt_files.empty)) + " empty)"
        if strict:
            raise InputError(f"{nothing}; stopping because of --strict")
        say(f"warning: nothing to do: {nothing}")
        return None
    for path in prompt_files.empty:
        say(f"warning: --prompts {path} is empty")
    return prompt_files.paths


def _read_done(out: Path) -> tuple[set[str], ScanReport]:
    """The done ids under --out (a torn tail repaired, damaged sidecars rebuilt), said when there are any."""
    done_ids, scan = read_done_ids(out / "segments")
    if scan.segments:
        repaired = f", repaired a torn tail of {scan.repaired_bytes} bytes" if scan.repaired_bytes else ""
        corrupt = (f", {scan.corrupt_lines} damaged line(s) moved aside" if scan.corrupt_lines else "")
        rebuilt = (f", rebuilt {scan.rebuilt_sidecars} damaged .ids sidecar(s) from their segments"
                   if scan.rebuilt_sidecars else "")
        say(f"resuming: {len(done_ids):,} done id(s) in {scan.segments} segment(s){repaired}{corrupt}{rebuilt}")
        for line in scan.damaged:  # each damaged line named: its prompt is generated again
            say(f"warning: {line}")
    return done_ids, scan


class Run:
    def __init__(self, cfg: RunConfig, stop: StopController) -> None:
        self.cfg = cfg
        self.stop = stop
        self.run_id = new_run_id()
        self.stats = RunStats(gpus=cfg.view.gpus, max_tokens=cfg.sampling.max_tokens, expected_tokens_per_prompt=(
            expected_tokens_per_prompt(cfg.view.estimate) if cfg.view.estimate else None))
        self._local_count = (local_counter(cfg.tokenizer, cfg.plan or single(cfg.sampling), cfg.sampling.seed)
                             if cfg.tokenizer else None)

    # -- prepare ---------------------------------------------------------------------------------------

    async def prepare(self, stack: contextlib.AsyncExitStack) -> Prepared | int:
        """Everything that can refuse, in order, before any prompt is sent; an exit code to end early."""
        cfg = self.cfg
        ResultSink.prepare(cfg.out)
        s3_url = cfg.s3.s3 if cfg.s3 is not None else None
        await asyncio.to_thread(check_sync_target, cfg.out, s3_url)  # before anything is read from S3 or sent
        paths = _prompt_paths(cfg.prompts, strict=cfg.strict)
        if paths is None:
            return EXIT_OK
        shard, shard_source = resolve_shard(cfg.shard, cfg.shard_count, os.environ, note=say)
        done_ids, scan = _read_done(cfg.out)
        uploader = None
        if cfg.s3 is not None:
            uploader = await open_s3(cfg.s3, cfg.out, shard or Shard(0, 1), self.run_id, done_ids, stack,
                                     failed_count=lambda: self.stats.failed, shard_source=shard_source,
                                     set_aside=scan.set_aside)
        ledger = await self._turn_ledger(done_ids) if cfg.turns == "all" else None
        # What the source skips: done prompts, or (--turns all) conversations whose last event is written.
        skip_ids = ledger.finished if ledger is not None else done_ids
        too_long_ids = self._too_long_earlier(done_ids, ledger)
        metrics = self._start_metrics(stack, uploader)

        gate = SettingsGate(cfg.out, run_id=self.run_id, allow_change=cfg.allow_settings_change,
                            store=uploader.store if uploader is not None else None,
                            existing_records=len(done_ids), s3=s3_url,
                            delete_uploaded=cfg.s3 is not None and cfg.s3.delete_uploaded)

        async def check_shape(shape: RequestShape) -> None:
            plan = None if cfg.plan is None else {**cfg.plan.describe(), "sha256": cfg.plan.sha256,
                                                  "seed": cfg.sampling.seed}
            await gate.check(shaping_settings(model=shape.model, sampling=shape.sampling,
                                              thinking=shape.settings.enable_thinking, turns=cfg.turns,
                                              fields=shape.policy.extensions, loop_stop=cfg.loop_stop,
                                              train_window=cfg.train_window, plan=plan))

        fleet = await stack.enter_async_context(
            open_fleet(cfg.fleet, cfg.sampling, prompt_paths=paths, note=say, check_shape=check_shape,
                       train_window=cfg.train_window, counts_locally=self._local_count is not None,
                       plan=cfg.plan))
        self.stats.track(len(fleet.endpoints))
        # run.json records what the results ran on (a simulated fleet's time is its modelled clock's, not the
        # host's); the first load poll names the servers' GPUs.
        await fleet.dispatcher.prime()
        simulated = await probe_sim_clock(fleet.endpoints)
        await gate.record(paths, describe_fleet(fleet.dispatcher.live(), simulated))
        await check_edited(gate.changed_prompt_files, paths, cfg.out, done_ids, redo=cfg.redo_edited, ledger=ledger)
        if cfg.redo_repetition:
            await redo_stopped(cfg.out, done_ids, ledger=ledger)
        await register_s3(uploader)  # only now: a start refused above has left S3 as it found it
        say(f"model {fleet.model} on {len(fleet.endpoints)} endpoint(s); {plan_line(fleet.shape.the_plan)}, "
            f"turns {cfg.turns}")

        source = PromptSource(paths, skip_ids, strict=cfg.strict, shard=shard, on_problem=self._problem_shower(),
                              too_long_ids=too_long_ids)
        sink = ResultSink(cfg.out, run_id=self.run_id, shard_label=(shard or Shard(0, 1)).label,
                          max_segment_bytes=int(cfg.segment_mb * (1 << 20)), max_segment_age_s=cfg.segment_age_s,
                          on_segment_closed=uploader.segment_closed if uploader else None)

        async def count_total() -> None:
            if ledger is not None:
                self.stats.total = await asyncio.to_thread(count_remaining_events, paths, ledger, shard)
            else:
                self.stats.total = await asyncio.to_thread(count_remaining, paths, done_ids | too_long_ids, shard)

        companions: list[Companion] = [count_total]
        if scan.segments:
            async def seed_lengths() -> None:
                # The ETA's lengths start from the records already done, not from nothing (client.core.eta).
                self.stats.seed_lengths(await asyncio.to_thread(recent_lengths, cfg.out))

            companions.append(seed_lengths)
        keeper = await self._keeper(fleet, done_ids) if cfg.fleet.continue_replies else None
        return Prepared(fleet=fleet, source=source, sink=sink, swarm=self._swarm(fleet, source, sink, ledger, keeper),
                        uploader=uploader, metrics=metrics, companions=tuple(companions), done_before=len(done_ids))

    def _too_long_earlier(self, done_ids: set[str], ledger: TurnLedger | None) -> set[str]:
        """The prompts an earlier run found too long (or filling the window), left out unless --retry-too-long."""
        cfg = self.cfg
        if cfg.retry_too_long:
            return set()
        too_long_ids = skip_too_long(cfg.out, done_ids, ledger, cfg.train_window)
        if too_long_ids:
            say(f"leaving out {len(too_long_ids):,} prompt(s) an earlier run found longer than the server's context "
                "(too_long in the failures file); pass --retry-too-long to send them again")
        return too_long_ids

    async def _keeper(self, fleet: Fleet, done_ids: set[str]) -> PartialKeeper:
        """--continue-replies: the replies an earlier run left in flight, to continue from their ids."""
        store = PartialStore(self.cfg.out)
        saved, unreadable = await asyncio.to_thread(store.load, done_ids)
        if saved:
            say(f"continuing {len(saved):,} repl(ies) an earlier run left in flight, from their ids "
                f"({self.cfg.out / PARTIALS_DIR})")
        if unreadable:
            say(f"warning: {unreadable:,} unreadable file(s) in {self.cfg.out / PARTIALS_DIR} removed; those replies "
                "are generated again")
        shape = fleet.shape
        return PartialKeeper(store, saved, lambda prompt: reply_key(prompt, shape.recorded(prompt)))

    def _swarm(self, fleet: Fleet, source: PromptSource, sink: ResultSink, ledger: TurnLedger | None,
               keeper: PartialKeeper | None = None) -> Swarm:
        cfg = self.cfg
        settings = SwarmSettings(
            retry=RetryPolicy(max_attempts=cfg.max_attempts, max_retry_after_s=cfg.max_retry_after),
            grace_s=cfg.grace, rotate_check_s=min(5.0, max(0.2, cfg.segment_age_s / 5)), turns=cfg.turns,
            rate=RequestRate(cfg.max_requests_per_second) if cfg.max_requests_per_second else None,
            stop_loops=cfg.loop_stop, train_window=cfg.train_window, local_count=self._local_count, keeper=keeper)
        return Swarm(fleet, source, sink, self.stats, settings, ledger=ledger)

    def _problem_shower(self) -> Callable[[object], None]:
        shown = 0

        def on_problem(problem: object) -> None:
            nonlocal shown
            shown += 1
            if shown <= self.cfg.show_problems:
                say(f"skipped invalid record: {problem}")

        return on_problem

    def _start_metrics(self, stack: contextlib.AsyncExitStack,
                       uploader: SegmentUploader | None) -> MetricsServer | None:
        view = self.cfg.view
        if view.metrics_port is None:
            return None
        metrics = MetricsServer(view.metrics_host, view.metrics_port)
        stack.callback(metrics.close)
        # Zeros from the first scrape, not an empty page.
        metrics.show(self.stats.snapshot((), uploader.view() if uploader is not None else None))
        say(f"metrics: {metrics.url}")
        return metrics

    async def _turn_ledger(self, done_ids: set[str]) -> TurnLedger:
        """Which conversations are over, and the last written turn of those a crash cut off (local segments
        first; on a fresh host, the S3 prefix)."""
        s3 = self.cfg.s3
        ledger = await asyncio.to_thread(load_turn_ledger, done_ids, self.cfg.out / "segments")
        if ledger.missing and s3 is not None:
            say(f"conversations: reading the last turn of {len(ledger.missing)} unfinished conversation(s) from S3")
            records = iter_records(s3.s3, s3_endpoint_url=s3.s3_endpoint_url)
            await asyncio.to_thread(add_records, ledger, (record for _, record in records))
        if ledger.missing:
            sample = ", ".join(list(ledger.missing.values())[:3])
            raise ConfigError(f"{len(ledger.missing)} unfinished conversation(s) have written turns that cannot be "
                              f"read back (e.g. {sample}); pass the --s3 prefix that holds them, or move those "
                              "segments back under --out")
        if ledger.finished or ledger.latest:
            say(f"conversations: {len(ledger.finished):,} finished, {len(ledger.latest):,} to continue at their "
                "next turn")
        return ledger

    # -- run -------------------------------------------------------------------------------------------

    def snapshot(self, prepared: Prepared) -> StatsSnapshot:
        uploader = prepared.uploader
        return self.stats.snapshot(prepared.fleet.dispatcher.live(), uploader.view() if uploader is not None else None)

    async def run(self, prepared: Prepared, *,
                  probes: Sequence[Companion] = ()) -> tuple[SwarmOutcome, SyncReport | None]:
        """The swarm with its companions; `probes`: more loops beside it (a benchmark's sampler)."""
        swarm, sink, uploader, metrics = prepared.swarm, prepared.sink, prepared.uploader, prepared.metrics
        view = self.cfg.view

        def snapshot() -> StatsSnapshot:
            return self.snapshot(prepared)

        async def progress() -> None:
            await show_progress(snapshot, live=False if view.plain else None, plain_every_s=view.progress_every)

        companions = [*prepared.companions, *probes, progress]
        if metrics is not None:
            companions.append(lambda: metrics.publish(snapshot))
        if uploader is not None:
            # Two companions: the heartbeat must never wait behind a slow segment upload.
            companions.extend((uploader.run, uploader.heartbeat))

        def announce() -> None:
            self.stats.stopping = True
            say(f"\nstopping: no new requests; waiting up to {self.cfg.grace:.0f}s for those in flight "
                "(press Ctrl-C again to stop now)")

        self.stop.graceful(lambda immediate: swarm.request_stop(immediate=immediate), announce)
        sync: SyncReport | None = None
        try:
            outcome = await swarm.run(companions)
        finally:
            self.stop.cancel_on_signal()
            try:
                sink.announce(await asyncio.to_thread(sink.close, announce=False))
            finally:
                if uploader is not None and self.cfg.s3 is not None:
                    ended = not swarm.outcome.interrupted and swarm.outcome.fatal is None
                    sync = await drain(uploader, self.cfg.s3, self.cfg.out, "finished" if ended else "stopped",
                                       skip=self.stop.skip_on_signal())
        return outcome, sync

    # -- finish ----------------------------------------------------------------------------------------

    async def finish(self, prepared: Prepared, outcome: SwarmOutcome, sync: SyncReport | None) -> int:
        source, sink, metrics = prepared.source, prepared.sink, prepared.metrics
        final = self.snapshot(prepared)
        # Served before the summary is printed: a scraper that sees the run end reads the final figures.
        scraped = metrics.serve_final(final) if metrics is not None else None
        print_summary(source.counts, final, outcome, sink.failures_path, turns=self.cfg.turns)
        linger = self.cfg.view.metrics_linger
        if scraped is not None and linger > 0:
            say(f"metrics: serving the final figures until a scrape reads them (at most {linger:.0f}s)")
            await linger_for_final_scrape(scraped, linger)
        if outcome.fatal is not None:
            raise outcome.fatal
        no_valid = None if outcome.interrupted else source.counts.no_valid_record()
        if no_valid is not None:
            if self.cfg.strict:
                raise InputError(f"{no_valid}; stopping because of --strict")
            raise InputError(f"nothing was generated: {no_valid}")
        if prepared.uploader is not None and prepared.uploader.fatal is not None:
            raise prepared.uploader.fatal
        print_next_steps(RunOutput(self.cfg.out, records=prepared.done_before + sink.written, written=sink.written,
                                   without_ids=sink.without_ids, token_ids=self.cfg.fleet.token_ids,
                                   simulated=self.cfg.simulate is not None, failures=sink.failures_path),
                         interrupted=outcome.interrupted)
        if outcome.interrupted:
            say("interrupted: run the same command again to continue where this one stopped")
            return EXIT_INTERRUPTED
        if sync is not None and (sync.pending or sync.too_large):
            return EXIT_SYNC_PENDING
        return EXIT_PROBLEM if self.stats.failed > self.stats.too_long else EXIT_OK
