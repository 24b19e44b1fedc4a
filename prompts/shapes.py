"""What a record that is not a PromptRecord looks like, and the converter that turns it into one.

A prompt file in another common shape (ShareGPT conversations, OpenAI chat requests or Batch API lines,
chat rows without ids as Hugging Face datasets hold them, a parquet or Arrow file) is not a thousand
invalid records: it is a file to convert first. `converter_for` names the converter of one parsed record,
`converter_for_head` that of a file's first bytes; `convert_command` is the line to run. The readers of
prompt files (client.local.prompt_files) ask before they start.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prompts.schema import validate_prompt

PARQUET_MAGIC = b"PAR1"
ARROW_MAGIC = b"ARROW1"


@dataclass(frozen=True, slots=True)
class Converter:
    module: str  # run as `python -m MODULE IN --out OUT`
    shape: str  # what the records look like, for the message


SHAREGPT = Converter("prompts.from_sharegpt", 'ShareGPT conversations ("conversations" of "from"/"value" turns)')
OPENAI_BATCH = Converter("prompts.from_openai", 'OpenAI Batch API requests ("body" with "messages")')
CHAT_ROWS = Converter("prompts.from_openai", 'chat rows without an "id" (OpenAI requests, or Hugging Face rows '
                      'with "messages")')
TABLE = Converter("prompts.from_hf", "a parquet or Arrow table (a Hugging Face dataset)")


def converter_for(record: object) -> Converter | None:
    """The converter a record needs, or None when it is a valid PromptRecord or no known shape."""
    if not isinstance(record, Mapping) or validate_prompt(record) is None:
        return None
    if isinstance(record.get("conversations"), list):
        return SHAREGPT
    body = record.get("body")
    if isinstance(body, Mapping) and isinstance(body.get("messages"), list):
        return OPENAI_BATCH
    messages = record.get("messages")
    if "id" not in record and isinstance(messages, list) and messages and all(
            isinstance(m, Mapping) and "role" in m for m in messages):
        return CHAT_ROWS
    return None


def converter_for_head(head: bytes) -> Converter | None:
    """The converter a file needs, told by its first bytes: parquet and Arrow files are tables."""
    return TABLE if head.startswith((PARQUET_MAGIC, ARROW_MAGIC)) else None


def convert_command(converter: Converter, path: Path) -> str:
    """The command that converts `path`, writing PromptRecords next to it."""
    name = path.name
    for suffix in (".gz", ".zst", ".jsonl", ".json", ".parquet", ".arrow"):
        name = name.removesuffix(suffix)
    out = path.with_name(f"{name}.prompts.jsonl")
    return f"python -m {converter.module} {shlex.quote(str(path))} --out {shlex.quote(str(out))}"
