"""`python -m client.estimate`: how much GPU time will this need? Calibrate on the fleet, then project.

This module owns the two ways in (a calibration sample sent to the fleet, real or simulated with
--simulate, or the results of an existing partial run with --from-results) and the report (rich tables,
or --json); the options are client.estimate.cli's. The sample is drawn by `estimate.sample`, sent by
`estimate.calibrate`, measured by `estimate.measure` and projected by `estimate.project` /
`estimate.model` (whose docstring describes the method); the purpose figures (the trainer's window,
loops) are `estimate.purpose`'s, the projection onto other GPU kinds `estimate.hardware`'s. --set-size
projects a set of that many prompts shaped like --prompts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from client.core import redact
from client.core.errors import ConfigError, PlanError
from client.core.exit_codes import EXIT_OK, EXIT_PROBLEM
from client.core.human_out import write_report
from client.core.ids import line_id
from client.core.payload import SamplingSettings
from client.core.plan_file import read_plan
from client.core.report_text import print_report
from client.core.sampling_plan import SamplingPlan
from client.estimate.calibrate import CalibrationRun, calibrate
from client.estimate.cli import build_parser, check
from client.estimate.gpu_plan import check_options, hardware_projection
from client.estimate.measure import Measurements, measure
from client.estimate.model import Throughput, sustained_throughput
from client.estimate.project import Projection, Settings, default_caps, default_gpus, project
from client.estimate.report import render
from client.estimate.sample import (
    Census,
    Stratifier,
    allocate,
    by_setting,
    census,
    draw,
    scale_counts,
    setting_of,
    stratum_of,
    write_records,
)
from client.estimate.waste import loop_stop_assumption
from client.fleet.options import FleetConfig, network_from
from client.fleet.sim_clock import ClockTrace
from client.fleet.startup import parse_endpoints
from client.local.lock import hold_out_lock
from client.local.out_dir import NewOut
from client.local.prompt_files import resolve_prompt_files
from client.local.run_settings import read_run_file
from client.local.sink import ResultSink, new_run_id
from client.results.reader import ReadReport, iter_lines

DEFAULT_SIM_SLOTS = 32  # a simulated server's slots without --gpu-kind (the generic GPU)


def _result_ids(location: str, s3_endpoint_url: str | None) -> set[str]:
    ids: set[str] = set()
    for item in iter_lines(location, ReadReport(), s3_endpoint_url=s3_endpoint_url):
        # A line without a readable id (not JSON, not UTF-8) is skipped here; `measure` reads the same
        # lines again and counts and names it.
        prompt_id = line_id(item.raw)
        if prompt_id is not None:
            ids.add(prompt_id)
    return ids


def _recorded_fleets(location: str) -> tuple[dict[str, Any], ...]:
    """The fleets a local run's run.json says its runs used (none for an S3 prefix, or a run.json without)."""
    if location.startswith("s3://"):
        return ()
    record = read_run_file(Path(location))
    return record.fleets if record is not None else ()


def _check_fleets(location: str, fleets: Sequence[dict[str, Any]], info: dict[str, Any]) -> None:
    """Refuse results a simulated fleet made (ConfigError, exit 2), and take the GPU count the runs' servers
    reported when every run recorded the same one."""
    simulated = [f for f in fleets if f.get("simulated")]
    if simulated:
        first = simulated[0]
        raise ConfigError(
            f"{location}: its run.json records that {len(simulated)} of its {len(fleets)} run(s) ran on a simulated "
            f"fleet ({first.get('servers')} server(s) at speed {first.get('speed')}, modelling "
            f"{first.get('kind')!r}): the results' timings are the host's wall clock, sped up by the simulator and "
            "slowed by whatever else the machine ran, not a GPU's, and a resume on another fleet would count its "
            "ports again. No GPU time can be projected from them. Calibrate instead: client.estimate --simulate N "
            "(or --endpoints on the simulated servers) times its sample on their modelled GPU clock")
    counts = {f.get("gpus") for f in fleets}
    if len(counts) == 1 and isinstance(next(iter(counts)), int):
        info["server_gpus"] = next(iter(counts))
        info["gpus_recorded"] = True


