"""Readers of the export's files written from the trainers' own loading rules, to read our files back.

Each function follows one loader of the trainers' sources, rule by rule, and shares no code with the
exporter's writers (only the Jinja rendering of a chat template, which is Hugging Face's
`apply_chat_template` in the trainer and `ChatTokenizer.render` here):

- `read_specforge_tokenized`: SpecForge `specforge/data/prompt_builder.py` (`_iter_records`,
  `_prompt_from_record`, `_normalize_integer_sequence`) and the DFlash providers' `loss_mask_filter`
  (`specforge/data/loss_mask.py` `has_consecutive_supervised_tokens`).
- `read_speculators`: speculators `src/speculators/data_generation/preprocessing.py`
  (`build_speculator_training_dataset`, `_passthrough_pretokenized`, `_append_row`).
- `read_specforge_conversations`: the file loaded with `pyarrow.json` (what Hugging Face
  `load_dataset("json")` builds on), so rows whose columns Arrow cannot unify fail here as they would
  there, then each row as SpecForge parses it: `client.export.specforge_parse.trainer_row`, the replica the
  export's template check uses, held to the real SpecForge by tests/test_trainer_fidelity.py. (These
  readers serve the tests that run without the trainers installed; tests/test_trainers_smoke.py holds
  the other two to the real code.)
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow.json as paj  # type: ignore[import-untyped]

from client.export.render import ChatTokenizer
from client.export.specforge_parse import trainer_row


def _lines(path: Path) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError(f"JSON record in {path} at line {number} must be an object")
        records.append(record)
    return records


def _integers(value: Any, field: str, binary: bool) -> list[int]:
    if not isinstance(value, list):
        raise ValueError(f"field {field} must be a sequence")
    if len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    out = []
    for index, item in enumerate(value):
        if isinstance(item, list):
            raise ValueError(f"field {field} must be one-dimensional")
        if not isinstance(item, int) or (field == "input_ids" and isinstance(item, bool)):
            raise ValueError(f"field {field}[{index}] must be an integer")
        if binary and item not in (0, 1):
            raise ValueError(f"field {field}[{index}] must be 0 or 1")
        out.append(int(item))
    return out


def consecutive_supervised(loss_mask: list[int]) -> bool:
    return any(a and b for a, b in itertools.pairwise(loss_mask))


def read_specforge_tokenized(path: Path, max_length: int, min_loss_tokens: int = 2,
                             dflash: bool = True) -> list[dict[str, list[int]]]:
    records = _lines(path)
    if records and (("input_ids" in records[0]) != ("loss_mask" in records[0])):
        raise ValueError("pre-tokenized prompt record must contain both input_ids and loss_mask")
    payloads = []
    for record in records:
        if "input_ids" not in record or "loss_mask" not in record:
            raise ValueError("must contain both input_ids and loss_mask")
        input_ids = _integers(record["input_ids"], "input_ids", binary=False)
        loss_mask = _integers(record["loss_mask"], "loss_mask", binary=True)
        if len(input_ids) != len(loss_mask):
            raise ValueError("mismatched input_ids/loss_mask lengths")
        if not input_ids:
            raise ValueError("empty token sequence")
        input_ids, loss_mask = input_ids[:max_length], loss_mask[:max_length]
        if sum(loss_mask) < min_loss_tokens:
            continue
        if dflash and not consecutive_supervised(loss_mask):
            continue
        payloads.append({"input_ids": input_ids, "loss_mask": loss_mask})
    return payloads


def read_speculators(path: Path, max_length: int, minimum_valid_tokens: int | None = None) -> list[dict[str, Any]]:
    table = paj.read_json(str(path))
    if not {"input_ids", "loss_mask"} <= set(table.column_names):
        raise ValueError("render_endpoint is required to convert natural-language conversations")
    rows = []
    for ids, mask in zip(table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist(), strict=True):
        if len(ids) != len(mask):
            raise ValueError(f"Speculator-format row shape mismatch: input_ids={len(ids)}, loss_mask={len(mask)}")
        ids, mask = ids[:max_length], mask[:max_length]
        valid = sum(mask)
        if valid == 0 or (minimum_valid_tokens is not None and valid < minimum_valid_tokens):
            continue
        rows.append({"input_ids": ids, "loss_mask": mask, "seq_len": len(ids)})
    return rows


def read_specforge_conversations(path: Path, tok: ChatTokenizer, max_length: int,
                                 train_only_last_turn: bool = False) -> list[dict[str, list[int]]]:
    table = paj.read_json(str(path))  # as load_dataset("json") builds the columns
    if "conversations" not in table.column_names:
        raise ValueError("Expected 'conversations' column")
    extra = [name for name in table.column_names if name not in ("conversations", "id", "tools")]
    if extra:
        raise ValueError(f"columns {extra} would be handed to the chat template as keywords")
    rows = []
    tools_column = table.column("tools").to_pylist() if "tools" in table.column_names else None
    for index, conversation in enumerate(table.column("conversations").to_pylist()):
        # Arrow gives every message every key of the column, None where a row had none.
        conversation = [{k: v for k, v in m.items() if v is not None} for m in conversation]
        raw_tools = tools_column[index] if tools_column is not None else None
        tools = json.loads(raw_tools) if isinstance(raw_tools, str) else (raw_tools or [])
        row = trainer_row(tok, conversation, tools or None, max_length=max_length,
                          train_only_last_turn=train_only_last_turn)
        rows.append({"input_ids": row.input_ids, "loss_mask": row.loss_mask})
    return rows
