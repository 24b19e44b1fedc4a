"""Command line of the planner: `python -m launch.plan --preset NAME [options]`.

Owns argument parsing and turning arguments into a PlanRequest; the planning itself is `layout.make_plan`.
SGLang's own spellings of the options it shares with SGLang work too (`--model`, `--tp-size`, `--port`).
start_servers.sh reads its settings with `launch.plan.settings` and plans through `request_from_args` here.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from argchecks.parser import ToolParser
from launch.plan.compose import render_compose
from launch.plan.errors import PlanError
from launch.plan.layout import (
    DEFAULT_KV_TOKENS,
    SPECULATIVE_ALGORITHMS,
    MtpSettings,
    PlanRequest,
    make_plan,
    parse_gpu_list,
)
from launch.plan.model import KV_BYTES, default_model
from launch.plan.presets import Preset, load_preset, preset_names
from launch.plan.render import render_bash, render_commands, render_endpoints, render_explain, render_json, render_text
from launch.plan.sglang_flags import check_server_args, sglang_aliases

_DESCRIPTION = """\
Plan a fleet of SGLang servers for one GPU node: choose TP and DP (one replica per GPU wherever the
weights fit with room for KV cache), give each instance its GPUs (CUDA_VISIBLE_DEVICES) and port, and
write each `python -m sglang.launch_server` command line with the flags Qwen3.6 needs (reasoning and
tool-call parsers, MTP, metrics, memory fraction). Prints the plan; starts nothing."""

_EPILOG = """\
examples:
  python -m launch.plan --preset blackwell-4x --explain
  python -m launch.plan --preset b200-8x --gpus 0-6 --format commands
  python -m launch.plan --num-gpus 2 --gpu-memory-gib 48 --dtype fp8
  python -m launch.plan --compose > docker-compose.yml     (every preset, as compose profiles)

presets: {presets}
(one file each in launch/presets/NAME.toml; add a file to add a node type)"""


class _Group:
    """An argument group that also accepts SGLang's spellings of an option (see sglang_flags)."""

    def __init__(self, group: argparse._ArgumentGroup) -> None:
        self._group = group

    def add_argument(self, option: str, **kwargs: Any) -> None:
        self._group.add_argument(option, *sglang_aliases(option), **kwargs)


def build_parser() -> argparse.ArgumentParser:
    p = ToolParser(prog="python -m launch.plan", description=_DESCRIPTION,
                   epilog=_EPILOG.format(presets=", ".join(preset_names())),
                   formatter_class=argparse.RawDescriptionHelpFormatter)
    g = _Group(p.add_argument_group("hardware"))
    g.add_argument("--preset", help="node type, a file in launch/presets/ (see below)")
    g.add_argument("--num-gpus", type=int, help="GPUs on the node (default: the preset's)")
    g.add_argument("--gpu-memory-gib", type=float, help="memory per GPU in GiB (default: the preset's)")
    g.add_argument("--gpus", help="GPUs to use, e.g. 0,1,2,3 or 0-6 (default: all of the node's)")
    g.add_argument("--detected-gpus", type=int, metavar="N",
                   help="GPU count nvidia-smi reports (start_servers.sh passes it); caps the preset's")
    g.add_argument("--detected-gpu-memory-mib", type=int, metavar="MIB",
                   help="memory.total nvidia-smi reports for the smallest GPU; caps the preset's")

    g = _Group(p.add_argument_group("model"))
    g.add_argument("--model-path", help="HF repo id or local path (default: Qwen/Qwen3.6-27B, -FP8 for fp8)")
    g.add_argument("--served-model-name", help="name clients send as `model` (default: Qwen/Qwen3.6-27B)")
    g.add_argument("--dtype", choices=["bf16", "fp8"], default="bf16", help="weight type (default: bf16)")
    g.add_argument("--params-b", type=float, help="parameters in billions (default: 27.8, as shipped)")

    g = _Group(p.add_argument_group("layout and memory"))
    g.add_argument("--tp", type=int, help="tensor-parallel GPUs per replica (default: smallest that fits)")
    g.add_argument("--dp", type=int, default=1,
                   help="replicas inside one server (SGLang --dp-size); 1 = one server per replica (default)")
    g.add_argument("--mem-fraction", type=float, help="SGLang --mem-fraction-static (default: the preset's)")
    g.add_argument("--kv-tokens", type=int, default=DEFAULT_KV_TOKENS,
                   help="KV-cache tokens a replica must hold to count as fitting (default: %(default)s)")
    g.add_argument("--context-length", type=int, help="SGLang --context-length (default: the model's, 262144)")
    g.add_argument("--kv-cache-dtype", choices=sorted(KV_BYTES), default="auto",
                   help="SGLang --kv-cache-dtype (default: auto = the model's dtype)")

    g = _Group(p.add_argument_group("MTP (multi-token prediction, speculative decoding with the model's own head)"))
    g.add_argument("--mtp", action=argparse.BooleanOptionalAction, default=True, help="(default: on)")
    g.add_argument("--mtp-algorithm", type=str.upper, choices=SPECULATIVE_ALGORITHMS,
                   help="(default: the preset's, EAGLE)")
    g.add_argument("--mtp-steps", type=int, default=3, help="--speculative-num-steps (default: 3)")
    g.add_argument("--mtp-topk", type=int, default=1, help="--speculative-eagle-topk (default: 1)")
    g.add_argument("--mtp-draft-tokens", type=int,
                   help="--speculative-num-draft-tokens (default: steps + 1)")

    g = _Group(p.add_argument_group("servers"))
    g.add_argument("--host", help="bind address (default: 0.0.0.0; 127.0.0.1 for the sim preset)")
    g.add_argument("--advertise-host", help="host written to the endpoints (default: this machine's name "
                                            "when binding 0.0.0.0)")
    g.add_argument("--base-port", type=int, default=30000, help="port of the first server (default: 30000)")
    g.add_argument("--api-key", help="SGLang --api-key (shown masked)")
    g.add_argument("--extra-args", default="", metavar="STRING",
                   help="more server arguments as one shell-quoted string, e.g. '--max-running-requests 128'")
    g.add_argument("--extra-arg", action="append", default=[], metavar="ARG",
                   help="one more server argument, kept verbatim (repeatable)")
    g.add_argument("--python", default="python3", help="interpreter in the commands (default: python3)")

    g = _Group(p.add_argument_group("output"))
    g.add_argument("--format", choices=["text", "json", "bash", "commands", "endpoints"], default="text",
                   help="text: summary (default); commands: one shell line per server; endpoints: the "
                        "endpoints file; bash: variables for start_servers.sh; json")
    g.add_argument("--explain", action="store_true", help="print the per-GPU memory arithmetic (to stderr "
                                                          "with --format bash)")
    g.add_argument("--compose", action="store_true",
                   help="print docker-compose.yml instead: --preset's services, or every preset's as profiles")
    g.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    return p


