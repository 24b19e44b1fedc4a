"""The table of docs/export.md: each export format read by the trainers' own data code, measured.

    python -m tests.engines.trainer_table [--chat-template qwen3.6|qwen3] [--export-repo DIR] [--work DIR]

Makes the two simulated runs of tests/engines/trainer_checks.py (the simulated fleet playing
`--chat-template`'s model, its template in the tiny tokenizer), exports each in every format with
`python -m client.export` of `--export-repo` (default: this checkout; give a worktree of an older commit to
measure that commit's export on the same runs), feeds each file to SpecForge 0.2.0 and speculators 0.9.0
(tests/engines/trainers.py), and prints one markdown row per format, run and `--rows`: rows written, rows the
trainer loaded, and the rows whose trainer tokens and loss mask are the server's (judged by
`trainer_checks.judge`). SpecForge reads a `specforge` file with the setting its export says the file needs
(`data.train_only_last_turn`, the report's `train_only_last_turn`; an export that says nothing: without it),
as a user following the export's summary would run it; the table's `SpecForge run with` column names it.
`specforge` rows are exported with `--allow-template-mismatch`, so an older export that wrote every row is
measured on every row; the current one leaves out the rows SpecForge cannot
reproduce (replies that did not end by themselves) whatever the flag, and the table says how many.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from client.export.render import ChatTokenizer
from simulator.config import DEFAULT_CHAT_TEMPLATE
from simulator.qwen36 import TEMPLATES
from simulator.tiny_tokenizer import tiny_tokenizer_dir as template_tokenizer_dir
from tests.conftest import REPO
from tests.engines.trainer_checks import judge, make_runs, server_rows
from tests.engines.trainers import TrainerError, specforge_conversations, specforge_tokenized, speculators_rows

CASES = (("specforge-tokenized", "last", "turn"), ("specforge-tokenized", "all", "turn"),
         ("speculators", "last", "turn"), ("speculators", "all", "turn"),
         ("specforge", "last", "turn"), ("specforge", "all", "turn"), ("specforge", "all", "conversation"))


def _export(repo: Path, run: Path, out: Path, fmt: str, rows: str, tokenizer: Path) -> dict[str, Any]:
    extra = ["--allow-template-mismatch", "--rows", rows] if fmt == "specforge" else []
    done = subprocess.run([sys.executable, "-m", "client.export", str(run), "--tokenizer", str(tokenizer),
                           "--format", fmt, "--out", str(out), "--json", *extra],
                          cwd=repo, capture_output=True, text=True, timeout=600, check=False)
    report: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    report["exit"] = done.returncode
    return report


def measure(repo: Path, runs: dict[str, Path], work: Path, tokenizer: Path) -> list[str]:
    tok = ChatTokenizer.load(tokenizer)
    lines = ["| format | run | rows | written | left out by the export | SpecForge run with | trainer loaded | "
             "trained exactly on the server's tokens |", "|---|---|---|---|---|---|---|---|"]
    for fmt, turns, rows in CASES:
        out = work / f"{fmt}-{turns}-{rows}.jsonl"
        report = _export(repo, runs[turns], out, fmt, rows, tokenizer)
        written = len(out.read_text().splitlines()) if out.is_file() else 0
        left = report.get("unreproducible", 0) + report.get("dropped_loops", 0)
        last_only = bool(report.get("train_only_last_turn"))
        setting = "train_only_last_turn: true" if last_only else "-"
        try:
            if fmt == "specforge":
                trained = specforge_conversations(out, tokenizer, 1 << 20, train_only_last_turn=last_only)
            elif fmt == "speculators":
                trained = speculators_rows(out, tokenizer, 1 << 20)
            else:
                trained = specforge_tokenized(out, tokenizer, 1 << 20)
        except TrainerError as exc:
            lines.append(f"| {fmt} | --turns {turns} | {rows} | {written} | {left} | {setting} | fails: "
                         f"{exc.exception} | - |")
            continue
        problems = judge(trained, server_rows(runs[turns]), tok)
        exact = len(trained) - len({p.split(":")[0] for p in problems if not p.startswith("a row")}) - sum(
            p.startswith("a row") for p in problems)
        share = f"{exact} of {len(trained)} ({exact / len(trained):.1%})" if trained else "-"
        lines.append(f"| {fmt} | --turns {turns} | {rows} | {written} | {left} | {setting} | {len(trained)} | "
                     f"{share} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export-repo", type=Path, default=REPO, help="the checkout whose client.export is measured")
    parser.add_argument("--work", type=Path, default=None, help="where the runs and files go (default: a temp dir)")
    parser.add_argument("--chat-template", choices=list(TEMPLATES), default=DEFAULT_CHAT_TEMPLATE,
                        help="the model the simulated fleet plays, and so the template of the tokenizer every "
                             "row is exported and trained with (default: %(default)s)")
    args = parser.parse_args()
    tokenizer = template_tokenizer_dir(chat_template=args.chat_template)
    work = args.work or Path(tempfile.mkdtemp(prefix="trainer-table-"))
    runs_dir = work / "runs"
    runs = {"last": runs_dir / "last", "all": runs_dir / "all"}
    if not all((run / "segments").is_dir() for run in runs.values()):
        runs = make_runs(runs_dir, args.chat_template)
    print("\n".join(measure(args.export_repo.resolve(), runs, work, tokenizer)))


if __name__ == "__main__":
    main()
