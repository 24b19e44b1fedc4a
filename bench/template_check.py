"""The `specforge` export's template check per row, before and after, in the same run on the same rows.

The rows are a simulated run's (`client.run --simulate 2`, the tiny Qwen-style tokenizer with the Qwen3.6
template, `--token-ids on`, `--turns all`, long replies: `--mean-tokens 700 --max-tokens 3000`, the sample
prompts with their tools), or `--run DIR`'s. Measured:

- `before`: the check as it was, each loss-mask span's prefix encoded whole as SpecForge does
  (`trainer_row(literal=True)`) and the ids and masks compared in Python loops (reproduced here);
- `after`: the check now, the spans read off the row's one encoding (`ChatTokenizer.encode_prefixes`);
- the whole export (`client.export.build.export`, `--format specforge`) with `--jobs 1` and `--jobs 2`, of
  the rows `--copies` times over under ids of their own (the workers start once an export).

Both checks must give the same verdict on every row, or the benchmark fails. CPU time is this process's
(the check alone); wall time is what a person waits (the export's workers' CPU is not this process's).

    python -m bench.template_check [--run DIR] [--repeat 3] [--copies 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.report import emit
from client.export import fidelity
from client.export.build import ExportOptions, export
from client.export.render import ChatTokenizer
from client.export.rows import Sample, Turn
from client.export.specforge_parse import TrainerRow
from client.results.reader import iter_records
from simulator.tiny_tokenizer import tiny_tokenizer_dir

REPO = Path(__file__).resolve().parent.parent
JOB_ROWS = 914_000  # the job's rows, for the hours the check takes at each rate


def make_run(out: Path) -> Path:
    command = [sys.executable, "-m", "client.run", "--plain", "--simulate", "2", "--sim-speed", "2000",
               f"--sim-arg=--tokenizer={tiny_tokenizer_dir()}", "--sim-arg=--mean-tokens=700", "--token-ids", "on",
               "--max-tokens", "3000", "--turns", "all", "--prompts", str(REPO / "prompts" / "sample.jsonl"),
               "--out", str(out)]
    subprocess.run(command, cwd=REPO, capture_output=True, check=True, timeout=900)
    return out


def copied(run: Path, out: Path, copies: int) -> Path:
    """The run's records `copies` times over, each copy under ids of its own: enough rows for the export's
    worker processes to start once and then work (their start is paid once a run, not once a row)."""
    lines = []
    for copy in range(copies):
        for _, record in iter_records(str(run)):
            record["id"] = f"c{copy}-{record['id']}"
            if isinstance(record.get("conversation_id"), str):
                record["conversation_id"] = f"c{copy}-{record['conversation_id']}"
            lines.append(orjson.dumps(record))
    (out / "segments").mkdir(parents=True)
    (out / "segments" / "bench-0of1-copies-00001.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return out


def samples(run: Path, tok: ChatTokenizer) -> list[Sample]:
    """Every record with the server's ids that ended by itself: what the export checks."""
    out = []
    for _, record in iter_records(str(run)):
        if isinstance(record.get("prompt_token_ids"), list) and record.get("finish_reason") in ("stop", "tool_calls"):
            turn = Turn(record, record["prompt_token_ids"], record["completion_token_ids"],
                        record.get("tools") or None, str(record["id"]))
            out.append(Sample(str(record["id"]), (turn,), tok.content_format))
    return out


def _old_first_difference(server: list[int], trainer: list[int]) -> int:
    for index, token in enumerate(server):
        if index >= len(trainer) or trainer[index] != token:
            return index
    return -1


def _old_verdict_for(server: list[int], prompt_length: int, row: TrainerRow, ends_turn: bool) -> tuple[int, str]:
    """The comparison as it was before the check was made fast (Python loops over every token)."""
    position = _old_first_difference(server, row.input_ids)
    if position >= 0:
        return position, ""
    supervised_prompt = next((i for i in range(prompt_length) if row.loss_mask[i]), -1)
    if supervised_prompt >= 0:
        return supervised_prompt, "the trainer supervises a token of the prompt, which the model did not generate here"
    unsupervised = next((i for i in range(prompt_length, len(server)) if not row.loss_mask[i]), -1)
    if unsupervised >= 0:
        return unsupervised, "the trainer gives a generated token no loss"
    beyond = next((i for i in range(len(server), len(row.input_ids)) if row.loss_mask[i]), -1)
    if beyond >= 0 and not ends_turn:
        return beyond, "the trainer supervises tokens past the reply's last one, which the model never generated"
    return -1, ""


