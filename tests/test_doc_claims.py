"""What the docs claim about the code stays true: the modules they name exist, the run's diagram names every
step of the data path, argparse stays where docs/architecture.md says, its module-size limit is the test's,
and the README stays a front page (at most 250 lines) whose Quickstart reaches a training file; the times the
docs give for the tests and the Quickstart are the ones docs/test-suite.md measured on a busy machine."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.test_architecture import MAX_MODULE_LINES

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PACKAGES = ("core", "wire", "fleet", "local", "s3", "results", "engine", "run", "audit", "estimate", "export",
            "status")
# Backquoted dotted names in these pages are module paths (`engine.swarm.Swarm`, `client.local.sink`).
NAMING_PAGES = tuple(f"docs/{name}.md" for name in ("architecture", "how-it-works", "data-contracts", "servers", "s3",
                                                    "monitoring", "export", "estimate"))
_FILES = (".json", ".jsonl", ".md", ".py", ".toml")  # `run.json` is a file, not client.run's attribute
_DOTTED = re.compile(rf"`(?:client\.)?((?:{'|'.join(PACKAGES)})\.[A-Za-z_][A-Za-z0-9_.]*)`")


def resolves(dotted: str) -> bool:
    """`engine.swarm.Swarm` -> client.engine.swarm, then its attribute Swarm; False if either is missing."""
    parts = ("client." + dotted).split(".")
    for cut in range(len(parts), 1, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


@pytest.mark.parametrize("page", NAMING_PAGES)
def test_every_module_a_page_names_exists(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    names = sorted(name for name in set(_DOTTED.findall(text)) if not name.endswith(_FILES))
    paths = sorted(set(re.findall(r"`((?:client|launch|prompts|simulator|tests|bench)/[\w/.-]+\.py)`", text)))
    assert names or paths, f"{page} names no module"
    assert [name for name in names if not resolves(name)] == []
    assert [path for path in paths if not (REPO / path).is_file()] == []


def _diagram() -> str:
    found = re.search(r"```\n(prompts/\*\.jsonl.*?)```", (DOCS / "how-it-works.md").read_text(), flags=re.DOTALL)
    assert found, "docs/how-it-works.md has no diagram"
    return found.group(1)


def test_the_diagram_names_every_step_of_the_data_path() -> None:
    diagram = _diagram()
    named = set(re.findall(rf"\b((?:{'|'.join(PACKAGES)})\.[a-z_]+)\b", diagram))
    assert [name for name in sorted(named) if not resolves(name)] == []
    path = {"local.source", "engine.swarm", "engine.retry", "core.payload", "fleet.balancer", "wire.endpoint",
            "engine.result_rows", "local.sink", "s3.uploader", "core.stats", "run.console", "run.metrics"}
    assert path <= named, f"the diagram leaves out {sorted(path - named)}"


def _imports_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(alias.name == "argparse" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def test_argparse_stays_where_the_architecture_page_says() -> None:
    tools = {"audit", "estimate", "export", "status", "run"}
    found = {str(p.relative_to(REPO)) for p in (REPO / "client").rglob("*.py") if _imports_argparse(p)}
    below = {p for p in found if p.split("/")[1] not in tools}
    assert below <= {"client/core/options.py", "client/fleet/options.py"}, below
    assert {p for p in found if p.startswith("client/run/")} <= {"client/run/cli.py"}
    text = (DOCS / "architecture.md").read_text()
    assert "`client.core.options`, `client.fleet.options`" in text and "in `client.run` only `cli`" in text


def test_the_module_size_limit_is_the_one_the_test_holds() -> None:
    text = " ".join((DOCS / "architecture.md").read_text().split())
    assert f"grows past {MAX_MODULE_LINES} lines" in text


def test_the_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; a topic belongs in docs/ (its table says where)"
    text = "\n".join(lines)
    for page in sorted(DOCS.glob("*.md")):
        assert f"(docs/{page.name})" in text, f"README.md's table of topics does not name docs/{page.name}"


# Where the project says how long a step takes: each such figure is one the busy-machine table measured.
TIMING_PAGES = ("README.md", "Makefile", "docs/development.md")
_VAGUE = re.compile(r"about a minute|a few minutes|in minutes", re.IGNORECASE)
_CLAIMED = re.compile(r"(\d+) minutes on a busy 2-core machine")


def _measured_minutes() -> set[int]:
    """The whole minutes of each wall time in docs/test-suite.md's busy-machine table ("21 min 47 s" -> 22)."""
    page = (DOCS / "test-suite.md").read_text()
    table = page.split("## Measured on a busy machine", 1)[1].split("\n## ", 1)[0]
    return {round(int(m) + int(s) / 60) for m, s in re.findall(r"(\d+) min (\d+) s", table)}


@pytest.mark.parametrize("page", TIMING_PAGES)
def test_the_times_the_docs_give_are_the_measured_ones(page: str) -> None:
    text = (REPO / page).read_text()
    assert not _VAGUE.findall(text), f"{page}: say what it takes on a two-core machine, as measured"
    measured = _measured_minutes()
    assert {int(n) for n in _CLAIMED.findall(text)} <= measured, (page, measured)
