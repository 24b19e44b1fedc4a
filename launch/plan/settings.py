"""The settings of launch/start_servers.sh: its options, their env-file keys, and reading both.

Owns the one table of settings (option, SGLang's spellings of it, env-file key, value check, help), the
precedence (options over the env file, whose format is `envfile`'s), the --help text, and every error about
a single value, which names where the value came from: the option, or FILE:LINE and the key. An empty
value means "not set". Checks across values (GPUs against TP, draft tokens against steps) stay with the
planner, `layout.make_plan`.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import shlex
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from launch.plan.envfile import read_env_file
from launch.plan.errors import PlanError
from launch.plan.layout import MEM_FRACTION_RANGE, SPECULATIVE_ALGORITHMS, parse_gpu_list
from launch.plan.model import KV_BYTES
from launch.plan.presets import load_preset, preset_names
from launch.plan.sglang_flags import check_server_args, sglang_aliases

Value = str | int | float | bool
Check = Callable[[str], Value]


# --- value checks: each returns the typed value or raises ValueError("must be ..., got ...") -------------

def _whole(low: int, high: int | None = None) -> Check:
    def check(text: str) -> Value:
        try:
            number = int(text, 10)
        except ValueError:
            raise ValueError(f"must be a whole number, got {text!r}") from None
        if number < low or (high is not None and number > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise ValueError(f"must be {bound}, got {number}")
        return number
    return check


def _real(low: float, high: float | None = None, *, open_low: bool = False) -> Check:
    def check(text: str) -> Value:
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"must be a number, got {text!r}") from None
        if not math.isfinite(number):
            raise ValueError(f"must be a finite number, got {text!r}")
        if (number <= low if open_low else number < low) or (high is not None and number > high):
            bound = (f"in [{low:g}, {high:g}]" if high is not None else
                     f"greater than {low:g}" if open_low else f"at least {low:g}")
            raise ValueError(f"must be {bound}, got {text}")
        return number
    return check


def _choice(*choices: str, upper: bool = False) -> Check:
    def check(text: str) -> Value:
        value = text.upper() if upper else text
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, got {text!r}")
        return value
    return check


_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")


def _switch(text: str) -> Value:
    if text.lower() in _ON:
        return True
    if text.lower() in _OFF:
        return False
    raise ValueError(f"must be on or off (or true/false, yes/no, 1/0), got {text!r}")


def _text(text: str) -> Value:
    return text


def _preset(text: str) -> Value:
    try:
        load_preset(text)
    except PlanError as exc:
        raise ValueError(str(exc)) from None
    return text


def _gpus(text: str) -> Value:
    try:
        parse_gpu_list(text)
    except PlanError as exc:
        raise ValueError(str(exc)) from None
    return text


def _server_args(text: str) -> Value:
    try:
        check_server_args(shlex.split(text))
    except ValueError as exc:  # shlex's "No closing quotation", or a flag the launcher sets itself
        raise ValueError(f"cannot use {text!r}: {exc}") from None
    return text


# --- the table ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Setting:
    """One setting: env-file key, option, value name (None: a switch), check, help, and the planner's `dest`."""

    key: str
    option: str
    metavar: str | None
    check: Check
    help: str
    dest: str | None = None  # the attribute of launch.plan.cli's namespace it sets; None: the launcher's own

    @property
    def aliases(self) -> tuple[str, ...]:
        return sglang_aliases(self.option)


def _s(key: str, metavar: str | None, check: Check, text: str, *, plan: bool = True) -> Setting:
    """The option is the key spelt as one (GPU_MEMORY_GIB: --gpu-memory-gib), and so is the planner's dest."""
    return Setting(key, "--" + key.lower().replace("_", "-"), metavar, check, text, key.lower() if plan else None)


