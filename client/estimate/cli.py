"""The command line of `python -m client.estimate`: its options, and the checks of one against another (misuse
exits 2 with the usage line). The estimate itself is client.estimate.main's."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from argchecks import non_empty_path, non_negative_float, positive_float, positive_int, whole_in
from argchecks.parser import ToolParser
from client.core.options import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_IN_FLIGHT,
    MAX_SIMULATED,
    add_s3_endpoint_url,
    same_run_key,
    seed_number,
    simulated_servers,
)
from client.core.payload import SamplingSettings
from client.estimate.hardware import MAX_GPUS
from client.fleet.options import add_network_options
from client.fleet.preflight import COMPAT_CHOICES

DESCRIPTION = """\
Estimate the output tokens, wall time and GPU-hours of regenerating a prompt set, with 90% intervals,
plus what-if tables for other max_tokens caps and GPU counts, a projection onto other GPU kinds (a model
from public figures, not a measurement), and what the training would not use: the output tokens past
--train-window and in replies that loop, and the GPU-hours stopping them would save. Either sends a random
sample, stratified across prompt sources (meta.source, else the file), to the fleet (--endpoints, or
--simulate N simulated servers) and measures its sustained throughput, or (--from-results) projects from
the results of a partial run without sending anything.
"""

EPILOG = """\
examples:
  python -m client.estimate --endpoints @runs/servers/endpoints.txt --prompts data.jsonl \\
      --sample 2% --gpus 8
  python -m client.estimate --endpoints @runs/servers/endpoints.txt --prompts sample.jsonl \\
      --set-size 914000 --project b200x8
  python -m client.estimate --simulate 4 --prompts prompts/sample.jsonl --set-size 914000 \\
      --gpu-kind rtx-pro-6000
  python -m client.estimate --from-results runs/full --prompts data.jsonl --gpus 8 --json
  python -m client.estimate --from-results runs/full --prompts data.jsonl --gpus 8 \\
      --train-window 4096

method: see docs/estimate.md. Throughput is measured only while the fleet was saturated, so the sample
must be several times the fleet's decode slots (the default sample is 5x the slots, at least 500). Long
reasoning has a heavy tail: when the sample leaves the output tokens' interval wider than +-5%, the report
names the sample that would narrow it to +-5% (--json: projection.precision).

exit codes:
  0    projection printed
  1    too few results to project (no result, or the fleet was never busy)
  2    bad options, unreachable endpoints, unknown model, unreadable prompts or results, --out in use
  4    no room: the calibration sample or results, or the report (stdout), could not be written
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


# Beyond these no plan is real, and past 2^63 the arithmetic fails (a traceback before): a typo, refused.
MAX_TOKENS_CAP = 10_000_000
MAX_ROUNDS = 1_000_000  # the bootstrap's rounds: 1000 is plenty; more only runs for hours


def _int_list(high: int, what: str) -> Callable[[str], tuple[int, ...]]:
    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
        if not values or min(values) < 1 or max(values) > high:
            raise argparse.ArgumentTypeError(f"expected {what} from 1 to {high:,}, got {text!r}")
        return values

    return parse


