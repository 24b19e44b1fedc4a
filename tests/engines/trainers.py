"""Runs the drafter trainers' own data code (SpecForge 0.2.0, speculators 0.9.0) on a file, for tests.

This module owns the main venv's side of the trainers: where their venvs are (``bash tests/setup/trainers.sh``
creates ``.venv-specforge`` and ``.venv-speculators`` in the repo root; ``$REGEN_SWARM_SPECFORGE_VENV`` and
``$REGEN_SWARM_SPECULATORS_VENV`` name others), how their drivers are run (tests/engines/specforge_driver.py
and speculators_driver.py, each in its trainer's venv, as a subprocess, offline) and what comes back: the rows
the trainer keeps, ``{"input_ids": [...], "loss_mask": [...]}`` (speculators adds ``seq_len``), in the
trainer's order, or a ``TrainerError`` with the trainer's exception class and message. It imports nothing
of the trainers: the drivers' docstrings say which of their functions run, with which arguments. Each
driver runs in ``--serve`` mode, one process per trainer for the whole test session, so that a call costs
the trainer's work and not its imports (about 5 s a process on two busy cores).

    rows = specforge_tokenized(path, tokenizer_dir, max_length=4096)
    rows = specforge_conversations(path, tokenizer_dir, 4096, train_only_last_turn=True)
    rows = speculators_rows(f"hf:{folder}", tokenizer_dir, 4096)

Neither trainer keeps a row's id, and both shuffle conversation rows (SpecForge) or every row (speculators)
with a fixed seed: compare rows as a multiset, or one row per file.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINES_DIR = Path(__file__).resolve().parent
SETUP_HINT = "run `bash tests/setup/trainers.sh` to create it"
ERROR_MARKER = "@trainer-error "  # the drivers' last stderr line on a trainer exception
TRAINER_ERROR_EXIT = 3  # the drivers' exit code for it
TIMEOUT_S = 300.0  # for one job: importing torch and datasets takes seconds, a small file a few more
# Variables of the main venv that must not reach a trainer's interpreter.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

Row = dict[str, Any]


@dataclass(frozen=True)
class Trainer:
    name: str
    venv_env_var: str
    default_venv: Path
    driver: Path


SPECFORGE = Trainer("specforge", "REGEN_SWARM_SPECFORGE_VENV", REPO_ROOT / ".venv-specforge",
                    ENGINES_DIR / "specforge_driver.py")
SPECULATORS = Trainer("speculators", "REGEN_SWARM_SPECULATORS_VENV", REPO_ROOT / ".venv-speculators",
                      ENGINES_DIR / "speculators_driver.py")
TRAINERS = (SPECFORGE, SPECULATORS)


class TrainerMissing(Exception):
    """A trainer's venv is not there; the message says how to make it."""


class TrainerDriverError(RuntimeError):
    """The driver failed outside the trainer's code (a missing package, a bad argument, a timeout)."""


class TrainerError(Exception):
    """The trainer's own code raised: ``exception`` is its class name, ``bases`` the names of its MRO (so a
    test may ask for ``ValueError`` and accept a subclass), ``message`` its text, ``stderr`` all it printed."""

    def __init__(self, trainer: str, exception: str, bases: list[str], message: str, stderr: str) -> None:
        super().__init__(f"{trainer}: {exception}: {message}")
        self.trainer = trainer
        self.exception = exception
        self.bases = bases
        self.message = message
        self.stderr = stderr

    def is_a(self, name: str) -> bool:
        return name in self.bases


@dataclass(frozen=True)
class DriverRun:
    rows: list[Row]
    stderr: str  # what the trainer printed and warned


def trainer_venv(trainer: Trainer) -> Path:
    return Path(os.environ.get(trainer.venv_env_var) or trainer.default_venv)


def trainer_python(trainer: Trainer) -> Path:
    """The trainer venv's python; raises TrainerMissing (with the set-up hint) if it is not there."""
    python = trainer_venv(trainer) / "bin" / "python"
    if not python.exists():
        raise TrainerMissing(f"the {trainer.name} venv is missing ({python} not found): {SETUP_HINT}")
    return python


def _environment() -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in DROPPED_ENV}
    env.update(OFFLINE_ENV)
    return env


def _trainer_error(trainer: Trainer, stderr: str) -> TrainerError | None:
    for line in reversed(stderr.splitlines()):
        if line.startswith(ERROR_MARKER):
            info = json.loads(line[len(ERROR_MARKER):])
            return TrainerError(trainer.name, str(info["type"]), [str(b) for b in info["bases"]],
                                str(info["message"]), stderr)
    return None


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


