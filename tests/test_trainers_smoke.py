"""The drafter trainers' own data code on small hand-written files: what SpecForge 0.2.0 and speculators 0.9.0
keep of a row, and how they fail (tests/engines/trainers.py runs them in their venvs).

Each test states the rule it holds from the trainer's source, so a change of the trainer (or of the driver
that calls it) shows here first; where the project's replica of the rules (tests/trainer_readers.py) reads
the same file, its answer is held to the trainer's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.engines.trainers import (
    TrainerError,
    specforge_conversations,
    specforge_run,
    specforge_tokenized,
    speculators_rows,
)
from tests.tokenizer_fixture import load_tiny, tiny_tokenizer_dir
from tests.trainer_readers import read_specforge_tokenized, read_speculators

pytestmark = pytest.mark.trainers

# Pre-tokenized rows (ids well inside the tiny tokenizer's vocabulary), read with max_length 6.
TOKENIZED = [
    # cut to 6 tokens: three supervised and adjacent, kept by both
    {"id": "long", "input_ids": [10, 11, 12, 13, 14, 15, 16, 17], "loss_mask": [0, 0, 0, 1, 1, 1, 1, 1]},
    # three supervised tokens, no two adjacent: DFlash drops it, speculators keeps it
    {"id": "alternating", "input_ids": [20, 21, 22, 23, 24, 25], "loss_mask": [0, 1, 0, 1, 0, 1]},
    # the cut leaves one supervised token: below DFlash's minimum of 2, enough for speculators
    {"id": "one-left", "input_ids": [30, 31, 32, 33, 34, 35, 36, 37], "loss_mask": [0, 0, 0, 0, 0, 1, 1, 1]},
    # the cut leaves none: dropped by both
    {"id": "none-left", "input_ids": [40, 41, 42, 43, 44, 45, 46], "loss_mask": [0, 0, 0, 0, 0, 0, 1]},
    {"id": "short", "input_ids": [50, 51, 52], "loss_mask": [0, 1, 1]},
]
MAX_LENGTH = 6


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def write_parquet(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({
        "id": [r["id"] for r in records],
        "input_ids": pa.array([r["input_ids"] for r in records], pa.list_(pa.int32())),
        "loss_mask": pa.array([r["loss_mask"] for r in records], pa.list_(pa.int8())),
        "seq_len": [len(r["input_ids"]) for r in records],
    })
    pq.write_table(table, path)
    return path


def cut(record: dict[str, Any], n: int = MAX_LENGTH) -> dict[str, list[int]]:
    return {"input_ids": record["input_ids"][:n], "loss_mask": record["loss_mask"][:n]}


def by_ids(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in a fixed order (the trainers keep no id, and speculators shuffles)."""
    return sorted(rows, key=lambda row: row["input_ids"])


@pytest.fixture(scope="module")
def tokenizer_dir() -> Path:
    return tiny_tokenizer_dir()


# -- SpecForge, data.prompts_path ------------------------------------------------------------------------

def test_specforge_tokenized_cuts_at_max_length_and_keeps_dflash_rows(specforge_venv: Path, tmp_path: Path,
                                                                      tokenizer_dir: Path) -> None:
    path = write_jsonl(tmp_path / "prompts.jsonl", TOKENIZED)
    rows = specforge_tokenized(path, tokenizer_dir, MAX_LENGTH)
    # In file order: cut first, then at least 2 supervised tokens (DFlash's minimum_loss_tokens), then two of
    # them adjacent (has_consecutive_supervised_tokens). No id survives.
    assert rows == [cut(TOKENIZED[0]), cut(TOKENIZED[4])]
    assert rows == read_specforge_tokenized(path, MAX_LENGTH, min_loss_tokens=2)


def test_specforge_tokenized_refuses_a_row_of_unequal_lengths(specforge_venv: Path, tmp_path: Path,
                                                              tokenizer_dir: Path) -> None:
    bad = {"id": "bad", "input_ids": [10, 11, 12], "loss_mask": [0, 1]}
    path = write_jsonl(tmp_path / "prompts.jsonl", [TOKENIZED[0], bad])
    with pytest.raises(TrainerError) as info:
        specforge_tokenized(path, tokenizer_dir, MAX_LENGTH)
    assert info.value.exception == "ValueError"
    assert f"{path}:2 has mismatched input_ids/loss_mask lengths: 3 != 2" in info.value.message


def test_specforge_cannot_read_parquet(specforge_venv: Path, tmp_path: Path, tokenizer_dir: Path) -> None:
    # prepare_prompt_tasks reads every path as JSON text (JSON lines or one array) to find the first record,
    # whichever config key names it: the parquet bytes fail to decode as UTF-8 or to parse as JSON.
    path = write_parquet(tmp_path / "prompts.parquet", TOKENIZED)
    for conversation in (False, True):
        with pytest.raises(TrainerError) as info:
            specforge_run(path, tokenizer_dir, MAX_LENGTH, conversation=conversation)
        assert info.value.is_a("ValueError"), info.value
        assert info.value.exception in ("UnicodeDecodeError", "ValueError")


# -- speculators, prepare-data --------------------------------------------------------------------------

