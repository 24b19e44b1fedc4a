"""The command line of `python -m client.run`: options, their help, and the frozen RunConfig built and checked
from them."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from argchecks import (
    float_in,
    non_empty_path,
    non_negative_float,
    non_negative_int,
    port_number,
    positive_float,
    positive_int,
)
from argchecks.parser import ToolParser
from client.core.errors import PlanError
from client.core.options import (
    DEFAULT_CIRCUIT_FAILURES,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_RETRY_AFTER_S,
    DEFAULT_SEGMENT_AGE_S,
    DEFAULT_SLOTS,
    MAX_SIMULATED,
    seed_number,
    simulated_servers,
)
from client.core.payload import SamplingSettings
from client.core.plan_file import read_plan
from client.core.sampling_plan import CARD
from client.fleet.options import FleetConfig, add_network_options, network_from
from client.fleet.preflight import COMPAT_CHOICES
from client.fleet.startup import parse_endpoints
from client.fleet.token_ids import TOKEN_IDS_CHOICES
from client.local.out_dir import check_out_dir
from client.local.prompt_files import resolve_prompt_files
from client.run.config import RunConfig, S3Config, SimConfig, ViewConfig

T = TypeVar("T")

DESCRIPTION = """\
Regenerate every completion of a prompt set with one target model on a fleet of SGLang (or vLLM)
servers. Results are appended to JSONL segments under --out (and, with --s3, uploaded to S3 as they
close); running the same command again continues where the last run stopped and never sends a done
id twice, even from a fresh host with an empty --out when --s3 holds the results.
"""

EPILOG = """\
examples:
  python -m client.run --simulate 4 --prompts prompts/sample.jsonl --out runs/demo
  python -m client.run --endpoints @runs/servers/endpoints.txt --prompts data.jsonl --out runs/full
  python -m client.run --endpoints @runs/servers/endpoints.txt --prompts data.jsonl --out runs/full \\
      --s3 s3://my-bucket/regen/run1 --shard 0/2        # on a second host: --shard 1/2
  (runs/servers/endpoints.txt is what launch/start_servers.sh writes on the GPU node)

exit codes:
  0    every valid prompt is done
  1    the run ended, but some prompts failed after all attempts (run again to retry them); prompts
       longer than the context (too_long) are reported apart and alone do not make the exit code 1
  2    bad options, unreachable endpoints, unknown model, unwritable --out, or a live writer of this
       shard on the --s3 prefix; nothing was sent
  3    bad input: an invalid record under --strict, or no valid record at all
  4    results could not be written (disk full or read-only); free space and run again
  5    the run ended, but some segments are not in S3 yet (S3 unreachable); run again to upload them
       (a segment over one PUT on a store without multipart uploads is named above: see docs/s3.md)
  130  stopped by Ctrl-C or SIGTERM; run again to continue
