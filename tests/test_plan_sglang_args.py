"""Every command line the launcher produces is accepted by the real parsers: SGLang 0.5.23's own
(`ServerArgs.add_cli_args`, installed CPU-only by tests/setup/sglang.sh) for the GPU presets and the
compose file, and simulator's for the sim preset. A misspelt or removed flag fails here, and so does a
launcher option whose SGLang spellings (`--model`, `--tp-size`, ...) no longer match SGLang's."""

from __future__ import annotations

import argparse
import importlib.metadata
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch.plan import make_plan, preset_names
from launch.plan.cli import build_parser, preset_from_args, request_from_args
from launch.plan.layout import Plan
from launch.plan.settings import read_settings
from launch.plan.sglang_flags import OWNED_FLAGS
from launch.plan.start import plan_from
from simulator.__main__ import build_parser as sim_parser
from tests.conftest import engine_missing

REPO = Path(__file__).resolve().parent.parent
SGLANG_VERSION = "0.5.23"
GPU_PRESETS = [p for p in preset_names() if p != "sim"]

# Variations the launcher can produce, crossed with every GPU preset.
VARIANTS = {
    "defaults": [],
    "no MTP": ["--no-mtp"],
    "NEXTN topk 2": ["--mtp-algorithm", "NEXTN", "--mtp-steps", "2", "--mtp-topk", "2", "--mtp-draft-tokens", "4"],
    "fp8": ["--dtype", "fp8"],
    "TP=2": ["--tp", "2"],
    "DP=2 per server": ["--dp", "2"],
    "every server option": ["--api-key", "k", "--context-length", "65536", "--mem-fraction", "0.8",
                            "--kv-cache-dtype", "fp8_e4m3", "--model-path", "/models/q", "--served-model-name", "q",
                            "--base-port", "31000", "--host", "10.1.2.3"],
    "extra args": ["--extra-args", "--max-running-requests 128 --chunked-prefill-size 8192"],
}


@pytest.fixture(scope="module")
def sglang_parser() -> Any:
    """SGLang's real argument parser and its speculative-algorithm registry. Not installed: fails in CI,
    skips elsewhere (tests using it are marked `sglang`, which `make test-fast` deselects)."""
    try:
        version = importlib.metadata.version("sglang")
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    except (ImportError, importlib.metadata.PackageNotFoundError) as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:  # outside the except: no chained traceback
        engine_missing(f"SGLang's argument parser is not importable ({missing}); install it CPU-only with "
                       f"`bash tests/setup/sglang.sh .venv/bin/python` (or `make engines`)")
    assert version == SGLANG_VERSION, f"sglang {version} installed, the launcher targets {SGLANG_VERSION}: " \
                                      f"rerun bash tests/setup/sglang.sh .venv/bin/python"
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    return parser, SpeculativeAlgorithm


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except SystemExit:
        pytest.fail(f"{parser.prog} rejected: {shlex.join(argv)} (its error is in the captured stderr)")


def plan_of(*argv: str) -> Plan:
    args = build_parser().parse_args(list(argv))
    return make_plan(request_from_args(args, preset_from_args(args)))


@pytest.mark.sglang
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_sglang_accepts_every_generated_command(sglang_parser: Any, preset: str, variant: str) -> None:
    parser, algorithms = sglang_parser
    plan = plan_of("--preset", preset, *VARIANTS[variant])
    assert plan.instances
    for inst in plan.instances:
        assert inst.argv[1:3] == ("-m", "sglang.launch_server")
        ns = parse(parser, list(inst.argv[3:]))
        assert ns.port == inst.port
        assert ns.tp_size == plan.tp and ns.dp_size == plan.dp
        assert ns.reasoning_parser == "qwen3" and ns.tool_call_parser == "qwen3_coder"
        assert ns.enable_metrics is True
        assert ns.mem_fraction_static == plan.mem_fraction
        if plan.request.mtp.enabled:
            # SGLang's parser takes any string here; its registry is what rejects an unknown name.
            algorithms.from_string(ns.speculative_algorithm)
            assert ns.mamba_radix_cache_strategy == "extra_buffer"
        else:
            assert ns.speculative_algorithm is None


@pytest.mark.sglang
def test_a_misspelt_flag_would_fail(sglang_parser: Any) -> None:
    parser, algorithms = sglang_parser
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-path", "m", "--speculative-algoritm", "EAGLE"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--model-path", "m", "--attention-backend", "trtllm-mha"])
    with pytest.raises(ValueError, match="Unknown speculative algorithm"):
        algorithms.from_string("EAGEL")


@pytest.mark.sglang
def test_sglang_accepts_every_compose_command(sglang_parser: Any) -> None:
    parser, _ = sglang_parser
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    checked = 0
    for svc in services.values():
        if svc.get("entrypoint") == ["python3", "-m", "sglang.launch_server"]:
            parse(parser, [arg.replace("$$", "$") for arg in svc["command"]])
            checked += 1
    assert checked == sum(len(plan_of("--preset", p).instances) for p in GPU_PRESETS)


@pytest.mark.parametrize("variant", [[], ["--no-mtp"], ["--dp", "2"], ["--extra-args", "--fail-500 0.01"]])
def test_the_simulator_accepts_the_sim_commands(variant: list[str]) -> None:
    parser = sim_parser()
    for inst in plan_of("--preset", "sim", *variant).instances:
        assert inst.argv[1:3] == ("-m", "simulator")
        ns = parse(parser, list(inst.argv[3:]))
        assert ns.port == inst.port and ns.host == "127.0.0.1"


@pytest.mark.sglang
def test_the_launchers_sglang_spellings_are_sglangs(sglang_parser: Any) -> None:
    """Each launcher option that stands for an SGLang flag takes exactly SGLang's spellings of that flag."""
    parser, _ = sglang_parser
    by_flag = {flag: action for action in parser._actions for flag in action.option_strings}
    for owned in OWNED_FLAGS:
        assert owned.sglang[0] in by_flag, f"SGLang has no {owned.sglang[0]} (for the launcher's {owned.option})"
        assert set(by_flag[owned.sglang[0]].option_strings) == set(owned.sglang), owned.option


@pytest.mark.sglang
@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_sglang_accepts_the_commands_of_start_servers_with_sglang_spellings(sglang_parser: Any, preset: str) -> None:
    parser, _ = sglang_parser
    settings = read_settings(["--preset", preset, "--model", "/models/q", "--tp-size", "2", "--port", "31000",
                              "--mem-fraction-static", "0.8", "--speculative-algorithm", "nextn",
                              "--speculative-num-steps", "2", "--", "--max-running-requests", "64"])
    plan = plan_from(settings)
    for inst in plan.instances:
        ns = parse(parser, list(inst.argv[3:]))
        assert (ns.model_path, ns.tp_size, ns.port) == ("/models/q", 2, inst.port)
        assert (ns.mem_fraction_static, ns.speculative_num_steps, ns.max_running_requests) == (0.8, 2, 64)
