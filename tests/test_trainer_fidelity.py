"""Every export read by the trainers' own data code (SpecForge 0.2.0, speculators 0.9.0, each in its own venv,
tests/setup/trainers.sh), on simulated runs served with the tiny Qwen-style tokenizer: exact ids
(`--token-ids on`), tools, thinking, `--turns last` and `--turns all`, content-part prompts, and replies cut
by `--max-tokens 300` (inside reasoning, content and tool calls).

What is held, per format:
- `specforge-tokenized` (SpecForge `data.prompts_path`) and `speculators` (`prepare-data`): rows in = rows
  out, `input_ids` / `loss_mask` identical to what we wrote and to the server's ids; the rows each trainer
  keeps at several `max_length` values are the project's counts (`--max-length`).
- `specforge` (SpecForge `data.train_data_path`, re-rendered by the trainer with the tokenizer's chat
  template, masked by `qwen3.5`'s assistant header), per turn and per conversation: on every row the
  export writes, SpecForge's own tokens begin with the server's, its loss mask is 0 on the prompt and 1 on
  every generated token, and it supervises nothing past the reply but the template's newline after
  `<|im_end|>`. The rows the trainer could not reproduce (replies cut by max_tokens, loops) are left out
  and counted, never written as a false match.
- Under Qwen3.6's own template (the simulated fleet playing Qwen3.6-27B), the agentic rows (a tool loop's
  earlier assistant turns after the last user message, which the template renders with the `qwen3.5`
  header) are written for `data.train_only_last_turn: true`, which the export states; SpecForge run so
  trains every written row exactly, and run without it, exactly the rows the export counted are wrong.
- The replica the export's template check uses (client.export.specforge_parse) gives exactly SpecForge's
  rows on the same files, so the check judges what the trainer trains on.
- A run under a sampling plan that draws thinking on and off per prompt: the exact-id formats' rows of both
  kinds are read by the trainers as the server's ids and loss mask.
- `parquet` is read by speculators as `hf:<folder>` and refused by SpecForge, as docs/export.md says.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client.export.render import ChatTokenizer
from client.export.specforge_parse import trainer_row
from tests.conftest import REPO, read_results
from tests.engines.trainer_checks import judge, make_mixed_run, make_runs, server_rows
from tests.engines.trainers import (
    TrainerError,
    specforge_conversations,
    specforge_run,
    specforge_tokenized,
    speculators_rows,
)
from tests.tokenizer_fixture import tiny_tokenizer_dir

pytestmark = [pytest.mark.trainers, pytest.mark.usefixtures("specforge_venv", "speculators_venv")]

@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("trainer-runs"))


def export(run: Path, out: Path, fmt: str, *extra: str, tokenizer: Path | None = None) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "client.export", str(run), "--tokenizer",
                           str(tokenizer or tiny_tokenizer_dir()),
                           "--format", fmt, "--out", str(out), "--json", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    report["stderr"] = done.stderr
    return report


def _written(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_runs_hold_every_case(runs: dict[str, Path]) -> None:
    """The cases the trainers are held to are really in the runs (the simulator's replies are seeded)."""
    for run in runs.values():
        records = read_results(run)
        assert all("completion_token_ids" in r for r in records if r["finish_reason"] != "repetition")
        cut = [r for r in records if r["finish_reason"] == "length"]
        assert any(not r["content"] and not r["tool_calls"] for r in cut), "cut while thinking"
        assert any(r["content"] for r in cut), "cut in the answer"
        assert any(r["tool_calls"] for r in records if r["finish_reason"] == "tool_calls")
        assert any(isinstance(r["messages"][-1]["content"], list) for r in records), "content-part prompts"
    assert any(r.get("turn", 1) > 1 for r in read_results(runs["all"]))


@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators"])
@pytest.mark.parametrize("turns", ["last", "all"])
def test_tokenized_rows_load_as_written_and_as_served(runs: dict[str, Path], tmp_path: Path, fmt: str,
                                                      turns: str) -> None:
    out = tmp_path / "rows.jsonl"
    report = export(runs[turns], out, fmt, "--require-exact-ids")
    written = _written(out)
    assert report["rows"] == len(written) > 0
    server = server_rows(runs[turns])
    for line in written:
        assert (line["input_ids"], line["loss_mask"]) == server[line["id"]]
    if fmt == "speculators":
        read = speculators_rows(out, tiny_tokenizer_dir(), 1 << 20)
    else:
        read = specforge_tokenized(out, tiny_tokenizer_dir(), 1 << 20)
    # Rows in = rows out, each as written (speculators shuffles them with its seed; the rows carry no id).
    assert sorted((r["input_ids"], r["loss_mask"]) for r in read) == sorted(
        (w["input_ids"], w["loss_mask"]) for w in written)


@pytest.mark.parametrize("max_length", [200, 512])
@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators"])
def test_the_trainer_keeps_the_rows_the_window_keeps(runs: dict[str, Path], tmp_path: Path, fmt: str,
                                                     max_length: int) -> None:
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    export(runs["last"], whole, fmt)
    report = export(runs["last"], cut, fmt, "--max-length", str(max_length))
    reader = speculators_rows if fmt == "speculators" else specforge_tokenized
    trainer = reader(whole, tiny_tokenizer_dir(), max_length)
    assert len(trainer) == report["rows"]
    assert sorted((r["input_ids"], r["loss_mask"]) for r in trainer) == sorted(
        (w["input_ids"], w["loss_mask"]) for w in _written(cut))


@pytest.mark.parametrize(("turns", "rows"), [("last", "turn"), ("all", "turn"), ("all", "conversation")])
def test_specforge_trains_every_written_row_on_the_server_tokens(runs: dict[str, Path], tmp_path: Path, turns: str,
                                                                 rows: str) -> None:
    """SpecForge run with the setting the export states trains every written row exactly; the runs hold
    agentic rows (Qwen3.6's template, the simulator's default), so the setting is stated, and without it
    SpecForge trains exactly the rows the export counted on prompt turns."""
    out = tmp_path / "conversations.jsonl"
    report = export(runs[turns], out, "specforge", "--rows", rows)
    assert report["written"] and report["template"]["mismatched"] == 0, report["stderr"][-3000:]
    assert report["train_only_last_turn"] is True and report["last_turn_only"] > 0, "agentic rows are in the runs"
    assert "data.train_only_last_turn: true" in report["stderr"]
    written = _written(out)
    trained = specforge_conversations(out, tiny_tokenizer_dir(), 1 << 20, train_only_last_turn=True)
    assert len(trained) == len(written) == report["rows"] > 0
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    server = server_rows(runs[turns])
    assert judge(trained, server, tok) == []
    records = read_results(runs[turns])
    not_ended = sum(r["finish_reason"] not in ("stop", "tool_calls") and r["finish_reason"] != "repetition"
                    for r in records)
    assert report["unreproducible"] == not_ended > 0, "replies cut by max_tokens are left out and counted"
    if rows == "conversation":
        assert report["earlier_turns"] > 0
    wrong = judge(specforge_conversations(out, tiny_tokenizer_dir(), 1 << 20), server, tok)
    assert len(wrong) == report["last_turn_only"]
    assert all(problem.endswith("the loss mask differs from the server's split of prompt and reply")
               for problem in wrong)


@pytest.mark.parametrize("turns", ["last", "all"])
def test_the_replica_renders_exactly_what_specforge_renders(runs: dict[str, Path], tmp_path: Path,
                                                            turns: str) -> None:
    """The template check's replica of SpecForge's parse, on the same file, row for row (SpecForge shuffles
    its rows, so they are compared as sorted lists). Rows the export leaves out are written here too, with
    --allow-template-mismatch and the cut replies (--format specforge writes none of those), so the replica
    is held where SpecForge parts from the server as well: a cut tool call's `{}`, a closed cut reply."""
    out = tmp_path / "all-rows.jsonl"
    export(runs[turns], out, "specforge", "--allow-template-mismatch")
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    extra = tmp_path / "with-cut.jsonl"
    shutil.copy(out, extra)
    with extra.open("a") as handle:
        for record in read_results(runs[turns]):
            if record["finish_reason"] == "length":
                line = {"id": record["id"], "conversations": [*record["messages"], {
                    "role": "assistant", "content": record["content"] or "", "reasoning_content": record["reasoning"],
                    **({"tool_calls": record["tool_calls"]} if record["tool_calls"] else {})}]}
                if record.get("tools"):
                    line["tools"] = json.dumps(record["tools"])
                handle.write(json.dumps(line) + "\n")
    trained = specforge_conversations(extra, tiny_tokenizer_dir(), 1 << 20)
    replica = []
    for line in _written(extra):
        tools = json.loads(line["tools"]) if "tools" in line else None
        made = trainer_row(tok, [_flat(m) for m in line["conversations"]], tools)
        replica.append((made.input_ids, made.loss_mask))
    assert sorted((r["input_ids"], r["loss_mask"]) for r in trained) == sorted(replica)


def _flat(message: dict[str, Any]) -> dict[str, Any]:
    """As Arrow hands SpecForge a JSON row: content-part lists were flattened by the export already; a raw
    history message here may still hold them, and the trainer gets what the file holds."""
    return {k: v for k, v in message.items() if v is not None}


def test_parquet_is_read_by_speculators_as_a_folder_and_not_by_specforge(runs: dict[str, Path],
                                                                          tmp_path: Path) -> None:
    folder = tmp_path / "parquet"
    folder.mkdir()
    report = export(runs["last"], folder / "train.parquet", "parquet", "--require-exact-ids")
    rows = speculators_rows(f"hf:{folder}", tiny_tokenizer_dir(), 1 << 20)
    server = server_rows(runs["last"])
    assert len(rows) == report["rows"] > 0
    assert sorted((r["input_ids"], r["loss_mask"]) for r in rows) == sorted(
        server[rid] for rid in server if server[rid][1].count(1) > 0 and rid in _parquet_ids(folder / "train.parquet"))
    with pytest.raises(TrainerError):
        specforge_run(folder / "train.parquet", tiny_tokenizer_dir(), 1 << 20, conversation=False)


def _parquet_ids(path: Path) -> set[str]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    return set(pq.read_table(path, columns=["id"]).column("id").to_pylist())


def test_a_cut_reply_past_the_window_is_a_specforge_row(runs: dict[str, Path], tmp_path: Path) -> None:
    """With the trainer's window, a reply cut by max_tokens whose row reaches `max_length` is kept: SpecForge
    cuts the row there, before the tokens its template would add to close the reply. Every row written is
    trained exactly on the server's first `max_length` tokens."""
    window = 200
    out = tmp_path / "windowed.jsonl"
    report = export(runs["last"], out, "specforge", "--max-length", str(window))
    assert report["written"] and report["template"]["mismatched"] == 0, report["stderr"][-3000:]
    records = read_results(runs["last"])
    reaching = [r for r in records if r["finish_reason"] == "length"
                and len(r["prompt_token_ids"]) + len(r["completion_token_ids"]) >= window]
    assert reaching, "some cut replies reach the window"
    written = {line["id"] for line in _written(out)}
    unsupervised = {r["id"] for r in records if len(r["prompt_token_ids"]) >= window - 1}  # dropped by the window
    assert {r["id"] for r in reaching} <= written | unsupervised
    trained = specforge_conversations(out, tiny_tokenizer_dir(), window)
    cut_server = {rid: (ids[:window], mask[:window]) for rid, (ids, mask) in server_rows(runs["last"]).items()}
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    assert judge(trained, {rid: row for rid, row in cut_server.items() if rid in written}, tok) == []


# Thinking on for half the prompts and off for the rest, drawn per prompt by id (docs/sampling.md).
MIXED_PLAN = "think = {enable_thinking = true}; quick = {enable_thinking = false}"


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mixed_run(tmp_path_factory.mktemp("trainer-mixed"), MIXED_PLAN)


@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators"])
def test_a_mixed_sampling_plan_run_trains_exactly_with_thinking_on_and_off(mixed_run: Path, tmp_path: Path,
                                                                           fmt: str) -> None:
    """A run whose prompts drew thinking on and off: every row the exact-id formats write is read by the
    trainer's own code as the server's ids and loss mask, and rows of both kinds are among them."""
    records = {r["id"]: r for r in read_results(mixed_run)}
    assert {r["sampling"]["plan"]["setting"] for r in records.values()} == {"think", "quick"}
    out = tmp_path / "rows.jsonl"
    report = export(mixed_run, out, fmt, "--require-exact-ids")
    written = _written(out)
    assert report["rows"] == len(written) > 0
    assert {records[w["id"]]["sampling"]["enable_thinking"] for w in written} == {True, False}
    assert not any(records[w["id"]]["reasoning"] for w in written
                   if not records[w["id"]]["sampling"]["enable_thinking"]), "thinking off wrote no reasoning"
    server = server_rows(mixed_run)
    reader = speculators_rows if fmt == "speculators" else specforge_tokenized
    read = reader(out, tiny_tokenizer_dir(), 1 << 20)
    assert sorted((r["input_ids"], r["loss_mask"]) for r in read) == sorted(server[w["id"]] for w in written)
