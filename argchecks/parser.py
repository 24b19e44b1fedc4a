"""The argument parser every tool of the project uses: option errors in one or two lines, never a usage block.

`ToolParser` is argparse's parser with three differences:
- An unknown option is refused before anything else is checked (a typo in a required option is named as
  the typo, not as the option that is then missing), with the nearest valid option (`difflib`):
  `unknown option --max_tokens; did you mean --max-tokens?`. An option that takes a value followed by
  something that looks like an option says how to pass a value that starts with `-` (`--opt=VALUE`).
- Long options are never abbreviated (`--gpu 4` is not `--gpus 4`): a prefix is a typo like any other.
- An error prints `PROG: error: MESSAGE` and one line on where the help is, and exits 2; the usage block
  (28 lines for `client.run`) is left to `--help`.
The help itself is wrapped at 100 columns at most, whatever the terminal's width: raw descriptions and
epilogs too, a long line hanging under its text and a long command continued with a backslash.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

HELP_WIDTH = 100
_NUMBER = re.compile(r"-\d|-\.\d")


_HANG = re.compile(r"(\s*)(?:\S+(?: \S+)?\s{2,}(?=\S))?")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_command(line: str) -> bool:
    return line.strip().startswith(("python ", "regen-", "$ ", ".venv/"))


def _wrap_command(block: list[str], limit: int) -> list[str]:
    """A shell command (with its backslash-continued lines) rewrapped, continued with a backslash."""
    words = " ".join(line.strip().removesuffix("\\").strip() for line in block).split()
    units: list[str] = []  # an option and its value stay on one line: joined by NUL until wrapped
    for word in words:
        if units and units[-1].startswith("--") and "\0" not in units[-1] and not word.startswith("-"):
            units[-1] += "\0" + word
        else:
            units.append(word)
    indent = " " * _indent(block[0])
    pieces = textwrap.wrap(" ".join(units), limit - 2, initial_indent=indent, subsequent_indent=indent + "    ",
                           break_long_words=False, break_on_hyphens=False)
    pieces = [piece.replace("\0", " ") for piece in pieces]
    return [piece + " \\" for piece in pieces[:-1]] + pieces[-1:]


def reflow(text: str, limit: int = HELP_WIDTH) -> str:
    """Raw help text with no line over `limit`: a block with a longer line is rewrapped, and only such a
    block. A block is a line and the lines after it at its hanging indent (under the text after a leading
    term and two or more spaces, `  1    OUT was ...`, else at its own indent); a shell command (`python
    ...`) and its backslash-continued lines are one block, continued with a backslash."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        j = i + 1
        if _is_command(line):
            while lines[j - 1].rstrip().endswith("\\") and j < len(lines):
                j += 1
            block = lines[i:j]
            out.extend(_wrap_command(block, limit) if any(len(b) > limit for b in block) else block)
        elif line.strip():
            lead = _HANG.match(line)
            hang = len(lead.group(0)) if lead is not None else _indent(line)
            while j < len(lines) and lines[j].strip() and _indent(lines[j]) == hang and not _is_command(lines[j]):
                j += 1
            block = lines[i:j]
            if any(len(b) > limit for b in block):
                joined = block[0].rstrip() + "".join(" " + b.strip() for b in block[1:])
                out.extend(textwrap.wrap(joined, limit, subsequent_indent=" " * hang, break_long_words=False,
                                         break_on_hyphens=False))
            else:
                out.extend(block)
        else:
            out.append(line)
        i = j
    return "\n".join(out)


def _capped(formatter: type[argparse.HelpFormatter]) -> Callable[[str], argparse.HelpFormatter]:
    """The tool's formatter at HELP_WIDTH columns at most; raw text (descriptions, epilogs) wrapped too."""

    class Capped(formatter):  # type: ignore[valid-type,misc]
        def _fill_text(self, text: str, width: int, indent: str) -> str:
            filled: str = super()._fill_text(text, width, indent)
            return reflow(filled)

    def make(prog: str) -> argparse.HelpFormatter:
        width = min(shutil.get_terminal_size().columns, HELP_WIDTH) - 2
        made: argparse.HelpFormatter = Capped(prog, width=width)
        return made

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
