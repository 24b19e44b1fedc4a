"""`python -m client.estimate`: how much GPU time will this need? Calibrate on the fleet, then project.

This module owns the command line, the two ways in (a calibration sample sent to the fleet, or the
results of an existing partial run with --from-results) and the report (rich tables, or --json). The
sample is drawn by `estimate_sample`, sent by `estimate_calibrate`, measured by `estimate_measure`
and projected by `estimate_project` / `estimate_model` (whose docstring describes the method); the
purpose figures (the trainer's window, loops) are `estimate_purpose`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from argchecks import non_empty_path, non_negative_float, positive_float, positive_int
from client.core import redact
from client.core.errors import ConfigError, RegenError, SinkError
from client.core.ids import line_id
from client.core.options import DEFAULT_MAX_IN_FLIGHT, add_s3_endpoint_url
from client.core.payload import SamplingSettings
from client.estimate.calibrate import CalibrationRun, calibrate
from client.estimate.measure import Measurements, measure
from client.estimate.model import sustained_throughput
from client.estimate.project import Projection, Settings, default_caps, default_gpus, project
from client.estimate.report import render
from client.estimate.sample import Census, allocate, census, draw, write_records
from client.estimate.waste import loop_stop_assumption
from client.fleet.options import FleetConfig, add_network_options, network_from
from client.fleet.preflight import COMPAT_CHOICES
from client.fleet.startup import parse_endpoints
from client.local.lock import hold_out_lock
from client.local.prompt_files import resolve_prompt_files
from client.local.sink import ResultSink, new_run_id
from client.results.reader import ReadReport, iter_lines

EXIT_OK, EXIT_NO_PROJECTION, EXIT_CONFIG, EXIT_SINK, EXIT_INTERRUPTED = 0, 1, 2, 4, 130

DESCRIPTION = """\
Estimate the output tokens, wall time and GPU-hours of regenerating a prompt set, with 90% intervals,
plus what-if tables for other max_tokens caps and GPU counts, and what the training would not use: the
output tokens past --train-window and in replies that loop, and the GPU-hours stopping them would save.
Either sends a random sample, stratified across prompt sources (meta.source, else the file), to the fleet
and measures its sustained throughput, or (--from-results) projects from the results of a partial run
without sending anything.
"""

EPILOG = """\
examples:
  python -m client.estimate --endpoints @endpoints.txt --prompts data.jsonl --sample 2% --gpus 8
  python -m client.estimate --from-results runs/full --prompts data.jsonl --gpus 8 --json
  python -m client.estimate --from-results runs/full --prompts data.jsonl --gpus 8 --train-window 4096

method: see docs/estimate.md. Throughput is measured only while the fleet was saturated, so the sample
must be several times the fleet's decode slots (the default sample is 5x the slots, at least 500).

exit codes:
  0    projection printed
  1    too few results to project (no result, or the fleet was never busy)
  2    bad options, unreachable endpoints, unknown model, unreadable prompts or results, --out in use
  4    the calibration results could not be written
  130  stopped by Ctrl-C (the results written so far stay in --out; use --from-results on them)
