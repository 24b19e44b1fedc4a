"""Every tool's exit codes come from the one scheme (client.core.exit_codes): the codes each `--help` lists are
the scheme's, and each tool's named codes are the scheme's values."""

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


@pytest.mark.parametrize("module", ["client.run.exit_codes", "client.export.main", "client.audit.main",
                                    "client.estimate.main", "client.status.main"])
def test_each_tools_named_codes_are_the_schemes(module: str) -> None:
    named = {value for name, value in vars(importlib.import_module(module)).items()
             if name.startswith("EXIT_") and isinstance(value, int)}
    assert named and named <= SCHEME