@contextmanager
def old_comparison() -> Iterator[None]:
    now = fidelity._verdict_for
    fidelity._verdict_for = _old_verdict_for
    try:
        yield
    finally:
        fidelity._verdict_for = now


def timed(check: Callable[[], list[fidelity.Verdict]], repeat: int) -> tuple[float, float, list[fidelity.Verdict]]:
    """(CPU s, wall s, verdicts) of the best of `repeat` passes (the least disturbed by the machine's load)."""
    best: tuple[float, float, list[fidelity.Verdict]] | None = None
    for _ in range(repeat):
        cpu, wall = time.process_time(), time.perf_counter()
        verdicts = check()
        got = (time.process_time() - cpu, time.perf_counter() - wall, verdicts)
        best = got if best is None or got[0] < best[0] else best
    assert best is not None
    return best


@dataclass(frozen=True, slots=True)
class ExportTime:
    wall_s: float
    main_cpu_s: float  # this process: reading, the counts, the writer (and the check with --jobs 1)
    workers_cpu_s: float  # the worker processes' (waited for when the pool stops)
    rows: int


def export_time(run: Path, tok: ChatTokenizer, jobs: int, work: Path, repeat: int) -> ExportTime:
    """The best wall time of `repeat` whole exports, with the CPU time of this process and of its workers."""
    best: ExportTime | None = None
    for _ in range(repeat):
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        report = export(str(run), tok, work / f"jobs{jobs}.jsonl", ExportOptions(fmt="specforge", jobs=jobs))
        wall = time.perf_counter() - start
        own_after, children_after = (resource.getrusage(resource.RUSAGE_SELF),
                                     resource.getrusage(resource.RUSAGE_CHILDREN))
        got = ExportTime(wall, _cpu(own_after) - _cpu(own), _cpu(children_after) - _cpu(children),
                         report.template.checked)
        best = got if best is None or got.wall_s < best.wall_s else best
    assert best is not None
    return best


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _row(name: str, seconds: float, rows: int, baseline_per_row: float) -> str:
    per_row = seconds / rows
    hours = JOB_ROWS * per_row / 3600
    return f"| {name} | {1e3 * per_row:.2f} | {rows / seconds:,.0f} | {hours:.1f} | {baseline_per_row / per_row:.2f}x |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a run with --token-ids on (default: a simulated one, made here)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--copies", type=int, default=8, help="the run's rows this many times over for the exports")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        run = args.run or make_run(work / "run")
        rows = samples(run, tok)
        tokens = sum(len(s.last.prompt) + len(s.last.completion) for s in rows)
        with old_comparison():
            before_cpu, before_wall, before = timed(lambda: [fidelity.check(s, tok, literal=True) for s in rows],
                                                    args.repeat)
        after_cpu, after_wall, after = timed(lambda: [fidelity.check(s, tok) for s in rows], args.repeat)
        if before != after:
            print("error: the two checks differ", file=sys.stderr)
            return 1
        many = copied(run, work / "copies", args.copies)
        one = export_time(many, tok, 1, work, args.repeat)
        two = export_time(many, tok, 2, work, args.repeat)
    n = len(rows)
    load = os.getloadavg()[0]
    lines = [f"{n:,} rows checked ({tokens / n:,.0f} tokens a row on average, "
             f"{sum(v.matched for v in after):,} matched), best of {args.repeat}, {os.cpu_count()} cores, load "
             f"average {load:.1f} at the end:", "",
             f"| path | ms a row | rows/s | hours for {JOB_ROWS:,} rows | vs before |", "|---|---:|---:|---:|---:|",
             _row("check before, CPU", before_cpu, n, before_cpu / n),
             _row("check after, CPU", after_cpu, n, before_cpu / n),
             _row("check before, wall", before_wall, n, before_wall / n),
             _row("check after, wall", after_wall, n, before_wall / n),
             _row("export --jobs 1, wall", one.wall_s, one.rows, before_wall / n),
             _row("export --jobs 2, wall", two.wall_s, two.rows, before_wall / n),
             "", f"The exports, of the rows {args.copies} times over ({one.rows:,} checked):", "",
             "| export | wall ms a row | CPU ms a row, this process | CPU ms a row, workers |",
             "|---|---:|---:|---:|",
             *(f"| --jobs {jobs} | {1e3 * t.wall_s / t.rows:.2f} | {1e3 * t.main_cpu_s / t.rows:.2f} | "
               f"{1e3 * t.workers_cpu_s / t.rows:.2f} |" for jobs, t in ((1, one), (2, two)))]
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