"""


def _sample_size(text: str) -> tuple[int | None, float | None]:
    try:
        if text.endswith("%"):
            share = float(text[:-1]) / 100
            if not 0 < share <= 1:
                raise ValueError
            return None, share
        count = int(text)
        if count < 1:
            raise ValueError
        return count, None
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count such as 400 or a share such as 2%, got {text!r}") from None


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _out_dir(text: str) -> Path:
    return Path(non_empty_path(text))  # Path("") is the current directory: the sample would land there


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m client.estimate", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", action="append", required=True, type=Path, metavar="FILE|DIR",
                        help="the PromptRecord JSONL set to project (.jsonl, .jsonl.gz, .jsonl.zst, or a directory "
                             "of them); repeat for several")
    way = parser.add_argument_group("calibration on the fleet")
    way.add_argument("--endpoints", metavar="URL[,URL...]|@FILE", help="server base URLs, as for client.run")
    way.add_argument("--sample", type=_sample_size, metavar="N|P%",
                     help="sample size: a count or a share of the set (default: 5x the fleet's decode slots, "
                          "at least 500)")
    way.add_argument("--out", type=_out_dir, metavar="DIR",
                     help="where the sample and its results go (default: ./estimate-<time>); must be new or empty")
    way.add_argument("--seed", type=int, default=0, help="seed of the sample draw and the bootstrap (default: 0)")
    way.add_argument("--model", help="model to request (default: the one the servers list)")
    way.add_argument("--api-key", default=os.environ.get("REGEN_API_KEY"),
                     help="bearer token (default: $REGEN_API_KEY)")
    way.add_argument("--max-in-flight", type=positive_int, default=DEFAULT_MAX_IN_FLIGHT, metavar="N",
                     help="connection cap per endpoint; the balancer keeps each server at its capacity "
                          "(default: %(default)s)")
    add_network_options(way)
    way.add_argument("--compat", choices=COMPAT_CHOICES, default="auto",
                     help="which extension fields go out, as in client.run --compat (default: %(default)s)")
    way.add_argument("--wait-ready", type=non_negative_float, default=0.0, metavar="SECONDS",
                     help="wait this long for endpoints that do not answer yet (default: 0)")
    way.add_argument("--max-attempts", type=positive_int, default=6, metavar="N",
                     help="attempts per prompt (default: 6)")
    way.add_argument("--progress-every", type=positive_float, default=10.0, metavar="SECONDS",
                     help="interval of the progress line on stderr (default: %(default)s)")
    past = parser.add_argument_group("projection from a partial run")
    past.add_argument("--from-results", metavar="DIR|s3://...", help="read these results instead of sending a sample")
    add_s3_endpoint_url(past)
    plan = parser.add_argument_group("the planned run")
    defaults = SamplingSettings()
    plan.add_argument("--max-tokens", type=positive_int, default=defaults.max_tokens,
                      help="max_tokens of the run (and of the sample) (default: %(default)s)")
    plan.add_argument("--no-thinking", action="store_true", help="thinking off (it is on by default)")
    plan.add_argument("--gpus", type=positive_int, metavar="G",
                      help="GPUs behind the fleet, for GPU-hours (default: one per endpoint)")
    plan.add_argument("--what-if-max-tokens", type=_int_list, metavar="N,N,...",
                      help="caps for the what-if table (default: powers of two up to twice --max-tokens)")
    plan.add_argument("--what-if-gpus", type=_int_list, metavar="G,G,...",
                      help="GPU counts for the what-if table (default: half, same, 2x, 4x)")
    plan.add_argument("--rounds", type=positive_int, default=1000, help="bootstrap rounds (default: %(default)s)")
    plan.add_argument("--train-window", type=positive_int, metavar="N",
                      help="the trainer's window in tokens, prompt included (4096 for the DFlash recipe: "
                           "SpecForge's max_length): report the output tokens past it and what client.run "
                           "--train-window N would save (default: not reported)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    return parser


def _result_ids(location: str, s3_endpoint_url: str | None) -> set[str]:
    ids: set[str] = set()
    for item in iter_lines(location, ReadReport(), s3_endpoint_url=s3_endpoint_url):
        # A line without a readable id (not JSON, not UTF-8) is skipped here; `measure` reads the same
        # lines again and counts and names it.
        prompt_id = line_id(item.raw)
        if prompt_id is not None:
            ids.add(prompt_id)
    return ids


def _from_results(args: argparse.Namespace) -> tuple[Measurements, Census, dict[str, int], dict[str, Any]]:
    done = _result_ids(args.from_results, args.s3_endpoint_url)
    strata_of_done: dict[str, str] = {}
    remaining: dict[str, int] = {}

    def note(prompt: Any, stratum: str) -> None:
        if prompt.id in done:
            strata_of_done[prompt.id] = stratum
        else:
            remaining[stratum] = remaining.get(stratum, 0) + 1

    counted = census(args.prompts, note)
    done.clear()
    found, report = measure(args.from_results, lambda record: strata_of_done.get(record["id"]), args.s3_endpoint_url)
    info = {"mode": "from-results", "results": args.from_results, "done": len(strata_of_done),
            "unreadable_results": report.corrupt, "torn_results": report.torn_tails,
            "unreadable_examples": [str(bad) for bad in report.examples]}
    return found, counted, {name: remaining.get(name, 0) for name in counted.strata}, info


def _calibrate(args: argparse.Namespace, settings: SamplingSettings) -> tuple[Measurements, Census, dict[str, Any]]:
    out: Path = args.out or Path(f"estimate-{new_run_id()}")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a new or empty directory")
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty; give a new directory, or re-analyse it with "
                          f"--from-results {out}")
    ResultSink.prepare(out)
    with hold_out_lock(out, note=lambda line: print(line, file=sys.stderr)):
        counted = census(args.prompts)
        if counted.total == 0:
            raise ConfigError("the prompt files hold no valid prompt")
        chosen: dict[str, str] = {}

        def make_sample(slots: int) -> tuple[Path, int]:
            count, share = args.sample or (None, None)
            size = count if count is not None else round(share * counted.total) if share is not None \
                else max(500, 5 * slots)
            sizes = allocate(counted.strata, max(1, size))
            path = out / "sample.jsonl"
            chosen.update(write_records(path, draw(args.prompts, counted.strata, sizes, args.seed)))
            return path, len(chosen)

        redact.remember(args.api_key)  # a server may echo it in an error body
        fleet = FleetConfig(tuple(parse_endpoints(args.endpoints)), model=args.model, api_key=args.api_key,
                            max_in_flight=args.max_in_flight, wait_ready=args.wait_ready, network=network_from(args),
                            compat=args.compat)
        run: CalibrationRun = asyncio.run(calibrate(fleet, settings, out, make_sample, prompt_paths=args.prompts,
                                                    max_attempts=args.max_attempts,
                                                    progress_every_s=args.progress_every))
        found, _ = measure(str(out), lambda record: chosen.get(record["id"]))
        info = {"mode": "calibration", "out": str(out), **asdict(run)}
        return found, counted, info


def estimate(args: argparse.Namespace) -> tuple[int, dict[str, Any] | None, Projection | None]:
    settings = SamplingSettings(max_tokens=args.max_tokens, enable_thinking=not args.no_thinking, seed=None)
    args.prompts = resolve_prompt_files(args.prompts, note=lambda line: print(line, file=sys.stderr)).paths
    if args.from_results:
        found, counted, remaining, info = _from_results(args)
        targets = [("whole set", counted.strata), ("remaining", remaining)]
    else:
        found, counted, info = _calibrate(args, settings)
        targets = [("whole set", counted.strata)]
    rate = sustained_throughput(found.starts, found.ends, found.tokens)
    info.update({"prompts": counted.total, "strata": counted.strata, "invalid_prompts": counted.invalid,
                 "duplicate_prompts": counted.duplicates,
                 "prompt_problems": [str(problem) for problem in counted.problems[:10]],
                 "measured": found.records, "outside_set": found.outside_set,
                 "endpoints": sorted(found.endpoints), "models": dict(found.models),
                 "thinking": found.thinking.most_common(1)[0][0] if found.thinking else not args.no_thinking,
                 "sample": sample_rows(found, counted)})
    if rate is None or found.records == 0:
        return EXIT_NO_PROJECTION, info, None
    gpus = args.gpus or max(1, len(found.endpoints))
    max_tokens = found.max_tokens.most_common(1)[0][0] if found.max_tokens else args.max_tokens
    longest = max((max(s.lengths) for s in found.strata.values() if s.lengths), default=0)
    plan = Settings(gpus=gpus, gpus_assumed=args.gpus is None, max_tokens=max_tokens,
                    what_if_max_tokens=args.what_if_max_tokens or default_caps(max_tokens, longest),
                    what_if_gpus=args.what_if_gpus or default_gpus(gpus), rounds=args.rounds, seed=args.seed,
                    train_window=args.train_window)
    info["plan"] = asdict(plan)
    info["loop_stop"] = loop_stop_assumption()
    return EXIT_OK, info, project(targets, found, rate, plan)


def sample_rows(found: Measurements, counted: Census) -> list[dict[str, Any]]:
    """Per stratum: its size in the set and what its measured lengths look like."""
    rows = []
    for name, count in counted.strata.items():
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
    if bool(args.endpoints) == bool(args.from_results):
        parser.error("give exactly one of --endpoints (calibrate on the fleet) or --from-results DIR")
    if args.from_results and (args.sample or args.out):
        parser.error("--sample and --out are for a calibration on the fleet (--endpoints); --from-results "
                     "sends nothing and writes nothing")
    if args.s3_endpoint_url and not (args.from_results or "").startswith("s3://"):
        parser.error("--s3-endpoint-url is for --from-results s3://BUCKET/PREFIX")
    try:
        code, info, projection = estimate(args)
    except KeyboardInterrupt:
        print("interrupted; the results written so far stay in --out", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SinkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SINK
    except RegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    assert info is not None
    if args.json:
        sys.stdout.buffer.write(to_json(info, projection) + b"\n")
    else:
        render(info, projection, Console(highlight=False, width=None if sys.stdout.isatty() else 140))
    if projection is None:
        print("error: no projection: the results hold no usable timings (nothing finished, or nothing ran "
              "concurrently)", file=sys.stderr)
    return code
