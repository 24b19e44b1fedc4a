"""The tokenized export with the tiny locally built tokenizer: exact ids, re-rendered rows whose counts
match, and the mismatch report on a deliberately altered record.

The expected token ids are built the way a server makes them, independently of the exporter: the prompt
and completion texts are spelled out here by hand, in the layout of the template served (the Qwen3 style,
`TEMPLATE`, which the other export tests build on, and Qwen3.6's, the simulator's default), and tokenized
with the tokenizer that carries that template.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from simulator.config import ChatTemplateName
from tests.conftest import REPO
from tests.results_fixture import WEATHER_TOOL, result, tool_call, write_segment
from tests.tokenizer_fixture import load_tiny, tiny_tokenizer_dir

# The template the hand-spelled records of `cases()` are in, unless a test names another.
TEMPLATE: ChatTemplateName = "qwen3"
TOOLS_PREAMBLE = (
    "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(WEATHER_TOOL, ensure_ascii=False)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n"
)
# Qwen3.6's: the tools first, then its instructions for the XML calls.
TOOLS_PREAMBLE_36 = (
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    + json.dumps(WEATHER_TOOL, ensure_ascii=False)
    + "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
    "the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT><|im_end|>\n"
)
# The call each template writes after "Let me check.": hermes JSON, or Qwen3.6's XML after a blank line.
CALL_TEXT = {
    "qwen3": '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "qwen3.6": "\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
               "</tool_call>",
}


def served(record_id: str, prompt_text: str, completion_text: str, template: ChatTemplateName = TEMPLATE,
           **fields: Any) -> dict[str, Any]:
    """A ResultRecord as a server would write it, with exact ids and matching usage."""
    tok = load_tiny(template)
    prompt = tok.encode(prompt_text, add_special_tokens=False).ids
    completion = tok.encode(completion_text, add_special_tokens=False).ids
    record = result(record_id, **fields)
    record["usage"] = {"prompt_tokens": len(prompt), "completion_tokens": len(completion)}
    record["prompt_token_ids"] = prompt
    record["completion_token_ids"] = completion
    return record


def cases(template: ChatTemplateName = TEMPLATE) -> list[dict[str, Any]]:
    """Four replies as the server renders them with `template`: they differ only in the tool call's layout."""
    ask = "<|im_start|>user\nQuestion {}?<|im_end|>\n<|im_start|>assistant\n"
    weather = tool_call("get_weather", '{"city": "Paris"}')
    preamble = TOOLS_PREAMBLE_36 if template == "qwen3.6" else TOOLS_PREAMBLE
    return [
        served("plain", ask.format("plain") + "<think>\n", "The user asks.\n</think>\n\nThe answer is two.<|im_end|>",
               template, reasoning="The user asks.", content="The answer is two."),
        served("no-think", ask.format("no-think") + "<think>\n\n</think>\n\n", "Sunny today.<|im_end|>", template,
               reasoning="", content="Sunny today.", thinking=False),
        served("tools", preamble + ask.format("tools") + "<think>\n",
               f"I should call the tool.\n</think>\n\nLet me check.{CALL_TEXT[template]}<|im_end|>", template,
               reasoning="I should call the tool.", content="Let me check.", tool_calls=[weather],
               tools=[WEATHER_TOOL], finish_reason="tool_calls"),
        served("cut", ask.format("cut") + "<think>\n", "The user asks about the weather in Paris and", template,
               reasoning="The user asks about the weather in Paris and", content="", finish_reason="length"),
    ]


def without_ids(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("prompt_token_ids", "completion_token_ids")}


def export(results: Path, out: Path, *extra: str, template: ChatTemplateName = TEMPLATE
           ) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.export", str(results), "--tokenizer",
                           str(tiny_tokenizer_dir(template)), "--out", str(out), "--json", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def rows(path: Path) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in pq.read_table(path).to_pylist()}


