"""The committed sample set: size, ids, validity, the mix of shapes, and byte-exact regeneration."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from prompts import make_sample
from prompts.schema import validate_prompt

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "prompts" / "sample.jsonl"


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in SAMPLE.read_bytes().splitlines()]


def roles(record: dict[str, Any]) -> list[str]:
    return [m["role"] for m in record["messages"]]


def test_size_and_ids(records: list[dict[str, Any]]) -> None:
    assert len(records) >= 240
    ids = [r["id"] for r in records]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"sample-\d{6}", i) for i in ids)


def test_every_record_is_valid(records: list[dict[str, Any]]) -> None:
    problems = {r["id"]: validate_prompt(r) for r in records}
    assert {k: v for k, v in problems.items() if v is not None} == {}


def test_categories(records: list[dict[str, Any]]) -> None:
    counts = Counter(r["meta"]["source"] for r in records)
    assert set(counts) == set(make_sample.CATEGORIES)
    assert min(counts.values()) >= 40  # enough of each to stratify


def test_shapes_present(records: list[dict[str, Any]]) -> None:
    with_results = [r for r in records if "tools" in r and "tool" in roles(r)]
    multi_turn = [r for r in records if roles(r).count("user") >= 2]
    ends_assistant = [r for r in records if roles(r)[-1] == "assistant"]
    assert len(with_results) >= 20
    assert any(roles(r)[-1] == "tool" for r in with_results)  # the model answers from the results
    assert any(roles(r)[-1] == "assistant" for r in with_results)  # the answer itself is regenerated
    assert any(len(m.get("tool_calls", [])) > 1 for r in with_results for m in r["messages"])  # parallel calls
    assert any(r["meta"]["source"] == "tools" and roles(r) == ["user"] for r in records)  # must decide to call
    assert {roles(r).count("user") for r in multi_turn} >= {2, 3, 4}
    assert len(ends_assistant) >= 20
    assert any(r["messages"][0]["role"] == "system" for r in records)
    # Qwen3.6's own template refuses a developer turn ("Unexpected message role."): the Quickstart would fail on it.
    assert not any(m["role"] == "developer" for r in records for m in r["messages"])
    assert any(isinstance(m["content"], list) for r in records for m in r["messages"])


def test_tool_use_is_consistent(records: list[dict[str, Any]]) -> None:
    for record in records:
        offered = {t["function"]["name"] for t in record.get("tools", [])}
        called: set[str] = set()
        for message in record["messages"]:
            for call in message.get("tool_calls", []):
                assert call["function"]["name"] in offered, record["id"]
                assert isinstance(orjson.loads(call["function"]["arguments"]), dict)
                called.add(call["id"])
            if message["role"] == "tool":
                assert message["tool_call_id"] in called, record["id"]
        for tool in record.get("tools", []):
            params = tool["function"]["parameters"]
            assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])


def test_regenerates_byte_identically() -> None:
    assert make_sample.render(make_sample.build_records()) == SAMPLE.read_bytes()


def test_check_cli(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "prompts.make_sample", "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    stale = tmp_path / "stale.jsonl"
    stale.write_bytes(SAMPLE.read_bytes()[:-100])
    assert make_sample.main(["--check", "--out", str(stale)]) == 1
    fresh = tmp_path / "fresh.jsonl"
    assert make_sample.main(["--out", str(fresh)]) == 0
    assert fresh.read_bytes() == SAMPLE.read_bytes()