def _from_results(args: argparse.Namespace,
                  stratifier: Stratifier) -> tuple[Measurements, Census, dict[str, int], dict[str, Any]]:
    fleets = _recorded_fleets(args.from_results)
    _check_fleets(args.from_results, fleets, {})  # before the results are read: refused at once
    done = _result_ids(args.from_results, args.s3_endpoint_url)
    strata_of_done: dict[str, str] = {}
    remaining: dict[str, int] = {}

    def note(prompt: Any, stratum: str) -> None:
        if prompt.id in done:
            strata_of_done[prompt.id] = stratum
        else:
            remaining[stratum] = remaining.get(stratum, 0) + 1

    counted = census(args.prompts, note, stratifier)
    done.clear()
    found, report = measure(args.from_results, lambda record: strata_of_done.get(record["id"]), args.s3_endpoint_url)
    info = {"mode": "from-results", "results": args.from_results, "done": len(strata_of_done),
            "unreadable_results": report.corrupt, "torn_results": report.torn_tails,
            "unreadable_examples": [str(bad) for bad in report.examples], "fleets": list(fleets)}
    _check_fleets(args.from_results, fleets, info)
    left = {name: remaining.get(name, 0) for name in counted.strata}
    if args.set_size:
        # The files hold part of the set: what remains is the scaled stratum less what is done of it.
        scaled = scale_counts(counted.strata, args.set_size)
        left = {name: max(0, scaled[name] - (counted.strata[name] - left[name])) for name in counted.strata}
    return found, counted, left, info


@contextlib.contextmanager
def _simulated(args: argparse.Namespace) -> Iterator[tuple[str, ...]]:
    """--simulate N: a local fleet of simulated SGLang servers for the calibration, as client.run starts one."""
    if not args.simulate:
        yield tuple(parse_endpoints(args.endpoints))
        return
    from simulator.api import SimFleet, SimServerSpec

    # With --gpu-kind the servers play that GPU: its slots (unless --sim-max-running), its pace, its name.
    spec = SimServerSpec(max_running=_sim_slots(args), speed=args.sim_speed, extra_args=tuple(args.sim_arg or ()),
                         gpu_kind=args.gpu_kind)
    print(f"starting {args.simulate} simulated server(s) on 127.0.0.1 ...", file=sys.stderr)
    with SimFleet([spec] * args.simulate, seed=args.seed) as fleet:
        yield tuple(fleet.urls)


def _sim_slots(args: argparse.Namespace) -> int:
    """Decode slots per simulated server: --sim-max-running, else the --gpu-kind's memory plan, else 32."""
    if args.sim_max_running is not None:
        return int(args.sim_max_running)
    if args.gpu_kind is None:
        return DEFAULT_SIM_SLOTS
    from simulator.api import figures

    return figures(args.gpu_kind).slots


@contextlib.contextmanager
def _calibration_dir(args: argparse.Namespace) -> Iterator[Path]:
    """Where the sample and its results go: --out if given; on a real fleet runs/estimate-<time>, kept, since
    those results cost GPU time and --from-results re-reads them; with --simulate a temporary directory,
    removed at exit: a simulated calibration is cheap to repeat and its tens of MB were never asked for.
    A calibration that fails before writing anything (an unreachable fleet, a refused preflight) removes
    the directory it created, as client.run does: an empty folder is not a calibration to re-read."""
    if args.simulate and args.out is None:
        with tempfile.TemporaryDirectory(prefix="regen-estimate-") as scratch:
            yield Path(scratch) / "calibration"
        return
    out: Path = args.out if args.out is not None else Path("runs") / f"estimate-{new_run_id()}"
    new_out = NewOut(out)  # before anything is created: which of out and its parents are new
    done = False
    try:
        yield out
        done = True
    finally:
        if not done:  # only what this calibration made, and only while it holds nothing
            new_out.remove_if_unused()


def _calibrate(args: argparse.Namespace, settings: SamplingSettings, plan: SamplingPlan | None,
               stratifier: Stratifier) -> tuple[Measurements, Census, dict[str, Any]]:
    with _calibration_dir(args) as out:
        found, counted, info = _calibrate_in(out, args, settings, plan, stratifier)
    if args.simulate and args.out is None:
        info["out"] = None  # removed with its temporary directory; the report says how to keep it
    return found, counted, info