def preset_from_args(args: argparse.Namespace) -> Preset:
    if args.preset:
        return load_preset(args.preset)
    if args.num_gpus is None or args.gpu_memory_gib is None:
        raise PlanError(f"give --preset NAME (one of {', '.join(preset_names())}) or describe the node with "
                        f"--num-gpus N and --gpu-memory-gib G")
    return Preset(name="custom", description=f"{args.num_gpus} GPUs, {args.gpu_memory_gib:g} GiB each",
                  gpu="GPU", gpu_count=args.num_gpus, gpu_memory_gib=args.gpu_memory_gib)


def request_from_args(args: argparse.Namespace, preset: Preset) -> PlanRequest:
    model = default_model(args.dtype)
    if args.model_path:
        model = replace(model, path=args.model_path)
    if args.served_model_name:
        model = replace(model, served_name=args.served_model_name)
    if args.params_b is not None:
        if args.params_b <= 0:
            raise PlanError(f"--params-b must be positive, got {args.params_b:g}")
        model = replace(model, params_b=args.params_b)
    try:
        extra = tuple(shlex.split(args.extra_args)) + tuple(args.extra_arg)
    except ValueError as exc:
        raise PlanError(f"cannot split --extra-args {args.extra_args!r}: {exc}") from exc
    check_server_args(extra)
    mtp = MtpSettings(enabled=args.mtp, algorithm=args.mtp_algorithm or preset.speculative_algorithm,
                      steps=args.mtp_steps, topk=args.mtp_topk, draft_tokens=args.mtp_draft_tokens)
    return PlanRequest(
        preset=preset, model=model, num_gpus=args.num_gpus, gpu_memory_gib=args.gpu_memory_gib,
        gpus=parse_gpu_list(args.gpus) if args.gpus else None, tp=args.tp, dp=args.dp, mtp=mtp,
        mem_fraction=args.mem_fraction, kv_tokens=args.kv_tokens, kv_cache_dtype=args.kv_cache_dtype,
        context_length=args.context_length, host=args.host, advertise_host=args.advertise_host,
        base_port=args.base_port, api_key=args.api_key, extra_args=extra, python=args.python,
        detected_gpus=args.detected_gpus,
        detected_gpu_memory_gib=None if args.detected_gpu_memory_mib is None else args.detected_gpu_memory_mib / 1024)


def run(argv: Sequence[str] | None = None) -> str:
    """The text the CLI prints on stdout; raises PlanError on bad input."""
    args = build_parser().parse_args(argv)
    if args.list_presets:
        return "".join(f"{name:14} {load_preset(name).description}\n" for name in preset_names())
    if args.compose:
        names = [args.preset] if args.preset else preset_names()
        presets = [load_preset(n) for n in names]
        if args.preset and not presets[0].simulated:
            presets.append(load_preset("sim"))
        return render_compose([request_from_args(args, p) for p in presets])
    plan = make_plan(request_from_args(args, preset_from_args(args)))
    if args.format == "bash":
        if args.explain:
            sys.stderr.write(render_explain(plan))
        return render_bash(plan)
    body = {"text": render_text, "json": render_json, "commands": render_commands,
            "endpoints": render_endpoints}[args.format](plan)
    if args.explain:
        if args.format != "text":  # keep machine-readable output clean
            sys.stderr.write(render_explain(plan))
            return body
        return render_explain(plan) + "\n" + body
    return body


def main(argv: Sequence[str] | None = None) -> int:
    try:
        sys.stdout.write(run(argv))
    except PlanError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0
