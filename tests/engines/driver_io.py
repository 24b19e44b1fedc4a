"""The plumbing both trainer drivers share (specforge_driver.py, speculators_driver.py): standard library only.

This module owns how a driver runs a job and reports it, not what a job does: offline settings, keeping the
rows apart from whatever the trainer prints, the error line, and the serve loop. It runs inside a trainer's
venv, next to the drivers (their directory is first on ``sys.path``), and imports nothing of the project.

A job is one driver command line (``INPUT TOKENIZER_DIR MAX_LENGTH ... --out FILE``). Exit codes: 0 rows
written, 3 the trainer raised (its last stderr line is ``@trainer-error {json}`` with ``type``, ``bases``,
``message``), 2 a bad command line.

``--serve`` runs jobs one after another in one process, so that torch, transformers and datasets are
imported once per test session instead of once per call (about 5 s each on two busy cores): a job is one
JSON line on stdin (the command line as a list); its answer is one JSON line on the original stdout,
``{"code": N, "stderr": "..."}``, with everything the job printed (file descriptors 1 and 2 both) captured
in ``stderr``. Between jobs, the warnings' "once" registries are reset, so a job warns as a fresh process
would, and ``datasets``' cache directory is the job's own, so no job reads another's cached tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable

ERROR_MARKER = "@trainer-error "
TRAINER_ERROR_EXIT = 3
USAGE_EXIT = 2

Job = Callable[[list[str], str], int]  # (command line, the job's scratch directory) -> exit code
_rows_fd: int | None = None  # one_shot: the original stdout, kept for the rows


def offline(scratch: str) -> None:
    """Nothing may reach a hub; caches go to the scratch directory."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[name] = "1"
    os.environ["HF_HOME"] = os.path.join(scratch, "hf-home")
    os.environ["HF_DATASETS_CACHE"] = os.path.join(scratch, "hf-datasets")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")


def rows_job(prepare: Callable[[argparse.Namespace, str], list[dict[str, object]]],
             arguments: Callable[[list[str]], argparse.Namespace]) -> Job:
    """A driver's job: its command line parsed, its rows prepared by the trainer's code and written; the
    trainer's own failure is the result (exit 3 with the error line), not a crash."""

    def job(argv: list[str], scratch: str) -> int:
        args = arguments(argv)
        try:
            rows = prepare(args, scratch)
        except Exception as exc:
            report(exc)
            return TRAINER_ERROR_EXIT
        write_rows(rows, args.out)
        return 0

    return job


def main(argv: list[str], *, job: Job, check: Callable[[], int], import_trainer: Callable[[], None]) -> int:
    """`--check` (is the trainer installed), `--serve` (jobs from stdin), or one job from the command line."""
    if argv == ["--check"]:
        return check()
    if argv == ["--serve"]:
        return serve(job, import_trainer)
    return one_shot(job, argv)


def report(exc: BaseException) -> None:
    """The trainer raised: its class and message for a person, then the line the test side reads."""
    print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
    info = {"type": type(exc).__name__, "bases": [cls.__name__ for cls in type(exc).__mro__], "message": str(exc)}
    print(ERROR_MARKER + json.dumps(info), file=sys.stderr, flush=True)


def write_rows(rows: list[dict[str, object]], out: str | None) -> None:
    """To the --out file, or to stdout, which holds the rows alone (see `one_shot`)."""
    if out is not None:
        with open(out, "w", encoding="utf-8") as stream:
            stream.writelines(json.dumps(row) + "\n" for row in rows)
        return
    if _rows_fd is None:
        raise SystemExit("--out is required with --serve")
    with os.fdopen(os.dup(_rows_fd), "w", encoding="utf-8") as stream:
        stream.writelines(json.dumps(row) + "\n" for row in rows)


def _fresh_job_state(scratch: str) -> None:
    warnings.resetwarnings()  # also invalidates every module's "already warned" registry
    if not sys.warnoptions:
        warnings.simplefilter("default")
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_DATASETS_CACHE = os.path.join(scratch, "hf-datasets")  # type: ignore[attr-defined]


def _run(job: Job, argv: list[str], scratch: str) -> int:
    try:
        return job(argv, scratch)
    except SystemExit as exc:  # argparse, or write_rows
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return USAGE_EXIT


def one_shot(job: Job, argv: list[str]) -> int:
    """Run one job. Without --out, file descriptor 1 is kept for the rows alone and pointed at stderr, so
    that whatever the trainer prints (from C code too) does not mix with them."""
    global _rows_fd
    sys.stdout.flush()
    _rows_fd = os.dup(1)
    os.dup2(2, 1)
    with tempfile.TemporaryDirectory(prefix="trainer-driver-") as scratch:
        offline(scratch)
        return _run(job, argv, scratch)


def serve(job: Job, prepare: Callable[[], None]) -> int:
    """Run jobs from stdin until it closes (see the module's docstring). `prepare` imports the trainer."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    real_stderr = os.dup(2)
    os.dup2(2, 1)
    with answers, tempfile.TemporaryDirectory(prefix="trainer-driver-") as root:
        offline(root)
        prepare()
        for number, line in enumerate(sys.stdin):
            argv = json.loads(line)
            scratch = os.path.join(root, f"job-{number}")
            os.mkdir(scratch)
            capture = os.path.join(scratch, "stderr.txt")
            with open(capture, "w+b") as captured:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(captured.fileno(), 1)
                os.dup2(captured.fileno(), 2)
                try:
                    _fresh_job_state(scratch)
                    code = _run(job, argv, scratch)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os.dup2(real_stderr, 1)
                    os.dup2(real_stderr, 2)
            with open(capture, encoding="utf-8", errors="replace") as text:
                answers.write(json.dumps({"code": code, "stderr": text.read()}) + "\n")
            answers.flush()
    return 0