GROUPS: tuple[tuple[str, tuple[Setting, ...]], ...] = (
    ("Hardware", (
        _s("PRESET", "NAME", _preset, f"node type: {', '.join(preset_names())} (launch/presets/NAME.toml)"),
        _s("GPUS", "LIST", _gpus, "GPUs to use, e.g. 0,1,2,3 or 0-6 (default: all)"),
        _s("NUM_GPUS", "N", _whole(1), "GPUs on the node (default: the preset's, capped by nvidia-smi)"),
        _s("GPU_MEMORY_GIB", "G", _real(0, open_low=True), "memory per GPU (default: the preset's)"),
    )),
    ("Model", (
        _s("MODEL_PATH", "PATH", _text, "HF repo id or local path (default: Qwen/Qwen3.6-27B)"),
        _s("SERVED_MODEL_NAME", "NAME", _text, "name clients send (default: Qwen/Qwen3.6-27B)"),
        _s("DTYPE", "bf16|fp8", _choice("bf16", "fp8"), "weight type; fp8 defaults the path to Qwen/Qwen3.6-27B-FP8"),
        _s("PARAMS_B", "B", _real(0, open_low=True), "parameters in billions, for the memory plan (default: 27.8)"),
    )),
    ("Layout and memory", (
        _s("TP", "N", _whole(1), "tensor-parallel GPUs per replica (default: the smallest that fits)"),
        _s("DP", "N", _whole(1), "replicas inside one server (default: 1, one server per replica)"),
        _s("MEM_FRACTION", "F", _real(*MEM_FRACTION_RANGE), "GPU memory for weights + cache (default: the preset's)"),
        _s("CONTEXT_LENGTH", "N", _whole(1), "SGLang --context-length (default: the model's, 262144)"),
        _s("KV_TOKENS", "N", _whole(1), "KV-cache tokens a replica must hold (default: 65536)"),
        _s("KV_CACHE_DTYPE", "T", _choice(*sorted(KV_BYTES)), f"{', '.join(sorted(KV_BYTES))} (default: auto)"),
    )),
    ("MTP (speculative decoding with the model's own MTP head)", (
        _s("MTP", "on|off", _switch, "default on; --no-mtp is --mtp off"),
        _s("MTP_ALGORITHM", "A", _choice(*SPECULATIVE_ALGORITHMS, upper=True), "EAGLE or NEXTN (default: EAGLE)"),
        _s("MTP_STEPS", "N", _whole(1), "draft steps per round (default: 3)"),
        _s("MTP_TOPK", "N", _whole(1), "draft branches per step (default: 1)"),
        _s("MTP_DRAFT_TOKENS", "N", _whole(1), "tokens checked per round (default: steps + 1)"),
    )),
    ("Servers", (
        _s("HOST", "H", _text, "bind address (default: 0.0.0.0; sim: 127.0.0.1)"),
        _s("ADVERTISE_HOST", "H", _text, "host written to the endpoints file (default: this machine's name)"),
        _s("BASE_PORT", "P", _whole(1, 65535), "port of the first server; the others follow (default: 30000)"),
        _s("API_KEY", "KEY", _text, "SGLang --api-key (masked in all output)"),
        _s("EXTRA_ARGS", "STRING", _server_args, "more server arguments, shell-quoted; they come last and win"),
        _s("PYTHON", "PATH", _text, "interpreter with SGLang installed (default: python3)"),
    )),
    ("Run", (
        _s("LOG_DIR", "DIR", _text, "one log per server (default: runs/servers in the repo)", plan=False),
        _s("ENDPOINTS_FILE", "FILE", _text, "(default: LOG_DIR/endpoints.txt)", plan=False),
        _s("PID_FILE", "FILE", _text, "(default: LOG_DIR/servers.pid)", plan=False),
        _s("HEALTH_TIMEOUT", "S", _whole(1), "seconds to wait for all servers (default: 1800; sim: 60)", plan=False),
        _s("EXPLAIN", None, _switch, "print the per-GPU memory arithmetic behind the layout", plan=False),
        _s("DRY_RUN", None, _switch, "print the commands and the endpoints, start nothing", plan=False),
    )),
)
SETTINGS: dict[str, Setting] = {s.key: s for _, group in GROUPS for s in group}

