"""The CLI reference (docs/cli.md) is each command's own `--help` (tests/cli_reference.py), and every command is
a console script in pyproject.toml that points at its module's `main`."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import cli_reference
from tests.cli_reference import COMMANDS, DOC, REGENERATE, Command

REPO = Path(__file__).resolve().parent.parent


def scripts() -> dict[str, str]:
    table: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    return table


def test_cli_blocks_match_each_commands_help() -> None:
    names = cli_reference.stale(DOC.read_text(encoding="utf-8"))
    assert not names, f"docs/cli.md's CLI block(s) for {', '.join(names)} differ from --help. Regenerate: {REGENERATE}"


def test_every_command_has_a_console_script_and_a_reference_block() -> None:
    assert set(scripts()) == {c.script for c in COMMANDS}
    readme = DOC.read_text(encoding="utf-8")
    for command in COMMANDS:
        assert cli_reference.current_block(readme, command.name) is not None, command.name


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.script)
def test_console_script_points_at_the_modules_main(command: Command) -> None:
    target = scripts()[command.script]
    module_name, _, function = target.partition(":")
    assert function == "main"
    main = getattr(importlib.import_module(module_name), function)
    assert inspect.signature(main).return_annotation in (int, "int"), f"{target} must return the exit code"
    # `python -m MODULE` runs the same function.
    runner = importlib.import_module(f"{command.module}.__main__")
    assert runner.main is main


@pytest.mark.parametrize("script", ["regen-status", "regen-plan"])
def test_installed_console_script_runs(script: str) -> None:
    path = Path(sys.executable).parent / script
    assert path.exists(), f"{path} is missing: reinstall the project (`make setup` or `pip install -e .`)"
    proc = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ")


@pytest.mark.parametrize(("text", "expected"), [
    ("a  b\n   c", "a b c"),
    ("\n\tusage: x\n", "usage: x"),
    ("", ""),
])
def test_whitespace_is_normalised(text: str, expected: str) -> None:
    assert cli_reference.normalise(text) == expected


def test_write_fills_the_markers_and_leaves_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    readme = tmp_path / "cli.md"
    body = "".join(f"before {c.name}\n<!-- cli:{c.name}:start -->old<!-- cli:{c.name}:end -->\n" for c in COMMANDS)
    readme.write_text(body + "after\n")
    monkeypatch.setattr(cli_reference, "render_help", lambda command: f"usage: {command.module} [-h]\n")
    assert cli_reference.write(readme) == [c.name for c in COMMANDS]
    text = readme.read_text()
    assert "old" not in text and text.endswith("after\n") and "before run\n<!-- cli:run:start -->" in text
    assert cli_reference.current_block(text, "plan") == cli_reference.block(COMMANDS[-1], "usage: launch.plan [-h]\n")
    assert cli_reference.write(readme) == [], "a second write changes nothing"


def test_missing_markers_are_an_error() -> None:
    with pytest.raises(ValueError, match="no <!-- cli:run:start -->"):
        cli_reference.replace_block("no markers here", "run", "x")
