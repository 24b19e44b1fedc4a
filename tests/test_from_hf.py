"""`prompts.from_hf`: parquet and Arrow datasets with a `messages` (or ShareGPT `conversations`) column."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.ipc as ipc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from prompts.schema import validate_prompt
from tests.conftest import REPO
from tests.results_fixture import WEATHER_TOOL

ROWS: list[dict[str, Any]] = [
    {"id": "a", "messages": [{"role": "user", "content": "Hello?", "tool_calls": None, "tool_call_id": None}],
     "tools": None, "split": "train"},
    {"id": "b", "messages": [
        {"role": "user", "content": "Weather in Paris?", "tool_calls": None, "tool_call_id": None},
        {"role": "assistant", "content": None, "tool_call_id": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "sunny", "tool_calls": None, "tool_call_id": "c1"}],
     "tools": json.dumps([WEATHER_TOOL]), "split": "train"},
    {"id": None, "messages": [{"role": "robot", "content": "beep", "tool_calls": None, "tool_call_id": None}],
     "tools": None, "split": "test"},
    {"id": None, "messages": [{"role": "user", "content": "No id here.", "tool_calls": None, "tool_call_id": None}],
     "tools": None, "split": "test"},
]


def convert(source: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prompts.from_hf", str(source), "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def test_parquet_with_messages_column(tmp_path: Path) -> None:
    path = tmp_path / "train-00000.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=2)
    proc = convert(path, tmp_path / "out.jsonl", "--source", "hf-set")
    assert proc.returncode == 1, proc.stderr  # one bad row, reported and skipped
    assert f"{path}:3: messages[0].role is \"robot\"" in proc.stderr
    records = read(tmp_path / "out.jsonl")
    assert [r["id"] for r in records] == ["a", "b", "hf-4"]
    assert all(validate_prompt(r) is None for r in records)
    assert records[0] == {"id": "a", "messages": [{"role": "user", "content": "Hello?"}],
                          "meta": {"split": "train", "source": "hf-set"}}
    assert records[1]["tools"] == [WEATHER_TOOL]
    assert records[1]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert records[1]["messages"][2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}


def test_arrow_stream_directory_and_sharegpt(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    folder.mkdir()
    table = pa.Table.from_pylist([{"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}],
                                   "origin": "forum"}])
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink, \
            ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    (folder / "dataset_info.json").write_text("{}")
    proc = convert(folder, tmp_path / "out.jsonl", "--id-prefix", "sg-")
    assert proc.returncode == 0, proc.stderr
    (record,) = read(tmp_path / "out.jsonl")
    assert record["id"] == "sg-1"
    assert record["messages"] == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    assert record["meta"] == {"origin": "forum"}


def test_strict_missing_column_and_unreadable_input(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": ["just text"]}), path)
    proc = convert(path, tmp_path / "out.jsonl", "--strict")
    assert proc.returncode == 3
    assert f"{path}:1: the row has no messages column" in proc.stderr
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.jsonl.part").exists()
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not a parquet file")
    proc = convert(broken, tmp_path / "out.jsonl")
    assert proc.returncode == 2 and "cannot read as parquet or Arrow" in proc.stderr
