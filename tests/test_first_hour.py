"""The first hour of a new user, as a table: each misuse a new user made on a fresh clone, the message that
now answers it and the exit code. Those refused at the command line start no server and write nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO, make_prompts

SAMPLE = str(REPO / "prompts" / "sample.jsonl")


@dataclass(frozen=True)
class Misuse:
    name: str
    argv: Callable[[Path], list[str]]  # the command after `python`, given a scratch directory
    code: int
    says: tuple[str, ...]
    starts_servers: bool = False


def _run(*args: str) -> Callable[[Path], list[str]]:
    return lambda t: ["-m", "client.run", *(a.format(t=t, sample=SAMPLE) for a in args)]


def _sharegpt(t: Path) -> list[str]:
    (t / "chats.jsonl").write_bytes(b"".join(orjson.dumps(
        {"id": f"c{i}", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}) + b"\n"
        for i in range(3)))
    return ["-m", "client.run", "--simulate", "4", "--prompts", str(t / "chats.jsonl"), "--out", str(t / "out")]


def _openai_batch(t: Path) -> list[str]:
    line = {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    (t / "batch.jsonl").write_bytes(orjson.dumps(line) + b"\n")
    return ["-m", "client.run", "--simulate", "4", "--prompts", str(t / "batch.jsonl"), "--out", str(t / "out")]


def _busy_folder(t: Path) -> list[str]:
    (t / "mine").mkdir()
    for name in ("notes.txt", "data.csv", "photo.jpg"):
        (t / "mine" / name).write_text("the user's own file")
    return ["-m", "client.run", "--simulate", "4", "--prompts", SAMPLE, "--out", str(t / "mine")]


def _all_invalid(t: Path) -> list[str]:
    (t / "bad.jsonl").write_text('{"id": 1, "messages": []}\nnot json\n{"id": "x", "messages": "hi"}\n')
    return ["-m", "client.run", "--simulate", "1", "--prompts", str(t / "bad.jsonl"), "--out", str(t / "out")]


def _no_ids(t: Path) -> list[str]:
    prompts = make_prompts(t / "p.jsonl", 4)
    return ["-m", "client.run", "--simulate", "1", "--prompts", str(prompts), "--out", str(t / "out"),
            "--max-tokens", "20", "--sim-arg=--tokenizer", "--sim-arg=none"]


def _export_by_model_name(t: Path) -> list[str]:
    (t / "run" / "segments").mkdir(parents=True)
    return ["-m", "client.export", str(t / "run"), "--tokenizer", "Qwen/Qwen3.6-27B", "--out", str(t / "x.parquet")]


MISUSES = [
    Misuse("an option with underscores", _run("--simulate", "4", "--prompts", "{sample}", "--out", "{t}/out",
                                              "--max_tokens", "100"),
           2, ("python -m client.run: error: unknown option --max_tokens; did you mean --max-tokens?",
               "python -m client.run --help lists every option")),
    Misuse("a misspelt required option", _run("--simulate", "4", "--promts", "{sample}", "--out", "{t}/out"),
           2, ("unknown option --promts; did you mean --prompts?",)),
    Misuse("an abbreviated option", _run("--simulate", "4", "--prompts", "{sample}", "--out", "{t}/out",
                                         "--gpu", "4"),
           2, ("unknown option --gpu; did you mean --gpus?",)),
    Misuse("a misspelt prompt file", _run("--simulate", "4", "--prompts", "{t}/sampel.jsonl", "--out", "{t}/out"),
           2, ("sampel.jsonl: no such file or directory",)),
    Misuse("an --out full of the user's files", _busy_folder,
           2, ("holds 3 entries (data.csv, notes.txt, photo.jpg) and no run",
               "give a new or empty directory, or pass --allow-nonempty-out")),
    Misuse("ShareGPT records as prompts", _sharegpt,
           2, ("holds ShareGPT conversations", "Convert it first: python -m prompts.from_sharegpt")),
    Misuse("OpenAI Batch API lines as prompts", _openai_batch,
           2, ("holds OpenAI Batch API requests", "Convert it first: python -m prompts.from_openai")),
    Misuse("python outside the venv", lambda t: ["-S", "-m", "client.run", "--simulate", "4", "--prompts", SAMPLE,
                                                 "--out", str(t / "out")],
           2, ("python -m client.run cannot start", "Activate the project's venv first (. .venv/bin/activate)")),
    Misuse("a model name as the export's tokenizer", _export_by_model_name,
           2, ("--tokenizer Qwen/Qwen3.6-27B: no such file or directory", "or `sim` for a run of the simulated")),
    Misuse("no valid record at all", _all_invalid,
           3, ("error: bad input: nothing was generated: none of the 3 record(s)",), starts_servers=True),
    Misuse("servers that give no token ids under --token-ids auto", _no_ids,
           0, ("--token-ids auto: the records will carry no token ids (none of the 1 answering endpoint(s)",
               "note: 4 of this run's 4 record(s) came back without token ids"), starts_servers=True),
]


@pytest.mark.parametrize("misuse", MISUSES, ids=[m.name for m in MISUSES])
def test_a_misuse_is_answered_with_what_to_do(tmp_path: Path, misuse: Misuse) -> None:
    argv = misuse.argv(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=180, check=False, env={**os.environ, "NO_COLOR": "1"})
    assert proc.returncode == misuse.code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for text in misuse.says:
        assert text in proc.stderr, proc.stderr[-3000:]
    if not misuse.starts_servers:
        assert "simulated server" not in proc.stderr, "refused before any server started"
        assert len(proc.stderr.splitlines()) <= 2, proc.stderr
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, "nothing written"