class _ServingDriver:
    """One trainer's driver in ``--serve`` mode: jobs in on stdin, one answer line each on stdout (see
    tests/engines/driver_io.py). Started on first use, kept for the process (torch and datasets are imported
    once), stopped at exit; a driver that died is started again on the next job."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.proc: subprocess.Popen[str] | None = None
        self.workdir = tempfile.TemporaryDirectory(prefix=f"{trainer.name}-driver-")
        self.log = Path(self.workdir.name) / "driver.log"  # what it prints outside a job
        atexit.register(self.close)

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            with self.log.open("a") as log:
                self.proc = subprocess.Popen([str(trainer_python(self.trainer)), str(self.trainer.driver), "--serve"],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                             cwd=self.workdir.name, env=_environment())
        return self.proc

    def _died(self, proc: subprocess.Popen[str], what: str) -> TrainerDriverError:
        proc.kill()
        proc.wait()
        self.proc = None
        return TrainerDriverError(f"the {self.trainer.name} driver {what} (exit {proc.returncode}):\n"
                                  f"{_tail(self.log.read_text(errors='replace'))}")

    def call(self, args: list[str], timeout: float = TIMEOUT_S) -> tuple[int, str]:
        """Run one job (a driver command line); its exit code and what it printed."""
        from tests.engines.start_time import server_start  # pytest: only in the test process

        starting = self.proc is None or self.proc.poll() is not None
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(args) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            raise self._died(proc, "exited before the job") from None
        # A new driver's first answer waits for torch's and datasets' import, minutes on a loaded CPU: that is
        # its start, bounded by `timeout` and not by the time limit of the test that happens to run it.
        with server_start() if starting else contextlib.nullcontext():
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            raise self._died(proc, "answered nothing" if ready else f"took more than {timeout:.0f} s")
        answer = json.loads(line)
        return int(answer["code"]), str(answer["stderr"])

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None
        self.workdir.cleanup()


_DRIVERS: dict[str, _ServingDriver] = {}


def run_driver(trainer: Trainer, args: list[str]) -> DriverRun:
    """Run the trainer's driver on `args` (its command line without --out); the rows it keeps and what it
    printed. Raises TrainerMissing, TrainerError (the trainer raised) or TrainerDriverError (anything else)."""
    trainer_python(trainer)  # TrainerMissing before anything starts
    driver = _DRIVERS.get(trainer.name)
    if driver is None:
        driver = _DRIVERS[trainer.name] = _ServingDriver(trainer)
    with tempfile.TemporaryDirectory(prefix=f"{trainer.name}-rows-") as tmp:
        out = Path(tmp) / "rows.jsonl"
        code, stderr = driver.call([*args, "--out", str(out)])
        if code == TRAINER_ERROR_EXIT:
            error = _trainer_error(trainer, stderr)
            if error is not None:
                raise error
        if code != 0:
            raise TrainerDriverError(f"{trainer.name} driver: exit {code} for {args}\n{_tail(stderr)}")
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    return DriverRun(rows=rows, stderr=stderr)


def _path(path: Path | str) -> str:
    """A file path, absolute (the driver runs in its own directory); an `hf:...` spec as it is."""
    if isinstance(path, str) and path.startswith("hf:"):
        return path
    return str(Path(path).resolve())


def specforge_run(path: Path | str, tokenizer_dir: Path, max_length: int, *, conversation: bool,
                  train_only_last_turn: bool = False, chat_template: str = "qwen3.5") -> DriverRun:
    args = [_path(path), str(tokenizer_dir), str(max_length),
            "--path", "conversation" if conversation else "tokenized", "--chat-template", chat_template]
    if train_only_last_turn:
        args.append("--train-only-last-turn")
    return run_driver(SPECFORGE, args)


def specforge_tokenized(path: Path | str, tokenizer_dir: Path, max_length: int) -> list[Row]:
    """SpecForge's DFlash prompts from `path` given as `data.prompts_path`."""
    return specforge_run(path, tokenizer_dir, max_length, conversation=False).rows


def specforge_conversations(path: Path | str, tokenizer_dir: Path, max_length: int,
                            train_only_last_turn: bool = False, chat_template: str = "qwen3.5") -> list[Row]:
    """SpecForge's DFlash prompts from `path` given as `data.train_data_path` (rendered with the tokenizer's
    chat template, masked by `chat_template`'s assistant header)."""
    return specforge_run(path, tokenizer_dir, max_length, conversation=True,
                         train_only_last_turn=train_only_last_turn, chat_template=chat_template).rows


def speculators_run(path: Path | str, tokenizer_dir: Path, max_length: int, *,
                    minimum_valid_tokens: int | None = None, max_samples: int | None = None,
                    seed: int = 0) -> DriverRun:
    args = [_path(path), str(tokenizer_dir), str(max_length), "--seed", str(seed)]
    if minimum_valid_tokens is not None:
        args += ["--minimum-valid-tokens", str(minimum_valid_tokens)]
    if max_samples is not None:
        args += ["--max-samples", str(max_samples)]
    return run_driver(SPECULATORS, args)


def speculators_rows(path: Path | str, tokenizer_dir: Path, max_length: int, *,
                     minimum_valid_tokens: int | None = None, max_samples: int | None = None,
                     seed: int = 0) -> list[Row]:
    """speculators' prepare-data rows from `path` (one `--data` value: a .json/.jsonl file, a folder of them,
    or `hf:<folder or id>`), as `--seq-length max_length`."""
    return speculators_run(path, tokenizer_dir, max_length, minimum_valid_tokens=minimum_valid_tokens,
                           max_samples=max_samples, seed=seed).rows