def _calibrate_in(out: Path, args: argparse.Namespace, settings: SamplingSettings, plan: SamplingPlan | None,
                  stratifier: Stratifier) -> tuple[Measurements, Census, dict[str, Any]]:
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a new or empty directory")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty; give a new directory, or re-analyse it with "
                          f"--from-results {out}")
    ResultSink.prepare(out)
    with hold_out_lock(out, note=lambda line: print(line, file=sys.stderr)):
        counted = census(args.prompts, stratifier=stratifier)
        if counted.total == 0:
            raise ConfigError("the prompt files hold no valid prompt")
        chosen: dict[str, str] = {}

        def make_sample(slots: int) -> tuple[Path, int]:
            count, share = args.sample or (None, None)
            size = count if count is not None else round(share * counted.total) if share is not None \
                else max(500, 5 * slots)
            sizes = allocate(counted.strata, max(1, size))
            path = out / "sample.jsonl"
            chosen.update(write_records(path, draw(args.prompts, counted.strata, sizes, args.seed, stratifier)))
            return path, len(chosen)

        redact.remember(args.api_key)  # a server may echo it in an error body
        with _simulated(args) as urls:
            fleet = FleetConfig(urls, model=args.model, api_key=args.api_key, max_in_flight=args.max_in_flight,
                                wait_ready=args.wait_ready, network=network_from(args), compat=args.compat)
            run: CalibrationRun
            run, clock = asyncio.run(calibrate(fleet, settings, out, make_sample, prompt_paths=args.prompts,
                                               max_attempts=args.max_attempts, progress_every_s=args.progress_every,
                                               plan=plan))
        # On a simulated fleet the spans are read on the servers' modelled clock (at speed 1, whatever the
        # host's load): the figures are the modelled GPU's, not the host's.
        found, _ = measure(str(out), lambda record: chosen.get(record["id"]), clock=clock)
        info = {"mode": "calibration", "out": str(out), **asdict(run)}
        if args.simulate:
            assert run.simulated is not None  # the servers it started answer GET /sim/clock
            info["simulated"] = {**run.simulated, "max_running": _sim_slots(args),
                                 "args": list(args.sim_arg or ())}
        return found, counted, info


def estimate(args: argparse.Namespace) -> tuple[int, dict[str, Any] | None, Projection | None]:
    settings = SamplingSettings(max_tokens=args.max_tokens, enable_thinking=not args.no_thinking,
                                seed=args.run_seed)
    check_options(args)  # a GPU kind the table does not know is refused before anything is sent
    sampling_plan = _plan(args, settings)
    stratifier = by_setting(sampling_plan, args.run_seed) if sampling_plan is not None else stratum_of
    args.prompts = resolve_prompt_files(args.prompts, note=lambda line: print(line, file=sys.stderr)).paths
    if args.from_results:
        found, counted, remaining, info = _from_results(args, stratifier)
    else:
        found, counted, info = _calibrate(args, settings, sampling_plan, stratifier)
    whole = scale_counts(counted.strata, args.set_size) if args.set_size else counted.strata
    targets = [("whole set", whole)] + ([("remaining", remaining)] if args.from_results else [])
    if sampling_plan is not None:
        settings_rows = per_setting(sampling_plan, whole)
        targets += settings_rows
        info["sampling_plan"] = {"name": sampling_plan.name, "source": sampling_plan.source,
                                 "sha256": sampling_plan.sha256, "run_seed": args.run_seed,
                                 "settings": sampling_plan.describe()["settings"],
                                 "prompts": {label.removeprefix("setting "): sum(counts.values())
                                             for label, counts in settings_rows}}
    rate = sustained_throughput(found.starts, found.ends, found.tokens)
    if rate is not None and found.clock is not None:
        rate = _as_served(rate, found.clock)
    info.update({"prompts": sum(whole.values()), "strata": whole, "prompts_in_files": counted.total,
                 "set_size": args.set_size, "invalid_prompts": counted.invalid,
                 "duplicate_prompts": counted.duplicates,
                 "prompt_problems": [str(problem) for problem in counted.problems[:10]],
                 "measured": found.records, "outside_set": found.outside_set,
                 "endpoints": sorted(found.endpoints), "models": dict(found.models),
                 "thinking": found.thinking.most_common(1)[0][0] if found.thinking else not args.no_thinking,
                 "sample": sample_rows(found, whole)})
    if rate is None or found.records == 0:
        return EXIT_PROBLEM, info, None
    server_gpus = info.get("server_gpus")
    gpus = args.gpus or server_gpus or max(1, len(found.endpoints))
    info["gpus_from"] = ("--gpus" if args.gpus else "run.json" if server_gpus and info.get("gpus_recorded")
                         else "servers" if server_gpus else "one per endpoint (assumed)")
    max_tokens = found.max_tokens.most_common(1)[0][0] if found.max_tokens else args.max_tokens
    longest = max((max(s.lengths) for s in found.strata.values() if s.lengths), default=0)
    plan = Settings(gpus=gpus, gpus_assumed=not args.gpus and not server_gpus, max_tokens=max_tokens,
                    what_if_max_tokens=args.what_if_max_tokens or default_caps(max_tokens, longest),
                    what_if_gpus=args.what_if_gpus or default_gpus(gpus), rounds=args.rounds, seed=args.seed,
                    train_window=args.train_window, extend_from=args.extend_from, prompts_in_files=counted.total,
                    outside_sample=("remaining",) if args.from_results else ())
    info["plan"] = asdict(plan)
    info["loop_stop"] = loop_stop_assumption()
    projected = project(targets, found, rate, plan)
    hardware, notes = hardware_projection(args, info, projected, found, whole, gpus)
    info["hardware_notes"] = notes
    return EXIT_OK, info, dataclasses.replace(projected, hardware=hardware)


