"""The layering is checked, not just described: import-linter's contracts in pyproject.toml must hold,
a reversed contract must break (so the check can fail), and every module says what it owns."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_MODULE_LINES = 450  # "about 400": a little slack, never a second responsibility


def lint_imports(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(config), "--no-cache"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)


def test_layers_import_only_downward() -> None:
    result = lint_imports(REPO / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "client layers import only downward KEPT" in result.stdout
    # bench/ has its workload and its loop corpus of its own (bench.prompt_file, bench.loop_corpus).
    assert "the benchmarks do not import the tests KEPT" in result.stdout
    kept = " ".join(result.stdout.split())  # import-linter wraps a long contract name
    for name in ("the simulator depends on nothing of the client, and of the launcher only on its memory plan",
                 "the client reaches the simulator only through simulator.api"):
        assert f"{name} KEPT" in kept


def test_a_client_import_past_the_simulators_face_is_reported_broken(tmp_path: Path) -> None:
    """The face contract without its one exemption: the client's imports of simulator.api are then what a
    client import of any other simulator module would be, and break it."""
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    face = next(c for c in settings["contracts"] if c["name"].endswith("only through simulator.api"))
    assert face["ignore_imports"] == ["client.** -> simulator.api"]
    config = tmp_path / "no_face.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["client", "simulator"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "no face"\ntype = "forbidden"\n'
        f"source_modules = {face['source_modules']!r}\nforbidden_modules = {face['forbidden_modules']!r}\n"
        "allow_indirect_imports = true\n".replace("'", '"'))
    result = lint_imports(config)
    assert result.returncode != 0
    assert "no face BROKEN" in result.stdout
    assert "client.run.main -> simulator.api" in result.stdout


def test_a_reversed_layer_contract_is_reported_broken(tmp_path: Path) -> None:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = settings["contracts"][0]["layers"]
    # core above wire: wire imports core, so this contract must break.
    wire, core = layers.index("client.wire"), layers.index("client.core")
    reversed_layers = list(layers)
    reversed_layers[wire], reversed_layers[core] = layers[core], layers[wire]
    config = tmp_path / "reversed.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["client"]\n\n'
        '[[tool.importlinter.contracts]]\nname = "reversed"\ntype = "layers"\n'
        f"layers = {reversed_layers!r}\n".replace("'", '"'))
    result = lint_imports(config)
    assert result.returncode != 0
    assert "reversed BROKEN" in result.stdout
    assert "client.wire" in result.stdout and "client.core" in result.stdout


def _modules() -> list[Path]:
    roots = ("argchecks", "client", "launch", "prompts", "simulator")
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_module_has_a_docstring_and_stays_small(path: Path) -> None:
    source = path.read_text()
    assert ast.get_docstring(ast.parse(source)), f"{path.relative_to(REPO)} needs a docstring saying what it owns"
    lines = source.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{path.relative_to(REPO)} has {lines} lines; split it by responsibility"


def test_every_client_layer_is_in_the_contract() -> None:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    named = {name.strip() for layer in settings["contracts"][0]["layers"] for name in layer.split("|")}
    packages = {f"client.{p.name}" for p in (REPO / "client").iterdir() if (p / "__init__.py").exists()}
    assert packages == named, "a new package under client/ must take its place in the layer contract"
    stray = [p.name for p in (REPO / "client").glob("*.py") if p.name != "__init__.py"]
    assert not stray, f"modules belong in a layer package, not at the top of client/: {stray}"


def _documented_modules() -> dict[str, set[str]]:
    """docs/architecture.md's package table: package -> the modules its row names."""
    rows: dict[str, set[str]] = {}
    for line in (REPO / "docs" / "architecture.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`client."):
            rows[cells[0].strip("`")] = {name.strip("` ") for name in cells[1].split(",")}
    return rows


def test_the_architecture_page_names_every_module() -> None:
    documented = _documented_modules()
    for package in sorted(p for p in (REPO / "client").iterdir() if (p / "__init__.py").exists()):
        modules = {p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")}
        named = documented.get(f"client.{package.name}", set())
        assert modules == named, (f"docs/architecture.md's row for client.{package.name}: missing "
                                  f"{sorted(modules - named)}, gone {sorted(named - modules)}")