def test_speculators_passes_pretokenized_rows_through(speculators_venv: Path, tmp_path: Path,
                                                      tokenizer_dir: Path) -> None:
    path = write_jsonl(tmp_path / "rows.jsonl", TOKENIZED)
    rows = speculators_rows(path, tokenizer_dir, MAX_LENGTH)
    # Cut, then kept with any supervised token left; no adjacency rule, no id (the order is shuffled).
    expected = [{**cut(r), "seq_len": min(len(r["input_ids"]), MAX_LENGTH)}
                for r in TOKENIZED if r["id"] != "none-left"]
    assert by_ids(rows) == by_ids(expected)
    assert by_ids(rows) == by_ids(read_speculators(path, MAX_LENGTH))
    # --minimum-valid-tokens 2 drops the row the cut left with one.
    kept = speculators_rows(path, tokenizer_dir, MAX_LENGTH, minimum_valid_tokens=2)
    assert by_ids(kept) == by_ids(r for r in expected if r["input_ids"][0] != 30)


def test_speculators_reads_parquet_only_as_an_hf_folder(speculators_venv: Path, tmp_path: Path,
                                                        tokenizer_dir: Path) -> None:
    path = write_parquet(tmp_path / "data" / "train.parquet", TOKENIZED)
    with pytest.raises(TrainerError) as info:
        speculators_rows(path, tokenizer_dir, MAX_LENGTH)
    assert info.value.exception == "ValueError"
    assert info.value.message.startswith(f"Unsupported dataset: {path}.")
    with pytest.raises(TrainerError) as info:  # a plain folder: only .json/.jsonl files in it count
        speculators_rows(path.parent, tokenizer_dir, MAX_LENGTH)
    assert info.value.message == f"No .json/.jsonl files found in directory: {path.parent}"
    rows = speculators_rows(f"hf:{path.parent}", tokenizer_dir, MAX_LENGTH)
    assert by_ids(rows) == by_ids(speculators_rows(write_jsonl(tmp_path / "rows.jsonl", TOKENIZED),
                                                   tokenizer_dir, MAX_LENGTH))


# -- SpecForge, data.train_data_path (conversations re-rendered with the tokenizer's template) -----------

def supervised_text(row: dict[str, Any]) -> tuple[str, str]:
    """The row's text before its first supervised token, and the supervised text (one span expected)."""
    ids, mask = row["input_ids"], row["loss_mask"]
    start = mask.index(1)
    assert mask == [0] * start + [1] * (len(mask) - start), "one supervised span, to the end"
    tok = load_tiny()
    return (tok.decode(ids[:start], skip_special_tokens=False), tok.decode(ids[start:], skip_special_tokens=False))


TOOL_CALL_CONVERSATION = {
    "id": "tool-call",
    "conversations": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "I should call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Par"}}]},
    ],
}


def test_specforge_conversation_turns_unparsable_arguments_into_an_empty_object(
        specforge_venv: Path, tmp_path: Path, tokenizer_dir: Path) -> None:
    path = write_jsonl(tmp_path / "conversations.jsonl", [TOOL_CALL_CONVERSATION])
    run = specforge_run(path, tokenizer_dir, 4096, conversation=True)
    [row] = run.rows
    prompt, supervised = supervised_text(row)
    # qwen3.5's assistant header `<|im_start|>assistant\n<think>\n` opens the span; it runs through the end of
    # turn `<|im_end|>\n`, the newline after <|im_end|> included. _sanitize_message parsed the arguments,
    # failed, and put {} in their place (with a warning): under Qwen3.6's template, a call with no parameters.
    assert prompt == "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n"
    assert supervised == ("I should call the tool.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                          "</function>\n</tool_call><|im_end|>\n")
    assert "Failed to parse arguments for tool 'get_weather'" in run.stderr


def test_specforge_conversation_masks_only_turns_the_template_renders_with_a_think_block(
        specforge_venv: Path, tmp_path: Path, tokenizer_dir: Path) -> None:
    conversation = {"id": "two-turns", "conversations": [
        {"role": "user", "content": "Is it sunny today?"},
        {"role": "assistant", "content": "Yes, it is sunny.", "reasoning_content": "Look at the weather."},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Rain tomorrow.", "reasoning_content": "Check the day after."},
    ]}
    path = write_jsonl(tmp_path / "conversations.jsonl", [conversation])
    [row] = specforge_conversations(path, tokenizer_dir, 4096)
    prompt, supervised = supervised_text(row)
    # The template drops the reasoning of turns before the last user message and renders them without
    # <think>, so the header regex does not find them: no loss there, with or without train_only_last_turn.
    assert prompt == ("<|im_start|>user\nIs it sunny today?<|im_end|>\n<|im_start|>assistant\nYes, it is sunny."
                      "<|im_end|>\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert supervised == "Check the day after.\n</think>\n\nRain tomorrow.<|im_end|>\n"
    assert specforge_conversations(path, tokenizer_dir, 4096, train_only_last_turn=True) == [row]

    # max_length keeps the first tokens of the rendered text (the tokenizer's truncation=True) and the mask
    # of those: the same row, cut.
    n = len(row["input_ids"]) - 5
    assert specforge_conversations(path, tokenizer_dir, n) == [cut(row, n)]
