"""`--turns all` against the real vLLM with the scripted tiny Qwen3: the regenerated tool call is answered
by the source's spliced tool result, the next turn is generated on that history, and the export writes
one training row per turn from the server's exact token ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from tests.conftest import WEATHER_TOOL, read_results, run_client

pytestmark = pytest.mark.vllm


def test_spliced_tool_result_answers_the_regenerated_call(tmp_path: Path, vllm_scripted: Any,
                                                          tiny_script: dict[str, Any],
                                                          tiny_model_dirs: dict[str, Path]) -> None:
    source = {"id": "trip", "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "src_call", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "src_call", "content": "Paris: 18C, clear sky"},
        {"role": "assistant", "content": "SOURCE: It is 18C and clear."}]}
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(orjson.dumps(source) + b"\n")
    out = tmp_path / "out"
    result = run_client(["--endpoints", vllm_scripted.url, "--prompts", str(prompts), "--out", str(out),
                         "--turns", "all", "--max-tokens", "64", "--max-in-flight", "2"], timeout=240)
    assert result.code == 0, result.stderr[-3000:]
    events = {r["id"]: r for r in read_results(out)}
    assert set(events) == {"trip#1", "trip#2!"}
    first, second = events["trip#1"], events["trip#2!"]
    (call,) = first["tool_calls"]
    assert call["function"] == {"name": tiny_script["tool_name"], "arguments": tiny_script["tool_arguments"]}
    assert call["id"] and call["id"] != "src_call"
    assert first["reasoning"] == tiny_script["reasoning"]
    assert "diverged" not in first
    history = second["messages"]
    assert history[0] == source["messages"][0]
    assert history[1]["tool_calls"] == [call]
    assert history[2] == {"role": "tool", "tool_call_id": call["id"], "content": "Paris: 18C, clear sky"}
    assert second["turn"] == 2
    assert second["finish_reason"] == "tool_calls"
    assert second["prompt_token_ids"] and second["completion_token_ids"] == tiny_script["completion_token_ids"]
    assert len(second["prompt_token_ids"]) > len(first["prompt_token_ids"]), "turn 2 saw the longer history"

    # The export writes one training row per event, from the server's exact ids.
    parquet = tmp_path / "train.parquet"
    exported = subprocess.run([sys.executable, "-m", "client.export", str(out), "--tokenizer",
                               str(tiny_model_dirs["scripted"]), "--out", str(parquet)],
                              capture_output=True, text=True, timeout=120, check=False)
    assert exported.returncode == 0, exported.stderr[-2000:]
    table = pq.read_table(parquet).to_pylist()
    assert sorted(row["id"] for row in table) == ["trip#1", "trip#2!"]
    for row in table:
        event = events[row["id"]]
        assert row["input_ids"] == event["prompt_token_ids"] + event["completion_token_ids"]
        assert sum(row["loss_mask"]) == len(event["completion_token_ids"])
        assert row["seq_len"] == len(row["input_ids"])