"""



def _optional(check: Callable[[str], T]) -> Callable[[str], T | None]:
    """`none` leaves the field out of every request (for servers that refuse it)."""

    def parse(text: str) -> T | None:
        return None if text.strip().lower() == "none" else check(text)

    return parse


def _top_p(text: str) -> float:
    value = float_in(0, 1)(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be above 0 (0 would allow no token), got 0")
    return value


def _part_mb(text: str) -> float:
    value = positive_float(text)
    if value < 5:
        raise argparse.ArgumentTypeError(f"S3 refuses multipart parts under 5 MB, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = ToolParser(
        prog="python -m client.run", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    fleet = parser.add_argument_group("fleet")
    fleet.add_argument("--endpoints", metavar="URL[,URL...]|@FILE",
                       help="server base URLs, comma-separated, or @FILE with one URL per line "
                            "(as written by launch/start_servers.sh)")
    fleet.add_argument("--simulate", type=simulated_servers, metavar="N",
                       help="start N simulated SGLang servers on 127.0.0.1 and use them (no GPU needed; N from 1 to "
                            f"{MAX_SIMULATED})")
    fleet.add_argument("--model", help="model to request (default: the one the servers list at /v1/models)")
    fleet.add_argument("--api-key", default=os.environ.get("REGEN_API_KEY"),
                       help="bearer token for the servers (default: $REGEN_API_KEY; or put it in the URL, "
                            "http://user:TOKEN@host, which is sent as the bearer token and never shown)")
    add_network_options(fleet)
    fleet.add_argument("--max-in-flight", type=positive_int, default=DEFAULT_MAX_IN_FLIGHT, metavar="N",
                       help="hard cap of requests in flight per endpoint; within it, each endpoint is kept "
                            "filled to its decode slots plus a small queue (default: %(default)s)")
    fleet.add_argument("--slots", type=positive_int, default=DEFAULT_SLOTS, metavar="N",
                       help="decode slots assumed for an endpoint that does not report them (vLLM); learned "
                            "from its queue as the run goes (default: %(default)s)")
    fleet.add_argument("--wait-ready", type=non_negative_float, default=0.0, metavar="SECONDS",
                       help="at start, wait this long for endpoints nothing answers on yet (default: 0: fail)")
    fleet.add_argument("--gpus", type=positive_int, metavar="N",
                       help="GPUs behind the fleet, for GPU-hours (default: what the servers report, /v1/loads "
                            "num_accelerators, when every server does; else GPU-hours show '? (--gpus N)')")

    data = parser.add_argument_group("input and output")
    data.add_argument("--prompts", action="append", metavar="FILE|DIR",
                      help="PromptRecord JSONL file (.jsonl, .jsonl.gz or .jsonl.zst), or a directory of them "
                           "(read in sorted order); repeat for several")
    data.add_argument("--out", required=True, type=non_empty_path, metavar="DIR",
                      help="results directory (segments/, failures/)")
    data.add_argument("--extend", type=Path, metavar="FROM",
                      help="instead of prompts: a finished run's --out; the replies its limit cut (finish_reason "
                           "length, with exact token ids) are continued from their ids under a larger "
                           "--train-window or --max-tokens, and written with every other record of FROM into "
                           "--out, a new run; FROM is only read")
    data.add_argument("--allow-nonempty-out", action="store_true",
                      help="write the run into an --out that already holds other files and no run (default: "
                           "refuse it, exit 2: a run's segments/, failures/ and run.json belong in a directory of "
                           "their own)")
    data.add_argument("--allow-settings-change", action="store_true",
                      help="resume even though the settings that shape the data (model, sampling, thinking, "
                           "--turns, the field set) differ from those in OUT/run.json; the change is appended "
                           "to its history and the audit reports the run as mixed (default: refuse, exit 2)")
    data.add_argument("--strict", action="store_true",
                      help="stop at the first invalid record instead of reporting and skipping it")
    data.add_argument("--show-problems", type=non_negative_int, default=20, metavar="N",
                      help="print the first N invalid records as they are found (default: %(default)s)")
    data.add_argument("--shard", metavar="K/N|auto",
                      help="take only the ids in shard K of N (K from 0), for many hosts; 'auto' reads K and N "
                           "from the scheduler: a SLURM array (SLURM_ARRAY_TASK_ID/_COUNT), a SLURM task under "
                           "srun (SLURM_PROCID/SLURM_NTASKS) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX "
                           "with --shard-count)")
    data.add_argument("--shard-count", type=positive_int, metavar="N",
                      help="with --shard auto: the job's shard count N (default: $REGEN_SHARD_COUNT, else the "
                           "SLURM array's or step's size); needed on Kubernetes and when resubmitting some indices")
    data.add_argument("--segment-mb", type=positive_float, default=256.0, metavar="MB",
                      help="rotate a segment at this size (default: %(default)s)")
    data.add_argument("--segment-age", type=positive_float, default=DEFAULT_SEGMENT_AGE_S, metavar="SECONDS",
                      help="rotate a segment at this age (default: %(default)s)")

    sync = parser.add_argument_group("S3 sync (credentials and region from the standard AWS chain)")
    sync.add_argument("--s3", metavar="s3://BUCKET/PREFIX",
                      help="upload closed segments here as the run goes, and resume from what is there")
    sync.add_argument("--s3-endpoint-url", metavar="URL", help="an S3-compatible store instead of AWS S3")
    sync.add_argument("--sync-interval", type=positive_float, default=180.0, metavar="SECONDS",
                      help="with --s3, close and upload the open segment at least this often, so at most "
                           "this much work exists only on local disk (default: %(default)s)")
    sync.add_argument("--sync-wait", type=non_negative_float, default=300.0, metavar="SECONDS",
                      help="at the end of the run, wait this long at most for the uploads (default: %(default)s)")
    sync.add_argument("--delete-uploaded", action="store_true",
                      help="delete a local segment once its upload is verified and listed in the manifest")
    sync.add_argument("--s3-gzip", action="store_true", help="store segments gzip-compressed (.jsonl.gz)")
    sync.add_argument("--s3-part-mb", type=_part_mb, default=64.0, metavar="MB",
                      help="segments larger than this go up as multipart uploads of parts this size "
                           "(at least 5; default: %(default)s)")

    sampling = parser.add_argument_group("sampling (defaults: Qwen3's model card for the thinking mode)")
    defaults = SamplingSettings()
    sampling.add_argument("--max-tokens", type=positive_int, default=defaults.max_tokens, metavar="N",
                          help="cap on reasoning + answer tokens (default: %(default)s)")
    sampling.add_argument("--temperature", type=non_negative_float,
                          help=f"(default: {CARD[True]['temperature']}, or {CARD[False]['temperature']} with "
                               "--no-thinking: Qwen3's card)")
    sampling.add_argument("--top-p", type=_top_p, help=f"in (0, 1] (default: {CARD[True]['top_p']}, or "
                                                       f"{CARD[False]['top_p']} with --no-thinking)")
    sampling.add_argument("--top-k", type=_optional(positive_int), default=defaults.top_k, metavar="N|none",
                          help="an extension field (SGLang, vLLM); none: do not send it (default: %(default)s)")
    sampling.add_argument("--min-p", type=_optional(float_in(0, 1)), default=defaults.min_p, metavar="P|none",
                          help="an extension field (SGLang, vLLM); none: do not send it (default: %(default)s)")
    sampling.add_argument("--presence-penalty", type=float_in(-2, 2), default=defaults.presence_penalty,
                          help="in [-2, 2] (default: %(default)s)")
    sampling.add_argument("--seed", type=seed_number,
                          help="the run's sampling seed: each request sends its own seed, drawn from this one, the "
                               "sampling plan and the prompt's id (the same on a resume, another host or shard); "
                               "without it no seed is sent")
    sampling.add_argument("--sampling-plan", metavar="FILE|INLINE",
                          help="per prompt, a draw over named settings (temperature, top_p, top_k, min_p, "
                               "presence_penalty, max_tokens, enable_thinking, preserve_thinking, other "
                               "chat_template_kwargs and extra fields) with weights and rules by a prompt's meta "
                               "(e.g. meta.source): a TOML file, or inline 'NAME = {temperature = 0.6, weight = "
                               "3}; ...'. Values a setting does not give come from the options above. Each "
                               "prompt's draw depends only on the plan, --seed and its id; records name the "
                               "setting and rule (docs/sampling.md). Default: one setting, Qwen3's card "
                               "(qwen3-card: thinking, or no-thinking with --no-thinking)")
    sampling.add_argument("--no-thinking", action="store_true",
                          help="send chat_template_kwargs.enable_thinking=false (thinking is on by default)")
    sampling.add_argument("--compat", choices=COMPAT_CHOICES, default="auto",
                          help="which extension fields (top_k, min_p, chat_template_kwargs, return_token_ids) "
                               "go out. auto: those every server's detected kind takes (SGLang, vLLM: all they "
                               "accept; any other server: none). openai: standard fields only. sglang / vllm: "
                               "that engine's set, whatever the servers say. A one-token preflight request per "
                               "server proves the choice before any prompt is sent (default: %(default)s)")

    sampling.add_argument("--token-ids", choices=TOKEN_IDS_CHOICES, default="auto",
                          help="record the exact token ids the servers generated (prompt_token_ids, "
                               "completion_token_ids), streaming as always: vLLM with return_token_ids, SGLang "
                               "with its sglext fields (each SGLang record also gets the request's MTP figures, "
                               "spec, and cached tokens). auto: wherever a server gives them. on: every server "
                               "must give them, else the preflight stops the run (exit 2). off: never ask "
                               "(default: %(default)s)")

    turns = parser.add_argument_group("conversations")
    turns.add_argument("--turns", choices=("last", "all"), default="last",
                       help="last: generate the next assistant turn after the given history (a trailing "
                            "assistant turn is dropped and regenerated). all: regenerate every assistant turn "
                            "in order, each on the model's own earlier turns; one record per turn, with id "
                            "CONVERSATION#TURN, and a trailing ! on the turn that ends the conversation "
                            "(default: %(default)s)")
    turns.add_argument("--preserve-thinking", action="store_true",
                       help="with --turns all, keep earlier turns' reasoning in the history "
                            "(chat_template_kwargs.preserve_thinking); Qwen3.6 drops it by default")

    retries = parser.add_argument_group("retries and shutdown")
    retries.add_argument("--max-attempts", type=positive_int, default=DEFAULT_MAX_ATTEMPTS, metavar="N",
                         help="attempts per prompt before it goes to the failures file (default: %(default)s)")
    retries.add_argument("--retry-too-long", action="store_true",
                         help="retry prompts an earlier run found longer than the server's context (too_long); "
                              "they are otherwise left alone, since the same server cannot take them")
    retries.add_argument("--redo-edited", action="store_true",
                         help="generate again the done prompts whose line was edited since their result was "
                              "written (their old results are taken out of the local segments); without it "
                              "they are named and kept")
    retries.add_argument("--redo-repetition", action="store_true",
                         help="generate again the done prompts whose result a loop stop ended (finish_reason "
                              "repetition), e.g. by an older, eager rule: their old results are taken out of the "
                              "local segments; such a result is never exported")
    retries.add_argument("--max-requests-per-second", type=positive_float, metavar="RATE",
                         help="start at most RATE requests a second, retries included, for a hosted endpoint "
                              "with an agreed rate (default: no limit)")
    sampling.add_argument("--train-window", type=positive_int, metavar="N",
                          help="the trainer's window in tokens, prompt included (SpecForge's max_length; 4096 in "
                               "the DFlash recipe for Qwen3.6-27B): each request's max_tokens becomes N minus "
                               "that prompt's exact token count (counted by the server, SGLang /v1/tokenize or "
                               "vLLM /tokenize, with its tools and thinking), never above --max-tokens; a prompt "
                               "that alone fills N is not sent (fills_window). Default: no window")
    sampling.add_argument("--tokenizer", type=Path, metavar="DIR",
                          help="with --train-window: the model's tokenizer.json and chat template (a model "
                               "directory), to count prompts on this host for servers that cannot count them "
                               "(neither SGLang nor vLLM); needs the [export] extra")
    retries.add_argument("--continue-replies", action="store_true",
                         help="make each reply on SGLang's /generate from its exact ids, so that a stream that "
                              "breaks (a server restart, a dropped connection) is continued from the ids it "
                              "delivered instead of generated again; needs --token-ids on and SGLang with "
                              "--incremental-streaming-output; without the stream's loop stop")
    retries.add_argument("--loop-stop", choices=("on", "off"), default="on",
                         help="on: once a reply has used 90%% of its max_tokens, end it if its tail is one "
                              "block repeated exactly (a thinking model's loop; over 8,000 characters of prose, "
                              "32,000 of code or data); repeats whose counters move are never cut. The record "
                              "keeps the reply so far with finish_reason repetition and is not retried "
                              "(default: %(default)s)")
    retries.add_argument("--max-retry-after", type=positive_float, default=DEFAULT_MAX_RETRY_AFTER_S,
                         metavar="SECONDS",
                         help="honour a 429's Retry-After up to this long; a longer one is cut to it, so a bogus "
                              "value cannot park a prompt for hours (default: %(default)s)")
    retries.add_argument("--idle-timeout", type=positive_float, default=DEFAULT_IDLE_TIMEOUT_S, metavar="SECONDS",
                         help="a stream that sends no new token for this long is retried elsewhere; SSE comments "
                              "and keep-alive events do not count (default: %(default)s)")
    retries.add_argument("--circuit-failures", type=positive_int, default=DEFAULT_CIRCUIT_FAILURES, metavar="N",
                         help="take an endpoint out of rotation after N failures in a row (default: %(default)s)")
    retries.add_argument("--grace", type=non_negative_float, default=30.0, metavar="SECONDS",
                         help="on Ctrl-C/SIGTERM, time given to requests in flight (default: %(default)s)")

    view = parser.add_argument_group("progress")
    view.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    view.add_argument("--progress-every", type=positive_float, default=10.0, metavar="SECONDS",
                      help="interval of the plain progress line (default: %(default)s)")
    view.add_argument("--estimate", type=Path, metavar="FILE",
                      help="the JSON of `client.estimate --json` for these prompts: its mean output tokens per "
                           "prompt stand for the prompts not yet sent, before many long replies have finished")
    view.add_argument("--metrics-port", type=port_number, metavar="PORT",
                      help="serve the run's counters to Prometheus at http://HOST:PORT/metrics (off by default; "
                           "0 picks a free port; see docs/monitoring.md)")
    view.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                      help="address the metrics endpoint listens on (default: %(default)s; 0.0.0.0 for all)")
    view.add_argument("--metrics-linger", type=non_negative_float, default=0.0, metavar="SECONDS",
                      help="after the run, keep /metrics up until one scrape has read the final figures, at most "
                           "this long (default: %(default)s)")

    sim = parser.add_argument_group("simulated fleet (--simulate)")
    sim.add_argument("--sim-speed", type=positive_float, default=20.0, metavar="X",
                     help="time scale of the simulated servers (default: %(default)s)")
    sim.add_argument("--sim-max-running", type=positive_int, metavar="N",
                     help="decode slots per simulated server (default: with --gpu-kind, that GPU's running requests "
                          "in the launcher's memory plan; else 32)")
    sim.add_argument("--gpu-kind", metavar="KIND",
                     help="the GPU the simulated servers play: its slots, decode rate by batch, prefill rate and MTP "
                          "accepted length as client/estimate/gpus.toml models them (e.g. rtx-pro-6000, b200; "
                          "default: a generic GPU)")
    sim.add_argument("--sim-arg", action="append", metavar="ARG",
                     help="extra flag for every simulated server, e.g. --sim-arg=--fail-500 --sim-arg=0.02")
    return parser


def settings_from(args: argparse.Namespace) -> SamplingSettings:
    """The command line's sampling values: Qwen3's card for the thinking mode where an option is not given."""
    card = CARD[not args.no_thinking]
    return SamplingSettings(
        max_tokens=args.max_tokens,
        temperature=card["temperature"] if args.temperature is None else args.temperature,
        top_p=card["top_p"] if args.top_p is None else args.top_p, top_k=args.top_k,
        min_p=args.min_p, presence_penalty=args.presence_penalty, seed=args.seed,
        enable_thinking=not args.no_thinking, preserve_thinking=args.preserve_thinking,
    )


# Options that do not go together: (the test, the one line argparse exits 2 with), checked in this order.
_MISUSE: tuple[tuple[Callable[[argparse.Namespace], bool], str], ...] = (
    (lambda a: not a.prompts and a.extend is None, "the following arguments are required: --prompts"),
    (lambda a: a.continue_replies and a.turns == "all",
     "--continue-replies continues one-turn replies; a conversation (--turns all) is regenerated turn by turn"),
    (lambda a: bool(a.prompts) and a.extend is not None,
     "--extend continues the records of a finished run: it takes no --prompts"),
    (lambda a: a.extend is not None and bool(a.s3 or a.sampling_plan or a.shard or a.turns == "all"),
     "--extend runs on one host without --s3, --sampling-plan, --shard or --turns all (the records keep their "
     "own sampling)"),
    (lambda a: bool(a.endpoints) == bool(a.simulate), "give exactly one of --endpoints or --simulate N"),
    (lambda a: not a.s3 and bool(a.delete_uploaded or a.s3_gzip or a.s3_endpoint_url),
     "--delete-uploaded, --s3-gzip and --s3-endpoint-url need --s3 s3://BUCKET/PREFIX"),
    (lambda a: a.preserve_thinking and a.turns != "all",
     "--preserve-thinking keeps the reasoning of earlier turns in the history: it needs --turns all"),
    (lambda a: bool(a.sim_arg) and not a.simulate,
     "--sim-arg is passed to the simulated servers: it needs --simulate N"),
    (lambda a: a.gpu_kind is not None and not a.simulate,
     "--gpu-kind is the GPU the simulated servers play: it needs --simulate N (real servers name their own)"),
    (lambda a: a.tokenizer is not None and a.train_window is None,
     "--tokenizer counts prompts for --train-window: it needs --train-window N"),
    (lambda a: bool(a.redo_edited and a.s3),
     "--redo-edited rewrites local segments, and with --s3 they are uploaded (never rewritten)"),
    (lambda a: bool(a.redo_repetition and a.s3),
     "--redo-repetition rewrites local segments, and with --s3 they are uploaded (never rewritten)"),
)


DEFAULT_SIM_SLOTS = 32  # a simulated server's slots without --gpu-kind (the generic GPU)


def _check_gpu_kind(parser: argparse.ArgumentParser, kind: str) -> None:
    """A kind the simulator cannot play (not in the table, or not placed by the plan) exits 2 before any server
    starts."""
    from simulator.api import KindError, figures

    try:
        figures(kind)
    except KindError as exc:
        parser.error(f"--gpu-kind: {exc}")


def config_from(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunConfig:
    """Check the options against each other (misuse exits 2 with one line) and freeze them. ConfigError (exit 2)
    when --endpoints @FILE cannot be read, --out holds other files and no run, or a prompt file cannot be
    used: all of it before any server starts."""
    for misused, message in _MISUSE:
        if misused(args):
            parser.error(message)
    check_out_dir(Path(args.out), allow_nonempty=args.allow_nonempty_out)
    # Missing, a JSON array, another shape: before any server.
    resolve_prompt_files([Path(p) for p in args.prompts or ()])
    fleet = FleetConfig(
        urls=tuple(parse_endpoints(args.endpoints)) if args.endpoints else (), model=args.model,
        api_key=args.api_key, network=network_from(args), max_in_flight=args.max_in_flight, slots=args.slots,
        wait_ready=args.wait_ready, idle_timeout=args.idle_timeout, circuit_failures=args.circuit_failures,
        compat=args.compat, token_ids=args.token_ids, continue_replies=args.continue_replies)
    s3 = S3Config(s3=args.s3, s3_endpoint_url=args.s3_endpoint_url, sync_interval=args.sync_interval,
                  sync_wait=args.sync_wait, delete_uploaded=args.delete_uploaded, s3_gzip=args.s3_gzip,
                  s3_part_mb=args.s3_part_mb) if args.s3 else None
    if args.gpu_kind is not None:
        _check_gpu_kind(parser, args.gpu_kind)
    default_slots = None if args.gpu_kind is not None else DEFAULT_SIM_SLOTS  # None: the kind's plan
    simulate = SimConfig(servers=args.simulate, max_running=args.sim_max_running or default_slots,
                         speed=args.sim_speed, extra_args=tuple(args.sim_arg or ()), seed=args.seed or 0,
                         gpu_kind=args.gpu_kind) if args.simulate else None
    view = ViewConfig(plain=args.plain, progress_every=args.progress_every, estimate=args.estimate, gpus=args.gpus,
                      metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                      metrics_linger=args.metrics_linger)
    sampling = settings_from(args)
    try:
        plan = read_plan(args.sampling_plan, sampling) if args.sampling_plan is not None else None
    except PlanError as exc:
        parser.error(f"--sampling-plan: {exc}")
    return RunConfig(
        fleet=fleet, sampling=sampling, plan=plan, prompts=tuple(Path(p) for p in args.prompts or ()),
        out=Path(args.out),
        view=view, s3=s3, simulate=simulate, turns=args.turns, strict=args.strict, show_problems=args.show_problems,
        allow_settings_change=args.allow_settings_change, retry_too_long=args.retry_too_long,
        redo_edited=args.redo_edited, redo_repetition=args.redo_repetition, shard=args.shard,
        shard_count=args.shard_count, segment_mb=args.segment_mb, segment_age=args.segment_age,
        max_attempts=args.max_attempts, max_requests_per_second=args.max_requests_per_second,
        max_retry_after=args.max_retry_after, grace=args.grace, loop_stop=args.loop_stop == "on",
        train_window=args.train_window, tokenizer=args.tokenizer, extend=args.extend)