def _plan(args: argparse.Namespace, settings: SamplingSettings) -> SamplingPlan | None:
    """--sampling-plan, read as client.run reads it (values a setting does not give come from the options)."""
    if args.sampling_plan is None:
        return None
    try:
        return read_plan(args.sampling_plan, settings)
    except PlanError as exc:  # the inline form's message names the option already; a file's names the file
        message = str(exc)
        raise ConfigError(message if message.startswith("--sampling-plan") else f"--sampling-plan {message}") from exc


def per_setting(plan: SamplingPlan, strata: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """One target per setting of the plan that any prompt draws: the strata of that setting, with their
    counts (the draw is by id, so these are the set's own counts, not a sampled share)."""
    targets = []
    for setting in plan.settings:
        counts = {name: count for name, count in strata.items() if setting_of(name) == setting.name}
        if sum(counts.values()) > 0:
            targets.append((f"setting {setting.name}", counts))
    return targets


def _as_served(rate: Throughput, clock: ClockTrace) -> Throughput:
    """On a simulated fleet: the rate and the batch over the saturated window as the servers counted them
    (client.fleet.sim_clock.ClockTrace.served) in place of the client's view of its spans; the bootstrap's
    blocks and the batch shape are scaled alike, so the interval and the lone request's boost keep their shape."""
    served = clock.served(rate.start, rate.end)
    if served is None or served[0] <= 0 or served[1] <= 0 or rate.tokens_per_s <= 0:
        return rate
    tokens_per_s, concurrency = served
    scale = tokens_per_s / rate.tokens_per_s
    return dataclasses.replace(rate, tokens_per_s=tokens_per_s, concurrency=concurrency,
                               blocks=tuple((tokens * scale, seconds) for tokens, seconds in rate.blocks),
                               kappa=rate.kappa * rate.concurrency / concurrency)


def sample_rows(found: Measurements, strata: dict[str, int]) -> list[dict[str, Any]]:
    """Per stratum: its size in the set and what its measured lengths look like."""
    rows = []
    for name, count in strata.items():
        sample = found.strata.get(name)
        ordered = sorted(sample.lengths) if sample is not None else []
        n = len(ordered)
        rows.append({
            "stratum": name, "prompts": count, "measured": n,
            "mean": sum(ordered) / n if n else None,
            "p50": ordered[n // 2] if n else None, "p90": ordered[min(n - 1, (9 * n) // 10)] if n else None,
            "max": ordered[-1] if n else None,
            "truncated_share": sample.truncated / n if sample is not None and n else None,
            "reasoning_mean": sample.reasoning / n if sample is not None and n else None,
            "content_mean": sample.content / n if sample is not None and n else None,
            "tool_mean": sample.tools / n if sample is not None and n else None,
        })
    return rows


def to_json(info: dict[str, Any], projection: Projection | None) -> bytes:
    data = {"input": info, "projection": asdict(projection) if projection is not None else None}
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check(parser, args)
    try:
        code, info, projection = estimate(args)
    except KeyboardInterrupt:
        kept = args.out is not None or not args.simulate  # a simulated run's temporary directory is gone
        raise KeyboardInterrupt("interrupted; " + ("the results written so far stay in --out" if kept else
                                "nothing kept (--out DIR keeps a simulated calibration's results)")) from None
    assert info is not None
    if args.json:
        write_report(to_json(info, projection) + b"\n")
    else:
        print_report(lambda console: render(info, projection, console), 140)
    if projection is None:
        print("error: no projection: the results hold no usable timings (nothing finished, or nothing ran "
              "concurrently)", file=sys.stderr)
    return code