_USAGE = "launch/start_servers.sh --preset NAME [options] [-- EXTRA SERVER ARGS...]"
_DESCRIPTION = """\
Start one SGLang server per replica (python -m sglang.launch_server, or python -m simulator for the sim
preset), wait for each /health, then write the endpoints file and a PID file for launch/stop_servers.sh.

Settings come from options, an env file (--env-file FILE, KEY=VALUE lines), or both; options win. Each
option below ends with its env-file key in brackets. SGLang's own spelling of an option works as well
(--model, --tp-size, --dp-size, --port, --mem-fraction-static, --speculative-num-steps, ...)."""
_EPILOG = """\
Server arguments after '--' (or in --extra-args) go to every server as they are, after the launcher's own
flags. A flag that one of the options above sets (--port, --tp-size, --model-path, ...) is refused there:
use the option, so that the layout and the endpoints follow it.

If a server exits or the timeout passes, the error names it and shows the end of its log, and every server
this run started is stopped again. Servers run in their own sessions: they outlive this shell and a
closed terminal. Stop them with: launch/stop_servers.sh [--pid-file FILE]

Examples
  launch/start_servers.sh --preset blackwell-4x --explain
  launch/start_servers.sh --preset b200-8x --gpus 0-6 --api-key "$KEY"
  launch/start_servers.sh --preset b200-8x --model /models/Qwen3.6-27B --tp-size 1 --dry-run
  launch/start_servers.sh --env-file launch/b200.env --dry-run
  launch/start_servers.sh --preset sim --log-dir /tmp/fleet"""


def _width() -> int:
    # stdout is the script's pipe, so ask the terminal on stderr; without one, the width the text is written for.
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError):
        columns = 110
    return max(60, min(columns, 110)) - 2


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`Usage:`, and one spelling per option (the others are named in its help)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=27, width=_width())

    def add_usage(self, usage: str | None, actions: Iterable[argparse.Action],
                  groups: Iterable[argparse._MutuallyExclusiveGroup], prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, "Usage: " if prefix is None else prefix)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        first = action.option_strings[0]
        if action.nargs == 0:
            return ", ".join(action.option_strings)
        return f"{first} [{action.metavar}]" if action.nargs == "?" else f"{first} {action.metavar}"

    def _split_lines(self, text: str, width: int) -> list[str]:  # never split an option at its hyphens
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False, break_long_words=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise PlanError(f"{message}; see --help")


def build_parser() -> argparse.ArgumentParser:
    """The options; every value is kept as the text typed, and checked later with its setting's check."""
    p = _Parser(prog="launch/start_servers.sh", usage=_USAGE, description=_DESCRIPTION, epilog=_EPILOG,
                formatter_class=_HelpFormatter, add_help=False, allow_abbrev=False)
    for title, group in GROUPS:
        g = p.add_argument_group(title)
        for s in group:
            also = f" (also {', '.join(s.aliases)})" if s.aliases else ""
            text = f"{s.help}{also} [{s.key}]"
            if s.metavar is None:
                g.add_argument(s.option, dest=s.key, action="store_const", const="on", help=text)
            elif s.key == "MTP":
                g.add_argument(s.option, dest=s.key, nargs="?", const="on", metavar=s.metavar, help=text)
                g.add_argument("--no-mtp", dest=s.key, action="store_const", const="off", help=argparse.SUPPRESS)
            else:
                g.add_argument(s.option, *s.aliases, dest=s.key, metavar=s.metavar, help=text)
        if title == "Run":
            g.add_argument("--env-file", metavar="FILE", help="read settings from FILE first (see launch/*.env)")
            g.add_argument("-h", "--help", action="store_true", help="this help")
    return p


