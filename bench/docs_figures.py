"""The estimate's figures in the docs, generated, never typed (`make docs`).

`python -m bench.docs_figures` runs the documented estimate (`COMMAND`: four simulated servers, the shipped
sample set projected to the 914K job) in this process, keeps the figures the docs quote and the console report
in `docs/figures/estimate.json`, and writes them between the markers `<!-- figures:NAME ... -->` and
`<!-- /figures -->` in README.md and docs/estimate.md. `--render` rewrites those
regions from the stored figures without running anything; `--check` exits 1, naming the region, when the
committed docs differ from that rendering; `--compare` runs the estimate again and exits 1 when a figure moved
past `TOLERANCE` from the stored one. tests/test_docs_figures.py holds the docs to the stored figures (exact,
fast) and, marked slow, the stored figures to a new run.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
FIGURES = Path("docs/figures/estimate.json")
# The README's worked job, as docs/estimate.md shows it; the figures are this command's on the sample set.
COMMAND = ("--simulate", "4", "--prompts", "prompts/sample.jsonl", "--set-size", "914000",
           "--gpu-kind", "rtx-pro-6000", "--project", "rtx-pro-6000x4,b200x8")
# Two runs on the modelled GPU clock agree within about 2% (docs/estimate.md); 5% leaves a busy host room,
# while a change to the simulator's or the GPU table's figures moves them by more.
TOLERANCE = 0.05
_REGION = re.compile(r"(<!-- figures:(?P<name>[a-z-]+)[^>]*-->\n)(?P<body>.*?)(<!-- /figures -->)", re.DOTALL)
_WIDTH = 110  # the docs' own line length
# The console report, abridged: these prose lines (cut to _CUT characters), and the tables under these titles.
_PROSE = ("simulated fleet:", "914,000 prompts", "sustained throughput", "note: the fleet was saturated")
_TABLES = ("Projection on", "On other GPUs")
_CUT = 104


# -- running the estimate ----------------------------------------------------------------------------------------

def run_estimate() -> dict[str, Any]:
    """The documented command, run here: its figures and its console report."""
    from rich.console import Console

    from client.estimate.cli import build_parser, check
    from client.estimate.main import estimate
    from client.estimate.report import render

    parser = build_parser()
    args = parser.parse_args([*COMMAND, "--progress-every", "600"])
    check(parser, args)
    code, info, projection = estimate(args)
    if code != 0 or info is None or projection is None or projection.hardware is None:
        raise SystemExit(f"the estimate gave no projection (exit {code})")
    text = io.StringIO()
    # Wide and unwrapped, so each table row stays one line; the prose lines are cut below.
    render(info, projection, Console(file=text, highlight=False, force_terminal=False, width=240, soft_wrap=True))
    whole = projection.targets[0]
    rows = [{"kind": row.kind, "name": row.name, "gpus": row.gpus, "measured_kind": row.measured_kind,
             "tokens_per_s": _interval(row.tokens_per_s), "wall_s": _interval(row.wall_s),
             "gpu_hours": _interval(row.gpu_hours)} for row in projection.hardware.rows]
    return {"command": ["python", "-m", "client.estimate", *COMMAND],
            "prompts": info["prompts"], "prompts_in_files": info["prompts_in_files"],
            "clock": info.get("clock"), "output_tokens": _interval(whole.output_tokens),
            "tokens_per_s": _round(projection.throughput.tokens_per_s), "rows": rows,
            "console": [line.rstrip() for line in text.getvalue().splitlines()]}


def _round(value: float) -> float:
    return float(f"{value:.6g}")  # enough for any figure the docs print; short diffs when regenerated


def _interval(value: Any) -> dict[str, float]:
    return {"point": _round(value.point), "low": _round(value.low), "high": _round(value.high)}


def abridged(report: list[str]) -> list[str]:
    """The lines of the console report the docs show: the prose lines of _PROSE, cut, and the tables whose
    titles start with one of _TABLES, whole."""
    kept: list[str] = []
    in_table = False
    for line in report:
        if line.startswith(_TABLES):
            in_table = True
            kept.append(line)
        elif in_table and line[:1] in "┏┃┡│└" and line:
            kept.append(line)
        else:
            in_table = False
            if line.startswith(_PROSE):
                kept.append(_cut(line))
    return kept


def _cut(line: str) -> str:
    if len(line) <= _CUT:
        return line
    return line[:line.rfind(" ", 0, _CUT)] + " ..."


# -- rendering ---------------------------------------------------------------------------------------------------

def _short(name: str) -> str:
    return name.removeprefix("NVIDIA ").removesuffix(" Blackwell")


def readme_job(figures: dict[str, Any]) -> str:
    """README.md's worked job: the whole set's tokens, and the time on the two projected fleets."""
    from client.estimate.report import duration, tokens

    measured, *others = figures["rows"]
    tok = figures["output_tokens"]
    projected = ", and ".join(
        f"{duration(row['wall_s']['point'])} ({row['gpu_hours']['point']:,.0f} GPU-hours) on {row['gpus']}x "
        f"{_short(row['name'])} (a model)" for row in others)
    text = (f"With no GPU yet (`--simulate 4 --gpu-kind rtx-pro-6000 --set-size 914000` on the sample set), "
            f"{figures['prompts']:,} prompts project to {tokens(tok['point'])} output tokens "
            f"[{tokens(tok['low'])} .. {tokens(tok['high'])}] in {duration(measured['wall_s']['point'])} "
            f"({measured['gpu_hours']['point']:,.0f} GPU-hours) on {measured['gpus']}x {_short(measured['name'])} "
            f"as the simulator models it ({measured['tokens_per_s']['point'] / measured['gpus']:,.0f} output tok/s "
            f"per GPU), and {projected}.")
    return _fill(text)


def estimate_answer(figures: dict[str, Any]) -> str:
    """docs/estimate.md's "What the answer looks like": the command and its console report, abridged."""
    command = " ".join(figures["command"][3:])
    intro = (f"The README's worked job, `{command}`, abridged (`--json` has every figure and the model's inputs "
             f"with their sources; `make docs` draws this excerpt and the README's figures from one run, kept in "
             f"[figures/estimate.json](figures/estimate.json)):")
    return _fill(intro) + "\n```\n" + "\n".join(abridged(figures["console"])) + "\n```\n"


