"""Prompt recovery from a tokenized set: a round trip PromptRecord -> (results) -> export parquet ->
from_tokenized -> PromptRecord with the tiny tokenizer (Qwen3.6's template, the simulator's default, and the
Qwen3 style's), plus the parser's pure parts."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.ipc as ipc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from prompts.from_tokenized import prompt_ids, split_turns, to_messages
from prompts.schema import validate_prompt
from simulator.config import DEFAULT_CHAT_TEMPLATE, ChatTemplateName
from tests.conftest import REPO
from tests.results_fixture import WEATHER_TOOL, result, tool_call, write_segment
from tests.tokenizer_fixture import load_tiny, tiny_tokenizer_dir

PROMPTS: list[dict[str, Any]] = [
    {"id": "plain", "messages": [{"role": "user", "content": "What is the weather like today?"}]},
    {"id": "system", "messages": [{"role": "system", "content": "You are terse."},
                                  {"role": "user", "content": "Name two colours."}]},
    {"id": "tools", "tools": [WEATHER_TOOL], "messages": [
        {"role": "system", "content": "Use tools when they help."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Let me check both.", "tool_calls": [
            tool_call("get_weather", '{"city": "Paris"}', "call_2_0"),
            tool_call("get_weather", '{"city": "Oslo", "unit": "celsius"}', "call_2_1")]},
        {"role": "tool", "tool_call_id": "call_2_0", "content": '{"temperature": 14}'},
        {"role": "tool", "tool_call_id": "call_2_1", "content": "Cloudy, 3 degrees."}]},
    {"id": "multiturn", "messages": [
        {"role": "user", "content": "I have three days in Paris."},
        {"role": "assistant", "content": "Walk along the river first."},
        {"role": "user", "content": "And on a rainy day?"}]},
    {"id": "no-tools-call", "tools": [WEATHER_TOOL], "messages": [{"role": "user", "content": "Say hello."}]},
]


def run_results(prompts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results as a run would write them, with an old response to be dropped again on recovery."""
    records = []
    for prompt in prompts:
        record = result(prompt["id"], reasoning="Some reasoning here.", content="The old answer.",
                        tools=prompt.get("tools"))
        record["messages"] = prompt["messages"]
        del record["usage"]  # no server counts to check: the rows here are only a vehicle
        records.append(record)
    return records


def tokenized_set(tmp_path: Path, template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> Path:
    write_segment(tmp_path / "run", run_results(PROMPTS))
    out = tmp_path / "train.parquet"
    subprocess.run([sys.executable, "-m", "client.export", str(tmp_path / "run"), "--tokenizer",
                    str(tiny_tokenizer_dir(template)), "--out", str(out)], cwd=REPO, check=True, capture_output=True)
    return out


def recover(source: Path, out: Path, *extra: str, template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "prompts.from_tokenized", str(source), "--tokenizer",
                           str(tiny_tokenizer_dir(template)), "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("template", ["qwen3.6", "qwen3"])
def test_round_trip(tmp_path: Path, template: ChatTemplateName) -> None:
    proc = recover(tokenized_set(tmp_path, template), tmp_path / "prompts.jsonl", "--source", "recovered",
                   template=template)
    assert proc.returncode == 0, proc.stderr
    recovered = [orjson.loads(line) for line in (tmp_path / "prompts.jsonl").read_bytes().splitlines()]
    assert [r["id"] for r in recovered] == [p["id"] for p in PROMPTS]
    for original, back in zip(PROMPTS, recovered, strict=True):
        assert validate_prompt(back) is None
        assert back["meta"] == {"source": "recovered"}
        assert back.get("tools") == original.get("tools"), original["id"]
        expected = copy.deepcopy(original["messages"])
        for message in expected:
            for call in message.get("tool_calls", []):
                # Recovered arguments are compact JSON; the ids are rebuilt from the turn position.
                call["function"]["arguments"] = orjson.dumps(orjson.loads(call["function"]["arguments"])).decode()
        assert back["messages"] == expected, original["id"]


def test_arrow_stream_without_loss_mask_drops_the_last_assistant_turn(tmp_path: Path) -> None:
    tok = load_tiny()
    text = ("<|im_start|>user\nHello there?<|im_end|>\n<|im_start|>assistant\n<think>\nHmm.\n</think>\n\n"
            "Hi!<|im_end|>\n")
    table = pa.table({"input_ids": [tok.encode(text, add_special_tokens=False).ids], "uid": ["r-1"]})
    path = tmp_path / "data.arrow"
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    proc = recover(path, tmp_path / "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    record = orjson.loads((tmp_path / "out.jsonl").read_bytes())
    assert record == {"id": "r-1", "messages": [{"role": "user", "content": "Hello there?"}]}


def test_bad_rows_are_reported_with_file_and_row(tmp_path: Path) -> None:
    tok = load_tiny()
    good = tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n",
                      add_special_tokens=False).ids
    plain = tok.encode("no chat markers at all", add_special_tokens=False).ids
    table = pa.table({"input_ids": [good, plain, good], "loss_mask": [[0] * len(good), [0] * len(plain), [1, 0]]})
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    proc = recover(path, tmp_path / "out.jsonl")
    assert proc.returncode == 1
    assert f"{path}:2: no chat turn" in proc.stderr
    assert f"{path}:3: loss_mask does not match input_ids in length" in proc.stderr
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 1
    proc = recover(path, tmp_path / "strict.jsonl", "--strict")
    assert proc.returncode == 3 and not (tmp_path / "strict.jsonl").exists()
    proc = recover(tmp_path / "missing.parquet", tmp_path / "x.jsonl")
    assert proc.returncode == 2 and "no such file" in proc.stderr


@pytest.mark.parametrize(("mask", "expected", "found"), [
    ([0, 0, 1, 1, 0], [10, 11], True),
    ([0, 1, 0, 1, 1], [10, 11, 12], True),
    ([1, 1, 0, 0, 0], [], True),
    ([0, 0, 0, 0, 0], [10, 11, 12, 13, 14], False),
    (None, [10, 11, 12, 13, 14], False),
])
def test_prompt_ids_cut_before_the_last_response(mask: list[int] | None, expected: list[int], found: bool) -> None:
    assert prompt_ids([10, 11, 12, 13, 14], mask) == (expected, found)


@pytest.mark.parametrize(("text", "messages"), [
    ("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n", [{"role": "user", "content": "hi"}]),
    ("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr1\n</think>\n\nfine<|im_end|>\n",
     [{"role": "user", "content": "q"}, {"role": "assistant", "reasoning_content": "r1", "content": "fine"}]),
    ("<|im_start|>assistant\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
     "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
     "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n",
     [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_0_0", "type": "function", "function": {
         "name": "get_weather", "arguments": '{"city":"Paris","days":3}'}}]},
      {"role": "tool", "tool_call_id": "call_0_0", "content": "sunny"}]),
    ("<|im_start|>developer\nbe brief<|im_end|>\n", [{"role": "developer", "content": "be brief"}]),
])
def test_turns_to_messages(text: str, messages: list[dict[str, Any]]) -> None:
    assert to_messages(split_turns(text)) == (messages, None)
