"""Every tool's option errors are two lines (the problem, where the help is), name a misspelt option's nearest
valid one, take no abbreviation, and every tool's help fits 100 columns on any terminal (argchecks.parser)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from argchecks.parser import HELP_WIDTH, ToolParser, reflow, unknown_options
from tests.conftest import REPO

TOOLS = ["client.run", "client.estimate", "client.audit", "client.export", "client.status", "launch.plan",
         "simulator", "prompts.from_sharegpt", "prompts.from_openai", "prompts.from_hf", "prompts.from_tokenized",
         "prompts.make_sample"]


def _parser() -> ToolParser:
    parser = ToolParser(prog="tool")
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--sim-arg", action="append")
    parser.add_argument("--plain", action="store_true")
    return parser


# (argv after --prompts p, the message, or None when the command line is accepted)
CASES: list[tuple[list[str], str | None]] = [
    (["--max_tokens", "100"], "unknown option --max_tokens; did you mean --max-tokens?"),
    (["--gpu", "4"], "unknown option --gpu; did you mean --gpus?"),  # never an abbreviation of --gpus
    (["--plan"], "unknown option --plan; did you mean --plain?"),
    (["--zzz-top"], "unknown option --zzz-top"),
    (["--foo", "--max-tokns=3"], "unknown options: --foo, --max-tokns (did you mean --max-tokens?)"),
    (["--sim-arg", "--fail-500"], "argument --sim-arg: expected a value, got the option-like '--fail-500'; a value "
                                  "that starts with '-' is written --sim-arg=--fail-500"),
    (["-promts", "x"], "unknown option -promts; did you mean --prompts?"),
    (["--sim-arg=--fail-500", "--sim-arg", "-0.5", "--gpus", "2"], None),
    (["--sim-arg", "--a b"], None),  # a value with a space is a value, as argparse reads it
    (["--", "--not-an-option"], None),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_unknown_options_are_named_with_the_nearest(argv: list[str], message: str | None) -> None:
    parser = _parser()
    assert unknown_options(["--prompts", "p", *argv], parser._option_string_actions) == message


def test_a_typo_in_a_required_option_is_named_as_the_typo(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--promts", "p.jsonl"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == ("tool: error: unknown option --promts; did you mean --prompts?\n"
                                       "tool --help lists every option\n")


@pytest.mark.parametrize("tool", ["client.run", "client.export", "simulator"])
def test_a_tool_says_it_in_two_lines_without_the_usage_block(tool: str) -> None:
    proc = subprocess.run([sys.executable, "-m", tool, "--max_tokens", "100"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 2 and "usage:" not in proc.stderr
    assert lines[0].startswith(f"python -m {tool}: error: unknown option --max_tokens")
    assert lines[1] == f"python -m {tool} --help lists every option"


@pytest.mark.parametrize("tool", TOOLS)
def test_every_help_line_fits_100_columns_on_a_wide_terminal(tool: str) -> None:
    env = {**os.environ, "COLUMNS": "250", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", tool, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    long = [line for line in proc.stdout.splitlines() if len(line) > HELP_WIDTH]
    assert long == []


REFLOW_CASES = [
    ("a short line stays", "exit codes:\n  0  ok\n", "exit codes:\n  0  ok\n"),
    ("a long item hangs under its text",
     "  1  " + "word " * 30 + "\n  2  next",
     "  1  " + "word " * 18 + "word\n     " + "word " * 10 + "word\n  2  next"),
    ("a command is continued with a backslash, an option with its value",
     "  python -m client.run " + "--opt value " * 10 + "--last 1",
     "  python -m client.run " + "--opt value " * 6 + "\\\n      " + "--opt value " * 4 + "--last 1"),
]


@pytest.mark.parametrize(("name", "text", "expected"), REFLOW_CASES, ids=[c[0] for c in REFLOW_CASES])
def test_raw_help_is_reflowed_only_where_a_line_is_too_long(name: str, text: str, expected: str) -> None:
    assert reflow(text, 100) == expected
    assert all(len(line) <= 100 for line in reflow(text, 100).splitlines())


def test_the_parser_refuses_abbreviations() -> None:
    parser = ToolParser(prog="tool")
    parser.add_argument("--gpus", type=int)
    with pytest.raises(SystemExit):
        parser.parse_args(["--gpu", "4"])
    assert isinstance(parser, argparse.ArgumentParser) and parser.allow_abbrev is False