def _fill(text: str) -> str:
    return textwrap.fill(text, _WIDTH, break_long_words=False, break_on_hyphens=False) + "\n"


# Each region: the file it is in, and how its body is drawn from the figures.
REGIONS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "estimate-job": ("README.md", readme_job),
    "estimate-answer": ("docs/estimate.md", estimate_answer),
}


def _regions(text: str) -> Iterator[re.Match[str]]:
    return _REGION.finditer(text)


def rendered(root: Path, figures: dict[str, Any]) -> dict[str, str]:
    """Each file holding a region, as it reads with every region drawn from `figures`."""
    out: dict[str, str] = {}
    for name, (path, draw) in REGIONS.items():
        text = out.get(path) or (root / path).read_text()
        found = [m for m in _regions(text) if m.group("name") == name]
        if len(found) != 1:
            raise ValueError(f"{path}: {len(found)} regions named {name!r} (one expected)")
        match = found[0]
        out[path] = text[:match.start("body")] + draw(figures) + text[match.end("body"):]
    return out


def differences(root: Path, figures: dict[str, Any]) -> list[str]:
    """Where the docs under `root` differ from the figures: one line per region that does not read as drawn."""
    problems = []
    try:
        drawn_files = rendered(root, figures)
    except ValueError as error:  # a marker lost or doubled
        return [str(error)]
    for path, want in drawn_files.items():
        have = (root / path).read_text()
        drawn = {m.group("name"): m.group("body") for m in _regions(want)}
        for match in _regions(have):
            if match.group("name") in drawn and match.group("body") != drawn[match.group("name")]:
                problems.append(f"{path}: region {match.group('name')!r} differs from {FIGURES} "
                                f"(typed by hand, or the figures changed): run `make docs`")
        if have != want and not problems:
            problems.append(f"{path}: differs from {FIGURES}: run `make docs`")
    return problems


def moved(stored: dict[str, Any], fresh: dict[str, Any], tolerance: float = TOLERANCE) -> list[str]:
    """The figures of a new run that lie further than `tolerance` (relative) from the stored ones."""
    return [f"{where}: stored {a:,.6g}, now {b:,.6g} ({(b - a) / a:+.1%})"
            for where, a, b in _pairs(stored, fresh) if abs(b - a) > tolerance * abs(a)]


def largest_move(stored: dict[str, Any], fresh: dict[str, Any]) -> str:
    where, a, b = max(_pairs(stored, fresh), key=lambda pair: abs(pair[2] - pair[1]) / (abs(pair[1]) or 1))
    return f"{where} {(b - a) / (a or 1):+.2%}"


def _pairs(stored: dict[str, Any], fresh: dict[str, Any]) -> Iterator[tuple[str, float, float]]:
    """Every number of the stored figures with its counterpart in the fresh ones (the console text aside: its
    figures are the others, rounded)."""
    def pairs(a: Any, b: Any, where: str) -> Iterator[tuple[str, float, float]]:
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a.keys() | b.keys():
                yield from pairs(a.get(key), b.get(key), f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list) and where != ".console":
            if len(a) != len(b):
                yield where, len(a), len(b)
            for i, (x, y) in enumerate(zip(a, b, strict=False)):
                yield from pairs(x, y, f"{where}[{i}]")
        elif isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
            yield where, float(a), float(b)
    return pairs(stored, fresh, "")


# -- the command -------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.docs_figures", description=__doc__.split("\n\n")[0])
    way = parser.add_mutually_exclusive_group()
    way.add_argument("--render", action="store_true", help="rewrite the docs from the stored figures; run nothing")
    way.add_argument("--check", action="store_true", help="exit 1 if the docs differ from the stored figures")
    way.add_argument("--compare", action="store_true",
                     help=f"run the estimate; exit 1 if a figure moved more than {TOLERANCE:.0%} from the stored one")
    args = parser.parse_args(argv)
    path = REPO / FIGURES
    if args.check:
        problems = differences(REPO, orjson.loads(path.read_bytes()))
        print("\n".join(problems) or "the docs carry the stored figures")
        return 1 if problems else 0
    if args.compare:
        before, now = orjson.loads(path.read_bytes()), run_estimate()
        problems = moved(before, now)
        print("\n".join(problems) or f"every figure within {TOLERANCE:.0%} of {FIGURES}; the largest move: "
              f"{largest_move(before, now)}")
        return 1 if problems else 0
    if not args.render:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(run_estimate(), option=orjson.OPT_INDENT_2) + b"\n")
    for name, text in rendered(REPO, orjson.loads(path.read_bytes())).items():
        (REPO / name).write_text(text)
        print(f"wrote {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
