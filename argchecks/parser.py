"""The argument parser every tool of the project uses: option errors in one or two lines, never a usage block.

`ToolParser` is argparse's parser with three differences:
- An unknown option is refused before anything else is checked (a typo in a required option is named as
  the typo, not as the option that is then missing), with the nearest valid option (`difflib`):
  `unknown option --max_tokens; did you mean --max-tokens?`. An option that takes a value followed by
  something that looks like an option says how to pass a value that starts with `-` (`--opt=VALUE`).
- Long options are never abbreviated (`--gpu 4` is not `--gpus 4`): a prefix is a typo like any other.
- An error prints `PROG: error: MESSAGE` and one line on where the help is, and exits 2; the usage block
  (28 lines for `client.run`) is left to `--help`.
The help itself is wrapped at 100 columns at most, whatever the terminal's width.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

HELP_WIDTH = 100
_NUMBER = re.compile(r"-\d|-\.\d")


def _capped(formatter: type[argparse.HelpFormatter]) -> Callable[[str], argparse.HelpFormatter]:
    def make(prog: str) -> argparse.HelpFormatter:
        width = min(shutil.get_terminal_size().columns, HELP_WIDTH) - 2
        return formatter(prog, width=width)

    return make


class ToolParser(argparse.ArgumentParser):
    """argparse.ArgumentParser with one-line errors, typo suggestions and no abbreviations (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        kwargs["formatter_class"] = _capped(kwargs.get("formatter_class", argparse.HelpFormatter))
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n{help_line(self.prog)}\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        problem = unknown_options(argv, self._option_string_actions)
        if problem is not None:
            self.error(problem)
        return super().parse_known_args(argv, namespace)


def help_line(prog: str) -> str:
    return f"{prog} --help lists every option"


def nearest(name: str, options: Sequence[str]) -> str | None:
    """The valid option a misspelt one most likely meant: the same with dashes for underscores, else the
    closest by difflib's ratio (0.75 or more), else None."""
    dashed = "--" + name.lstrip("-").replace("_", "-").lower()
    if dashed in options:
        return dashed
    found = difflib.get_close_matches(dashed, options, n=1, cutoff=0.75)
    return found[0] if found else None


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and action.nargs not in ("?", "*")


def unknown_options(argv: Sequence[str], known: dict[str, argparse.Action]) -> str | None:
    """The message for the options in `argv` that the parser does not define, or None when there are none.
    Tokens after a bare `--` are values; `--opt=VALUE` is read as `--opt`."""
    long_options = sorted(o for o in known if o.startswith("--"))
    named: list[tuple[str, str | None]] = []
    previous: str | None = None
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        # As argparse reads it: a token with a space, or a negative number, is a value.
        looks_like_option = (token.startswith("-") and len(name) > 2 and " " not in token
                             and not _NUMBER.match(token))
        if looks_like_option and name not in known:
            action = known.get(previous) if previous is not None else None
            if action is not None and _takes_value(action):
                return (f"argument {previous}: expected a value, got the option-like {token!r}; a value that "
                        f"starts with '-' is written {previous}={token}")
            named.append((name, nearest(name, long_options)))
        previous = name if token.startswith("-") and "=" not in token else None
    if len(named) == 1:
        name, guess = named[0]
        return f"unknown option {name}" + (f"; did you mean {guess}?" if guess else "")
    if named:
        return "unknown options: " + ", ".join(f"{n} (did you mean {g}?)" if g else n for n, g in named)
    return None
