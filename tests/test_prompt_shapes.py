"""A prompt file in another known shape is told by its first record and refused with its converter
(prompts.shapes, client.local.prompt_files); a PromptRecord, or a record that is merely broken, is not."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.errors import ConfigError
from client.local.prompt_files import resolve_prompt_files
from prompts.shapes import CHAT_ROWS, OPENAI_BATCH, SHAREGPT, TABLE, Converter, convert_command, converter_for

USER = {"role": "user", "content": "hi"}

CASES: list[tuple[str, object, Converter | None]] = [
    ("a PromptRecord", {"id": "a", "messages": [USER]}, None),
    ("ShareGPT", {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}, SHAREGPT),
    ("ShareGPT with an id", {"id": "s1", "conversations": [{"from": "human", "value": "hi"}]}, SHAREGPT),
    ("OpenAI Batch API", {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions",
                          "body": {"model": "m", "messages": [USER]}}, OPENAI_BATCH),
    ("chat rows without an id", {"messages": [USER, {"role": "assistant", "content": "yo"}]}, CHAT_ROWS),
    # Broken PromptRecords are reported record by record, not taken for another shape.
    ("a non-string id", {"id": 1, "messages": [USER]}, None),
    ("an empty messages list", {"messages": []}, None),
    ("an unknown role", {"id": "a", "messages": [{"role": "robot", "content": "x"}]}, None),
    ("not an object", [1, 2], None),
]


RECORD = {name: record for name, record, _ in CASES}


@pytest.mark.parametrize(("name", "record", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_converter_a_record_needs(name: str, record: object, expected: Converter | None) -> None:
    assert converter_for(record) == expected


@pytest.mark.parametrize(("name", "content", "module"), [
    ("sharegpt", orjson.dumps(RECORD["ShareGPT"]) + b"\n", "prompts.from_sharegpt"),
    ("batch", b"\n\n" + orjson.dumps(RECORD["OpenAI Batch API"]) + b"\n", "prompts.from_openai"),
    ("rows", b"\xef\xbb\xbf" + orjson.dumps(RECORD["chat rows without an id"]) + b"\n", "prompts.from_openai"),
    ("table", b"PAR1\x15\x04\x15\x00\n", "prompts.from_hf"),
])
def test_a_file_in_another_shape_is_refused_with_its_converter(tmp_path: Path, name: str, content: bytes,
                                                                module: str) -> None:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as refused:
        resolve_prompt_files([path])
    message = str(refused.value)
    assert message.startswith(f"--prompts {path}: it holds ")
    assert message.endswith(f"Convert it first: python -m {module} {path} --out {tmp_path / name}.prompts.jsonl")


def test_a_file_whose_first_record_is_merely_broken_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"id": 1, "messages": []}\n{"id": "a", "messages": [{"role": "user", "content": "q"}]}\n')
    assert resolve_prompt_files([path]).paths == [path]


def test_the_command_names_an_output_beside_the_input() -> None:
    assert convert_command(TABLE, Path("data/train-00000.parquet")) == (
        "python -m prompts.from_hf data/train-00000.parquet --out data/train-00000.prompts.jsonl")
    assert convert_command(SHAREGPT, Path("my set.jsonl.gz")) == (
        "python -m prompts.from_sharegpt 'my set.jsonl.gz' --out 'my set.prompts.jsonl'")
