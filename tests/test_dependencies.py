"""Every third-party module that client/, launch/, prompts/, simulator/ and bench/ import is declared in
pyproject.toml (the dependencies or an extra), so a fresh install of the extras a part needs can run it."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIRST_PARTY = {"argchecks", "client", "launch", "prompts", "simulator", "bench", "tests"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"].values()
    requirements = [*project["dependencies"], *(r for extra in extras for r in extra)]
    names = set()
    for requirement in requirements:
        match = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert match, requirement
        names.add(_normal(match.group(0)))
    return names


def third_party_imports() -> dict[str, list[str]]:
    """Top-level module -> the files that import it."""
    found: dict[str, set[str]] = {}
    for root in ("argchecks", "client", "launch", "prompts", "simulator", "bench"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.partition(".")[0]
                    if top not in sys.stdlib_module_names and top not in FIRST_PARTY:
                        found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return {module: sorted(files) for module, files in sorted(found.items())}


IMPORTS = third_party_imports()


def test_the_scan_finds_the_known_imports() -> None:
    assert {"orjson", "httptools", "openai", "pyarrow"} <= set(IMPORTS)


@pytest.mark.parametrize("module", list(IMPORTS))
def test_each_imported_module_is_declared(module: str) -> None:
    distributions = packages_distributions().get(module)
    assert distributions, f"{module} (imported by {', '.join(IMPORTS[module])}) is not installed here"
    assert any(_normal(d) in declared() for d in distributions), (
        f"{module} (distribution {', '.join(distributions)}) is imported by {', '.join(IMPORTS[module])} but "
        "pyproject.toml declares it nowhere")