def expected_row(record: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = record["prompt_token_ids"], record["completion_token_ids"]
    return {"id": record["id"], "input_ids": prompt + completion,
            "loss_mask": [0] * len(prompt) + [1] * len(completion), "seq_len": len(prompt) + len(completion)}


def test_export_uses_exact_ids(tmp_path: Path) -> None:
    records = cases()
    write_segment(tmp_path / "run", records)
    code, report, stderr = export(tmp_path / "run", tmp_path / "exact.parquet", "--row-group-size", "3")
    assert code == 0, stderr
    assert (report["exported"], report["exact"], report["rendered"]) == (4, 4, 0)
    table = pq.ParquetFile(tmp_path / "exact.parquet")
    assert table.metadata.num_row_groups == 2
    assert table.schema_arrow.names == ["id", "input_ids", "loss_mask", "seq_len"]
    assert rows(tmp_path / "exact.parquet") == {r["id"]: expected_row(r) for r in records}
    assert not (tmp_path / "exact.parquet.part").exists()


@pytest.mark.parametrize("template", ["qwen3", "qwen3.6"])
def test_rerendered_export_matches_the_server_ids(tmp_path: Path, template: ChatTemplateName) -> None:
    records = cases(template)
    write_segment(tmp_path / "run", [without_ids(r) for r in records])
    code, report, stderr = export(tmp_path / "run", tmp_path / "rendered.parquet", template=template)
    assert code == 0, stderr
    assert (report["exported"], report["exact"], report["rendered"]) == (4, 0, 4)
    assert report["completion_mismatch"] == report["prompt_mismatch"] == 0
    assert rows(tmp_path / "rendered.parquet") == {r["id"]: expected_row(r) for r in records}


def test_altered_record_is_reported_and_left_out(tmp_path: Path) -> None:
    records = [without_ids(r) for r in cases()]
    records[0]["content"] += " Also three."  # the text no longer matches usage.completion_tokens
    write_segment(tmp_path / "run", records)
    code, report, stderr = export(tmp_path / "run", tmp_path / "out.parquet")
    assert code == 1
    assert report["completion_mismatch"] == 1 and report["exported"] == 3 and report["left_out"] == 1
    expected = records[0]["usage"]["completion_tokens"]
    altered = load_tiny(TEMPLATE).encode("The user asks.\n</think>\n\nThe answer is two. Also three.<|im_end|>",
                                 add_special_tokens=False).ids
    assert len(altered) > expected
    assert (f"plain: completion has {len(altered)} tokens, usage.completion_tokens is {expected} (re-rendered)"
            in stderr)
    assert "host-0of1-run-00001.jsonl:1: plain" in stderr
    assert "plain" not in rows(tmp_path / "out.parquet")
    code, report, _ = export(tmp_path / "run", tmp_path / "kept.parquet", "--keep-mismatched")
    assert code == 1
    assert report["kept_mismatched"] == 1 and report["exported"] == 4
    assert "plain" in rows(tmp_path / "kept.parquet")


def test_drop_truncated_and_duplicates(tmp_path: Path) -> None:
    records = cases()
    write_segment(tmp_path / "run", [*records, records[1]])
    code, report, _ = export(tmp_path / "run", tmp_path / "out.parquet", "--drop-truncated")
    assert code == 1  # the duplicate line is left out
    assert report["dropped_truncated"] == 1 and report["duplicates"] == 1 and report["exported"] == 3
    assert set(rows(tmp_path / "out.parquet")) == {"plain", "no-think", "tools"}


def test_server_ids_that_disagree_with_usage_are_mismatches(tmp_path: Path) -> None:
    record = cases()[0]
    record["usage"]["completion_tokens"] += 1
    write_segment(tmp_path / "run", [record])
    code, report, stderr = export(tmp_path / "run", tmp_path / "out.parquet")
    assert code == 1 and report["completion_mismatch"] == 1
    assert "(re-rendered)" not in stderr


def test_bad_tokenizer_and_missing_template(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [without_ids(cases()[0])])
    proc = subprocess.run([sys.executable, "-m", "client.export", str(tmp_path / "run"), "--tokenizer",
                           str(tmp_path / "none"), "--out", str(tmp_path / "o.parquet")],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and f"--tokenizer {tmp_path / 'none'}: no such file or directory" in proc.stderr
    assert "or `sim` for a run of the simulated fleet" in proc.stderr
    (tmp_path / "empty").mkdir()
    proc = subprocess.run([sys.executable, "-m", "client.export", str(tmp_path / "run"), "--tokenizer",
                           str(tmp_path / "empty"), "--out", str(tmp_path / "o.parquet")],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "cannot load" in proc.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "tokenizer.json").write_bytes((tiny_tokenizer_dir(TEMPLATE) / "tokenizer.json").read_bytes())
    proc = subprocess.run([sys.executable, "-m", "client.export", str(tmp_path / "run"), "--tokenizer", str(bare),
                           "--out", str(tmp_path / "o.parquet")],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert "the tokenizer has no chat template" in proc.stderr


@pytest.mark.parametrize("template", ["qwen3", "qwen3.6"])
@pytest.mark.parametrize("index", range(4))
def test_render_record_matches_server_text(index: int, template: ChatTemplateName) -> None:
    from client.export.render import ChatTokenizer, render_record

    record = cases(template)[index]
    tokens = render_record(without_ids(record), ChatTokenizer.load(tiny_tokenizer_dir(template)))
    assert (tokens.prompt, tokens.completion, tokens.exact) == (record["prompt_token_ids"],
                                                                 record["completion_token_ids"], False)