def _gpu_kind(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("names no GPU kind (e.g. rtx-pro-6000, b200, h200, h100); leave the "
                                         "option out when the servers name theirs")
    return text


def _out_dir(text: str) -> Path:
    return Path(non_empty_path(text))  # Path("") is the current directory: the sample would land there


def _fleet_options(parser: argparse.ArgumentParser) -> None:
    way = parser.add_argument_group("calibration on the fleet")
    way.add_argument("--endpoints", metavar="URL[,URL...]|@FILE", help="server base URLs, as for client.run")
    way.add_argument("--simulate", type=simulated_servers, metavar="N",
                     help="start N simulated SGLang servers on 127.0.0.1 and calibrate on them (no GPU needed), as "
                          f"client.run --simulate does (N from 1 to {MAX_SIMULATED}); the figures are then the "
                          "simulated GPU's, on its modelled clock (as on any --endpoints that answer GET /sim/clock)")
    way.add_argument("--sample", type=_sample_size, metavar="N|P%",
                     help="sample size: a count or a share of the set (default: 5x the fleet's decode slots, "
                          "at least 500)")
    way.add_argument("--out", type=_out_dir, metavar="DIR",
                     help="where the sample and its results go, kept; must be new or empty (default: runs/estimate-"
                          "<time>; with --simulate a temporary directory removed at exit)")
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
    way.add_argument("--max-attempts", type=positive_int, default=DEFAULT_MAX_ATTEMPTS, metavar="N",
                     help="attempts per prompt (default: 6)")
    way.add_argument("--progress-every", type=positive_float, default=10.0, metavar="SECONDS",
                     help="interval of the progress line on stderr (default: %(default)s)")
    sim = parser.add_argument_group("simulated fleet (--simulate)")
    sim.add_argument("--sim-speed", type=positive_float, default=20.0, metavar="X",
                     help="time scale of the simulated servers; the calibration is timed on their modelled clock "
                          "(GET /sim/clock, the modelled GPU's busy time at speed 1), so the figures are that GPU's "
                          "whatever the speed and the host's load (default: %(default)s)")
    sim.add_argument("--sim-max-running", type=positive_int, metavar="N",
                     help="decode slots per simulated server (default: with --gpu-kind, that GPU's running requests "
                          "in the launcher's memory plan; else 32)")
    sim.add_argument("--sim-arg", action="append", metavar="ARG",
                     help="extra flag for every simulated server, e.g. --sim-arg=--mean-tokens --sim-arg=800")


def _hardware_options(parser: argparse.ArgumentParser) -> None:
    hw = parser.add_argument_group("projection onto other GPUs (a model from public figures: docs/estimate.md)")
    hw.add_argument("--gpu-kind", type=_gpu_kind, metavar="KIND",
                    help="the GPU kind the throughput was measured on, when the servers do not name one the table "
                         "knows (/v1/loads accelerator), e.g. rtx-pro-6000, b200, h200, h100; with --simulate the "
                         "simulated servers play that GPU (its modelled figures: docs/estimate.md)")
    hw.add_argument("--project", metavar="KIND[xN],...",
                    help="GPU kinds and counts to project onto, e.g. b200x8,rtx-pro-6000x4 (default: every kind in "
                         "client/estimate/gpus.toml at the fleet's GPU count and at 8)")
    hw.add_argument("--precision", choices=["bf16", "fp8"],
                    help="the weights' precision, for the compute ratio and the memory check (default: fp8 when "
                         "the served model's name says FP8, else bf16)")
    hw.add_argument("--weights-gb", type=positive_float, metavar="GB",
                    help="the model's weights per replica, for a model the table does not list")


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser(prog="python -m client.estimate", description=DESCRIPTION, epilog=EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", action="append", required=True, type=Path, metavar="FILE|DIR",
                        help="the PromptRecord JSONL set to project (.jsonl, .jsonl.gz, .jsonl.zst, or a directory "
                             "of them); repeat for several")
    parser.add_argument("--set-size", type=positive_int, metavar="N",
                        help="project a set of N prompts shaped like --prompts (its strata in the same shares): "
                             "--prompts may then hold a sample of the set (default: the prompts it holds)")
    _fleet_options(parser)
    past = parser.add_argument_group("projection from a partial run")
    past.add_argument("--from-results", metavar="DIR|s3://...", help="read these results instead of sending a sample")
    past.add_argument("run", nargs="?", metavar="RUN",
                      help="the same as --from-results RUN: a run's --out directory or s3://BUCKET/PREFIX, named as "
                           "client.audit and client.status name it")
    add_s3_endpoint_url(past)
    plan = parser.add_argument_group("the planned run")
    defaults = SamplingSettings()
    plan.add_argument("--max-tokens", type=positive_int, default=defaults.max_tokens,
                      help="max_tokens of the run (and of the sample) (default: %(default)s)")
    plan.add_argument("--no-thinking", action="store_true", help="thinking off (it is on by default)")
    plan.add_argument("--sampling-plan", metavar="FILE|INLINE",
                      help="the run's sampling plan, as client.run --sampling-plan takes it (docs/sampling.md): the "
                           "sample is sent with each prompt's draw, and the projection adds one row per setting "
                           "(its prompts in the set, counted exactly from the draws, its tokens, time and GPU-hours "
                           "as if run alone) beside the whole set's (default: one setting, as client.run)")
    plan.add_argument("--run-seed", type=seed_number, metavar="N",
                      help="the run's --seed: a plan's draws depend on it (default: none, as a run without --seed)")
    plan.add_argument("--gpus", type=whole_in(1, MAX_GPUS, "a GPU count"), metavar="G",
                      help="GPUs behind the fleet, for GPU-hours (default: what the servers report, /v1/loads "
                           "num_accelerators; else one per endpoint)")
    plan.add_argument("--what-if-max-tokens", type=_int_list(MAX_TOKENS_CAP, "caps"), metavar="N,N,...",
                      help="caps for the what-if table (default: powers of two up to twice --max-tokens)")
    plan.add_argument("--what-if-gpus", type=_int_list(MAX_GPUS, "GPU counts"), metavar="G,G,...",
                      help="GPU counts for the what-if table (default: half, same, 2x, 4x)")
    plan.add_argument("--rounds", type=whole_in(1, MAX_ROUNDS, "a count of rounds"), default=1000,
                      help=f"bootstrap rounds, 1 to {MAX_ROUNDS:,} (default: %(default)s)")
    plan.add_argument("--train-window", type=positive_int, metavar="N",
                      help="the trainer's window in tokens, prompt included (4096 for the DFlash recipe: "
                           "SpecForge's max_length): report the output tokens past it and what client.run "
                           "--train-window N would save (default: not reported)")
    plan.add_argument("--extend-from", type=positive_int, metavar="N0",
                      help="with --train-window N: price client.run --extend of a run made under --train-window N0 "
                           "(narrower): the tokens and GPU-hours of continuing the replies N0 cut, against "
                           "generating them again (default: not reported)")
    _hardware_options(parser)
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
    return parser


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that do not go together: parser.error (exit 2) naming them."""
    if args.run:  # the run named as every offline tool names it
        if args.from_results and same_run_key(args.run) != same_run_key(args.from_results):
            parser.error(f"the run is named twice, differently ({args.run} and --from-results {args.from_results}); "
                         "name it once")
        args.from_results = args.run
    ways = [bool(args.endpoints), bool(args.simulate), bool(args.from_results)]
    if sum(ways) != 1:
        # --out here is where a calibration writes; a user who carries `--out DIR` over from client.run or
        # client.status means the run to read, and is told how this tool names it.
        hint = (f" (--out is where a calibration writes its sample; to project from the run in {args.out}, name it "
                f"as RUN or --from-results {args.out})" if args.out and not any(ways) else "")
        parser.error("give exactly one of --endpoints (calibrate on the fleet), --simulate N (calibrate on simulated "
                     f"servers) or a run's results (RUN, or --from-results RUN){hint}")
    if args.from_results and (args.sample or args.out):
        parser.error("--sample and --out are for a calibration on the fleet (--endpoints or --simulate); "
                     "--from-results sends nothing and writes nothing")
    if args.s3_endpoint_url and not (args.from_results or "").startswith("s3://"):
        parser.error("--s3-endpoint-url is for --from-results s3://BUCKET/PREFIX")
    if args.sim_arg and not args.simulate:
        parser.error("--sim-arg is passed to the simulated servers: it needs --simulate N")
    if args.extend_from is not None and (args.train_window is None or args.extend_from >= args.train_window):
        parser.error("--extend-from N0 prices extending a run made under a narrower window to --train-window N: "
                     "it needs --train-window N, larger than N0")