def help_text() -> str:
    return build_parser().format_help()


# --- reading -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Settings:
    """The checked settings: typed values by env-file key, where each came from, and the `--` arguments."""

    values: Mapping[str, Value]
    origins: Mapping[str, str]  # key -> "--tp" or "FILE:LINE"
    server_args: tuple[str, ...] = ()
    help: bool = False

    def text(self, key: str) -> str | None:
        value = self.values.get(key)
        return value if isinstance(value, str) else None

    def whole(self, key: str) -> int | None:
        value = self.values.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def on(self, key: str) -> bool:
        return self.values.get(key) is True


def _join_values(argv: Sequence[str], parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, str]]:
    """`--opt VALUE` -> `--opt=VALUE`, so that a value may begin with '-' (--extra-args --foo) as in bash and
    SGLang, unless it is one of our options (`--gpus --dry-run` misses a value). Also: the spelling typed
    for each setting, so that an error names `--tp-size` when that is what the user wrote."""
    dest = {o: a.dest for a in parser._actions for o in a.option_strings}
    takes_value = {o for a in parser._actions if a.nargs is None for o in a.option_strings}
    switches = {o for a in parser._actions if a.nargs == 0 for o in a.option_strings}
    out: list[str] = []
    typed: dict[str, str] = {}
    k = 0
    while k < len(argv):
        arg = argv[k]
        name = arg.split("=", 1)[0]
        following = argv[k + 1] if k + 1 < len(argv) else None
        if name in dest:
            typed[dest[name]] = name
        if name in switches and "=" in arg:
            raise PlanError(f"{name} takes no value; see --help")
        if arg in takes_value:
            if following is None or following.split("=", 1)[0] in dest:
                raise PlanError(f"{arg} needs a value; see --help")
            out.append(f"{arg}={following}")
            k += 2
        elif arg == "--mtp" and following is not None and not following.startswith("-"):
            out.append(f"--mtp={following}")
            k += 2
        else:
            out.append(arg)
            k += 1
    return out, typed


def _refuse(leftover: str, parser: argparse.ArgumentParser) -> NoReturn:
    if not leftover.startswith("-"):
        raise PlanError(f"unexpected argument '{leftover}'; server arguments go after '--' or in --extra-args")
    name = leftover.split("=", 1)[0]
    known = [o for a in parser._actions for o in a.option_strings]
    hint = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    raise PlanError(f"unknown option {name}" + (f" (did you mean {hint[0]}?)" if hint else "")
                    + "; see --help. Server arguments go after '--' or in --extra-args")


def read_settings(argv: Sequence[str]) -> Settings:
    """Options and the env file they name, merged (options win) and checked; PlanError names the culprit."""
    argv = list(argv)
    server_args: tuple[str, ...] = ()
    if "--" in argv:
        cut = argv.index("--")
        argv, server_args = argv[:cut], tuple(argv[cut + 1:])
    parser = build_parser()
    joined, typed = _join_values(argv, parser)
    ns, leftovers = parser.parse_known_args(joined)
    if ns.help:
        return Settings(values={}, origins={}, help=True)
    if leftovers:
        _refuse(leftovers[0], parser)
    check_server_args(server_args)
    raw = read_env_file(ns.env_file, SETTINGS) if ns.env_file is not None else {}
    for key, setting in SETTINGS.items():
        if getattr(ns, key) is not None:
            raw[key] = (getattr(ns, key), typed.get(key, setting.option))
    values: dict[str, Value] = {}
    origins: dict[str, str] = {}
    for key, (text, where) in raw.items():
        if text == "":  # an empty value leaves the default
            continue
        label = where if where.startswith("-") else f"{where}: {key}"
        try:
            values[key] = SETTINGS[key].check(text)
        except ValueError as exc:
            raise PlanError(f"{label}: {exc}") from None
        origins[key] = where
    return Settings(values=values, origins=origins, server_args=server_args)
