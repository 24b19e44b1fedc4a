"""Every tool's exit codes come from the one scheme (client.core.exit_codes): the codes each `--help` lists are
the scheme's, and each tool uses the scheme's names for them."""

from __future__ import annotations

import importlib
import re

import pytest

from client.core import exit_codes

SCHEME = {value for name, value in vars(exit_codes).items() if name.startswith("EXIT_")}
TOOLS = ["client.run.cli", "client.export.main", "client.audit.main", "client.estimate.cli", "client.status.main"]


@pytest.mark.parametrize("module", TOOLS)
def test_the_help_lists_only_the_schemes_codes(module: str) -> None:
    parser = importlib.import_module(module).build_parser()
    listed = {int(code) for code in re.findall(r"^\s{2}(\d+)\s{1,4}\S", parser.epilog or "", re.MULTILINE)}
    assert listed and listed <= SCHEME, sorted(listed - SCHEME)


@pytest.mark.parametrize("module", ["client.run.main", "client.run.job", "client.export.main", "client.audit.main",
                                    "client.estimate.main", "client.status.main"])
def test_no_tool_renames_a_code(module: str) -> None:
    """One name for each code: a tool uses the scheme's names, never an alias of its own (they drifted)."""
    named = {name: value for name, value in vars(importlib.import_module(module)).items() if name.startswith("EXIT_")}
    assert named and all(getattr(exit_codes, name, None) == value for name, value in named.items()), named
