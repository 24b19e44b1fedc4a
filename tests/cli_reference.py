"""The CLI reference (docs/cli.md), generated from each command's own `--help`, so the two cannot drift.

    python -m tests.cli_reference --write     rewrite the blocks between docs/cli.md's cli markers
    python -m tests.cli_reference             check only: exit 1 and name the stale blocks

Each command's block sits between `<!-- cli:NAME:start -->` and `<!-- cli:NAME:end -->`. The help is
rendered by the real entry point in a subprocess at a fixed width (COLUMNS=100) and without colour.
tests/test_cli_reference.py runs the check; it compares the text with runs of whitespace collapsed, so that
argparse's line wrapping, which differs a little between Python versions, does not fail it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "cli.md"
WIDTH = 100
REGENERATE = "python -m tests.cli_reference --write"


@dataclass(frozen=True)
class Command:
    name: str  # the marker name
    script: str  # the console script in pyproject's [project.scripts]
    module: str  # the `python -m` form


COMMANDS = (
    Command("run", "regen-run", "client.run"),
    Command("estimate", "regen-estimate", "client.estimate"),
    Command("audit", "regen-audit", "client.audit"),
    Command("export", "regen-export", "client.export"),
    Command("status", "regen-status", "client.status"),
    Command("plan", "regen-plan", "launch.plan"),
)


def render_help(command: Command) -> str:
    env = {**os.environ, "COLUMNS": str(WIDTH), "LINES": "50", "NO_COLOR": "1", "PYTHON_COLORS": "0",
           "PYTHONIOENCODING": "utf-8"}
    proc = subprocess.run([sys.executable, "-m", command.module, "--help"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {command.module} --help exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout.rstrip() + "\n"


def block(command: Command, help_text: str) -> str:
    """What goes between the markers (the markers excluded)."""
    return f"\n```text\n{help_text}```\n"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- cli:{name}:start -->", f"<!-- cli:{name}:end -->"


def current_block(text: str, name: str) -> str | None:
    start, end = markers(name)
    found = re.search(re.escape(start) + r"(.*?)" + re.escape(end), text, flags=re.DOTALL)
    return found.group(1) if found else None


def replace_block(page: str, name: str, text: str) -> str:
    start, end = markers(name)
    if current_block(page, name) is None:
        raise ValueError(f"docs/cli.md has no {start} ... {end} markers")
    pattern = re.escape(start) + r".*?" + re.escape(end)
    return re.sub(pattern, lambda _: start + text + end, page, count=1, flags=re.DOTALL)


def normalise(text: str) -> str:
    return " ".join(text.split())


def stale(text: str) -> list[str]:
    """The commands whose block differs from their --help (or has no markers)."""
    names = []
    for command in COMMANDS:
        found = current_block(text, command.name)
        if found is None or normalise(found) != normalise(block(command, render_help(command))):
            names.append(command.name)
    return names


def write(path: Path = DOC) -> list[str]:
    """Regenerate every block in place; returns the names that changed."""
    text = path.read_text(encoding="utf-8")
    changed = []
    for command in COMMANDS:
        updated = replace_block(text, command.name, block(command, render_help(command)))
        if updated != text:
            changed.append(command.name)
        text = updated
    path.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cli_reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/cli.md's CLI blocks")
    args = parser.parse_args(argv)
    if args.write:
        changed = write()
        print(f"docs/cli.md: {', '.join(changed) if changed else 'no'} CLI block(s) rewritten")
        return 0
    names = stale(DOC.read_text(encoding="utf-8"))
    if names:
        print(f"docs/cli.md: the CLI block(s) of {', '.join(names)} differ from --help; run: {REGENERATE}",
              file=sys.stderr)
        return 1
    print("docs/cli.md: every CLI block matches its command's --help")
    return 0


if __name__ == "__main__":
    sys.exit(main())
