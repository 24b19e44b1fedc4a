"""The estimate's figures in README.md and docs/estimate.md are generated (bench/docs_figures.py, `make docs`),
never typed: the docs must read exactly as the stored figures draw them, a figure typed over one fails that,
and (slow: the estimate runs for a minute or two) the stored figures must be what the documented command
gives now, within the modelled clock's run-to-run spread."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import docs_figures
from bench.docs_figures import FIGURES, REGIONS, TOLERANCE, differences, moved, rendered

REPO = Path(__file__).resolve().parent.parent


def stored() -> dict[str, Any]:
    figures: dict[str, Any] = orjson.loads((REPO / FIGURES).read_bytes())
    return figures


def copy_docs(root: Path) -> Path:
    for path in {path for path, _ in REGIONS.values()}:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, root / path)
    return root


def test_the_docs_carry_the_generated_figures() -> None:
    assert differences(REPO, stored()) == []


def test_the_figures_are_the_documented_commands() -> None:
    figures = stored()
    assert figures["command"] == ["python", "-m", "client.estimate", *docs_figures.COMMAND]
    assert figures["clock"] == "modelled", "timed on the simulated GPU's clock, so a rerun gives the same figures"


def test_a_typed_figure_fails_and_the_generated_one_passes(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    figures = stored()
    readme = root / "README.md"
    text = readme.read_text()
    # The figure as drawn, e.g. "2.69B output tokens", typed over with another.
    drawn = rendered(REPO, figures)["README.md"]
    assert drawn == text
    tokens = f"{figures['output_tokens']['point'] / 1e9:.2f}B output tokens"
    assert tokens in text
    readme.write_text(text.replace(tokens, "1.24B output tokens"))
    problems = differences(root, figures)
    assert len(problems) == 1 and "README.md: region 'estimate-job'" in problems[0], problems
    # Drawn again from the figures: passes.
    for path, body in rendered(root, figures).items():
        (root / path).write_text(body)
    assert differences(root, figures) == []


def test_a_typed_console_line_fails(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    page = root / "docs" / "estimate.md"
    text = page.read_text()
    line = next(line for line in text.splitlines() if line.startswith("│ 8x NVIDIA B200"))
    page.write_text(text.replace(line, line.replace("│ model", "│ 131.3 model")))
    assert [p for p in differences(root, stored()) if "'estimate-answer'" in p]


def test_a_lost_marker_is_reported(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    page = root / "README.md"
    page.write_text(page.read_text().replace("<!-- figures:estimate-job", "<!-- estimate-job"))
    assert differences(root, stored()) == ["README.md: 0 regions named 'estimate-job' (one expected)"]


def test_text_outside_the_regions_is_left_alone(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    page = root / "README.md"
    page.write_text(page.read_text() + "\nA line of prose after the regions.\n")
    assert differences(root, stored()) == []
    assert rendered(root, stored())["README.md"].endswith("A line of prose after the regions.\n")


def test_moved_names_each_figure_past_the_tolerance() -> None:
    figures = stored()
    assert moved(figures, figures) == []
    slower = orjson.loads(orjson.dumps(figures))
    slower["rows"][1]["gpu_hours"]["point"] *= 1 + 2 * TOLERANCE
    slower["console"] = ["anything"]  # the console text is not compared: its figures are the others
    problems = moved(figures, slower)
    assert len(problems) == 1 and problems[0].startswith(".rows[1].gpu_hours.point: stored"), problems
    within = orjson.loads(orjson.dumps(figures))
    within["tokens_per_s"] *= 1 + TOLERANCE / 2
    assert moved(figures, within) == []


@pytest.mark.slow
def test_the_stored_figures_are_what_the_command_gives_now() -> None:
    """The whole estimate, on four simulated servers: a minute or two of CPU. A change to the simulator's or
    the GPU table's figures fails here until `make docs` is run."""
    proc = subprocess.run([sys.executable, "-m", "bench.docs_figures", "--compare"], cwd=REPO,
                          capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
