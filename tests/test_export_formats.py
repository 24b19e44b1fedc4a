"""Each export format read back by a reader written from its trainer's loader (tests/trainer_readers.py),
and the window: a row cut by the export is the row the trainer keeps from the whole one.

The records are the hand-spelled server records of tests/test_export.py, with exact ids, tokenized by the
tiny Qwen3-style tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from client.export.render import ChatTokenizer, render_record, sglang_tool
from simulator.config import ChatTemplateName
from tests.results_fixture import WEATHER_TOOL, result, write_segment
from tests.test_export import TEMPLATE, TOOLS_PREAMBLE, cases, export, served, without_ids
from tests.tokenizer_fixture import tiny_tokenizer_dir
from tests.trainer_readers import read_specforge_conversations, read_specforge_tokenized, read_speculators

BIG = 1 << 20


def thinking_cases() -> list[dict[str, Any]]:
    """plain, tools, cut: the rows the tiny tokenizer splits the same in one pass as the server did."""
    return [r for r in cases() if r["id"] != "no-think"]


def server_rows(records: list[dict[str, Any]]) -> dict[str, tuple[list[int], list[int]]]:
    return {r["id"]: (r["prompt_token_ids"] + r["completion_token_ids"],
                      [0] * len(r["prompt_token_ids"]) + [1] * len(r["completion_token_ids"])) for r in records}


def read(fmt: str, path: Path, max_length: int) -> list[tuple[list[int], list[int]]]:
    if fmt == "specforge-tokenized":
        rows = read_specforge_tokenized(path, max_length)
    elif fmt == "speculators":
        rows = read_speculators(path, max_length)
    else:  # parquet has no trainer of its own: the export holds it to specforge-tokenized's rule
        rows = [{"input_ids": r["input_ids"][:max_length], "loss_mask": r["loss_mask"][:max_length]}
                for r in pq.read_table(path).to_pylist() if sum(r["loss_mask"][:max_length]) >= 2]
    return [(r["input_ids"], r["loss_mask"]) for r in rows]


@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators", "parquet"])
def test_tokenized_formats_read_back_as_the_server_ids(tmp_path: Path, fmt: str) -> None:
    records = cases()
    write_segment(tmp_path / "run", records)
    code, report, stderr = export(tmp_path / "run", tmp_path / "out", "--format", fmt)
    assert code == 0, stderr
    assert report["rows"] == 4
    assert sorted(read(fmt, tmp_path / "out", BIG)) == sorted(server_rows(records).values())
    if fmt != "parquet":
        lines = [json.loads(line) for line in (tmp_path / "out").read_text().splitlines()]
        assert {line["id"] for line in lines} == {r["id"] for r in records}
    if fmt == "speculators":
        by_id = {line["id"]: line for line in lines}
        assert by_id["tools"]["metadata"]["is_tool_call"] is True
        assert by_id["cut"]["metadata"]["finish_reason"] == "length"
        assert by_id["plain"]["primary_id"] == "plain"


@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators", "parquet"])
def test_the_window_cuts_as_the_trainer_cuts(tmp_path: Path, fmt: str) -> None:
    records = cases()
    write_segment(tmp_path / "run", records)
    plain = records[0]
    window = len(plain["prompt_token_ids"]) + 3  # plain keeps 3 supervised tokens; tools' prompt alone is longer
    assert len(records[2]["prompt_token_ids"]) > window
    code, _, stderr = export(tmp_path / "run", tmp_path / "whole", "--format", fmt)
    assert code == 0, stderr
    code, report, stderr = export(tmp_path / "run", tmp_path / "cut", "--format", fmt, "--max-length", str(window))
    assert code == 0, stderr  # the rows the window drops were asked to be dropped
    trainer = read(fmt, tmp_path / "whole", window)
    assert sorted(read(fmt, tmp_path / "cut", BIG)) == sorted(trainer)
    assert all(len(ids) <= window for ids, _ in read(fmt, tmp_path / "cut", BIG))
    assert report["cut"] >= 1 and report["rows"] == len(trainer) >= 2
    assert report["dropped_unsupervised"] == 4 - len(trainer)  # tools among them: nothing supervised is left
    whole_plain = len(plain["prompt_token_ids"]) + len(plain["completion_token_ids"])
    code, dropped, _ = export(tmp_path / "run", tmp_path / "drop", "--format", fmt, "--max-length", str(whole_plain),
                              "--over-length", "drop")
    assert code == 0
    kept = [server for server in server_rows(records).values() if len(server[0]) <= whole_plain]
    assert 1 <= len(kept) < 4
    assert sorted(read(fmt, tmp_path / "drop", BIG)) == sorted(kept)
    assert dropped["dropped_long"] == 4 - len(kept)


def test_specforge_conversations_render_back_to_the_server_ids(tmp_path: Path) -> None:
    records = thinking_cases()
    write_segment(tmp_path / "run", records)
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge")
    assert code == 0, stderr
    assert report["template"]["matched"] == report["template"]["checked"] == 2
    assert report["unreproducible"] == 1  # "cut": the trainer would close it with tokens never generated
    lines = {json.loads(line)["id"]: json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()}
    assert set(lines) == {"plain", "tools"}
    assert set(lines["tools"]) == {"id", "conversations", "tools"}
    assert json.loads(lines["tools"]["tools"]) == [WEATHER_TOOL]
    assert lines["plain"]["conversations"] == [
        {"role": "user", "content": "Question plain?"},
        {"role": "assistant", "content": "The answer is two.", "reasoning_content": "The user asks."}]
    tok = ChatTokenizer.load(tiny_tokenizer_dir(TEMPLATE))
    rows = read_specforge_conversations(tmp_path / "train.jsonl", tok, BIG)
    by_id = dict(zip(lines, rows, strict=True))
    for record in (r for r in records if r["id"] in by_id):
        row, prompt = by_id[record["id"]], record["prompt_token_ids"]
        server = prompt + record["completion_token_ids"]
        assert row["input_ids"][:len(server)] == server, record["id"]
        # The trainer supervises from the end of the assistant header (the server's prompt) on.
        assert row["loss_mask"][:len(server)] == [0] * len(prompt) + [1] * (len(server) - len(prompt)), record["id"]
    window = len(records[0]["prompt_token_ids"]) + 3
    cut = read_specforge_conversations(tmp_path / "train.jsonl", tok, window)
    assert dict(zip(lines, cut, strict=True))["plain"]["input_ids"] == records[0]["prompt_token_ids"] + \
        records[0]["completion_token_ids"][:3]


def test_tools_are_written_as_sglang_rendered_them(tmp_path: Path) -> None:
    """A server that rendered the tools with `"defer_loading": null` (SGLang): the recorded tools do not
    reproduce its prompt, SGLang's form does, and the export writes that form for the trainer."""
    preamble = TOOLS_PREAMBLE.replace(json.dumps(WEATHER_TOOL, ensure_ascii=False),
                                      json.dumps(sglang_tool(WEATHER_TOOL), ensure_ascii=False))
    assert '"defer_loading": null' in preamble
    record = served("sg", preamble + "<|im_start|>user\nQuestion sg?<|im_end|>\n<|im_start|>assistant\n<think>\n",
                    "Sunny.\n</think>\n\nIt is sunny.<|im_end|>", reasoning="Sunny.", content="It is sunny.",
                    tools=[WEATHER_TOOL])
    write_segment(tmp_path / "run", [record])
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge")
    assert code == 0, stderr
    assert report["template"]["matched"] == 1 and report["template"]["sglang_tools"] == 1
    line = json.loads((tmp_path / "train.jsonl").read_text())
    assert json.loads(line["tools"]) == [sglang_tool(WEATHER_TOOL)]
    tok = ChatTokenizer.load(tiny_tokenizer_dir(TEMPLATE))
    row = read_specforge_conversations(tmp_path / "train.jsonl", tok, BIG)[0]
    server = record["prompt_token_ids"] + record["completion_token_ids"]
    assert row["input_ids"][:len(server)] == server


def test_rerendered_tools_take_sglang_form_when_usage_says_so(tmp_path: Path) -> None:
    """No ids: the prompt re-rendered with the recorded tools misses usage.prompt_tokens; with SGLang's
    form it has it, so that form is the row's (and the tools written for the trainer)."""
    preamble = TOOLS_PREAMBLE.replace(json.dumps(WEATHER_TOOL, ensure_ascii=False),
                                      json.dumps(sglang_tool(WEATHER_TOOL), ensure_ascii=False))
    record = served("sg", preamble + "<|im_start|>user\nQuestion sg?<|im_end|>\n<|im_start|>assistant\n<think>\n",
                    "Sunny.\n</think>\n\nIt is sunny.<|im_end|>", reasoning="Sunny.", content="It is sunny.",
                    tools=[WEATHER_TOOL])
    write_segment(tmp_path / "run", [without_ids(record)])
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge")
    assert code == 0, stderr
    assert report["rendered"] == 1 and report["prompt_mismatch"] == 0
    assert json.loads(json.loads((tmp_path / "train.jsonl").read_text())["tools"]) == [sglang_tool(WEATHER_TOOL)]
    code, _, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized")
    assert code == 0, stderr
    assert read("specforge-tokenized", tmp_path / "t.jsonl", BIG) == [tuple(server_rows([record])["sg"])]


def _turns() -> list[dict[str, Any]]:
    """A two-turn `--turns all` conversation, ids from the tiny template (render_record is tested above)."""
    tok = ChatTokenizer.load(tiny_tokenizer_dir(TEMPLATE))
    first = result("c#1", reasoning="First thought.", content="First answer.", conversation_id="c", turn=1)
    first["messages"] = [{"role": "user", "content": "Question one?"}]
    second = result("c#2!", reasoning="Second thought.", content="Second answer.", conversation_id="c", turn=2)
    second["messages"] = [{"role": "user", "content": "Question one?"},
                          {"role": "assistant", "content": "First answer."},
                          {"role": "user", "content": "Question two?"}]
    for record in (first, second):
        tokens = render_record(record, tok)
        record["prompt_token_ids"], record["completion_token_ids"] = tokens.prompt, tokens.completion
        record["usage"] = {"prompt_tokens": len(tokens.prompt), "completion_tokens": len(tokens.completion)}
    return [first, second]


def test_turns_as_rows_or_as_one_conversation(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", _turns())
    code, report, stderr = export(tmp_path / "run", tmp_path / "turns.jsonl", "--format", "specforge")
    assert code == 0, stderr
    lines = [json.loads(line) for line in (tmp_path / "turns.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == ["c#1", "c#2!"]
    # expand_reasoning_conversations.py's per-turn rows: the history's assistant turn without its reasoning.
    assert lines[1]["conversations"][1] == {"role": "assistant", "content": "First answer."}
    code, report, stderr = export(tmp_path / "run", tmp_path / "conv.jsonl", "--format", "specforge",
                                  "--rows", "conversation")
    assert code == 0, stderr
    # One row per conversation; it trains the last turn, on the history the server generated it on.
    assert report["rows"] == 1 and report["exported"] == 1 and report["earlier_turns"] == 1
    assert "1 turn(s) before their conversation's last are in no conversation row" in stderr
    (line,) = [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]
    assert line["id"] == "c"
    assert [m["role"] for m in line["conversations"]] == ["user", "assistant", "user", "assistant"]
    assert "reasoning_content" not in line["conversations"][1]  # as the server saw it
    assert line["conversations"][3]["reasoning_content"] == "Second thought."
    assert report["template"]["matched"] == report["template"]["checked"] == 1


def _trajectory_turn(template: ChatTemplateName) -> tuple[dict[str, Any], ChatTokenizer]:
    """Turn 2 of an agentic conversation, with the ids the server renders for it under `template`: the
    history holds turn 1's tool call and the tool's result."""
    tok = ChatTokenizer.load(tiny_tokenizer_dir(template))
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    record = result("w#2!", reasoning="It is sunny there.", content="Sunny in Paris.", conversation_id="w", turn=2,
                    tools=[WEATHER_TOOL])
    record["messages"] = [{"role": "user", "content": "Weather in Paris?"},
                          {"role": "assistant", "content": "", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "call_1", "content": '{"sky": "sunny"}'}]
    tokens = render_record(record, tok)
    record["prompt_token_ids"], record["completion_token_ids"] = tokens.prompt, tokens.completion
    record["usage"] = {"prompt_tokens": len(tokens.prompt), "completion_tokens": len(tokens.completion)}
    return record, tok


def test_a_tool_trajectory_turn_reads_back_with_its_tool_result(tmp_path: Path) -> None:
    """The row keeps the `tool_call_id`, passes SpecForge's role-order rules and renders to the server's ids."""
    record, tok = _trajectory_turn(TEMPLATE)
    write_segment(tmp_path / "run", [record])
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge")
    assert code == 0, stderr
    assert report["template"]["matched"] == 1
    line = json.loads((tmp_path / "train.jsonl").read_text())
    assert line["conversations"][2] == {"role": "tool", "content": '{"sky": "sunny"}', "tool_call_id": "call_1"}
    (row,) = read_specforge_conversations(tmp_path / "train.jsonl", tok, BIG)
    server = record["prompt_token_ids"] + record["completion_token_ids"]
    assert row["input_ids"][:len(server)] == server


def test_a_tool_trajectory_turn_under_qwen36_is_found_by_the_check(tmp_path: Path) -> None:
    """Under Qwen3.6 the history's tool-call turn sits after the last user message, so the server renders it
    with a think block, and SpecForge without data.train_only_last_turn supervises it: a prompt token the
    model did not generate here. The check finds it: the row is written for that setting and the report
    says so (tests/test_export_agentic.py); with `--train-only-last-turn off` the file is not written.
    specforge-tokenized keeps its exact ids either way."""
    record, _ = _trajectory_turn("qwen3.6")
    write_segment(tmp_path / "run", [record])
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge",
                                  template="qwen3.6")
    assert code == 0 and report["train_only_last_turn"] is True and report["last_turn_only"] == 1, stderr
    code, _, stderr = export(tmp_path / "run", tmp_path / "off.jsonl", "--format", "specforge",
                             "--train-only-last-turn", "off", template="qwen3.6")
    assert code == 3 and not (tmp_path / "off.jsonl").exists(), stderr
    assert "w#2!: the trainer supervises a token of the prompt" in stderr
    code, report, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized",
                                  template="qwen3.6")
    assert code == 0 and report["exported"] == report["exact"] == 1, stderr


def test_a_turn_left_out_keeps_its_history_form(tmp_path: Path) -> None:
    first, second = _turns()
    first["usage"]["completion_tokens"] += 1  # a count mismatch: turn 1 is left out of the export
    write_segment(tmp_path / "run", [first, second])
    code, report, _ = export(tmp_path / "run", tmp_path / "conv.jsonl", "--format", "specforge",
                             "--rows", "conversation")
    assert code == 1 and report["exported"] == 1
    (line,) = [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]
    assert line["conversations"][1] == {"role": "assistant", "content": "First answer."}
    assert line["conversations"][3]["reasoning_content"] == "Second thought."


def test_unfinished_conversations_and_rows_conversation_needs_specforge(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", _turns()[:1])
    code, report, stderr = export(tmp_path / "run", tmp_path / "conv.jsonl", "--format", "specforge",
                                  "--rows", "conversation")
    assert code == 0 and report["unfinished_conversations"] == 1 and report["rows"] == 1
    assert "1 conversation(s) have no final turn" in stderr
    code, _, stderr = export(tmp_path / "run", tmp_path / "conv.parquet", "--rows", "conversation")
    assert code == 2 and "--rows conversation needs --format specforge" in stderr


def test_rows_without_ids_are_written_and_not_checked(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [without_ids(r) for r in thinking_cases()])
    code, report, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge-tokenized")
    assert code == 0, stderr
    assert report["template"]["checked"] == 0 and report["template"]["unchecked"] == 3
    assert sorted(read("specforge-tokenized", tmp_path / "train.jsonl", BIG)) == \
        sorted(server_rows(thinking_cases()).values())


@pytest.mark.parametrize(("content", "refused"), [
    (b'{"id": "a", "messages": []}\n', True),  # a results segment, not an export
    (b"not json\n", True),
    (b'{"id": "a", "input_ids": [1], "loss_mask": [0]}\n', False),  # a previous export
    (b'{"id": "a", "conversations": []}\n', False),
])
def test_out_guard_for_jsonl(tmp_path: Path, content: bytes, refused: bool) -> None:
    write_segment(tmp_path / "run", thinking_cases())
    (tmp_path / "train.jsonl").write_bytes(content)
    code, _, stderr = export(tmp_path / "run", tmp_path / "train.jsonl", "--format", "specforge")
    if refused:
        assert code == 2 and "is not a previous export" in stderr
        assert (tmp_path / "train.jsonl").read_bytes() == content
    else:
        assert code == 0, stderr


def test_every_format_of_the_registry_has_its_writer() -> None:
    from client.export.formats import FORMATS
    from client.export.writers import JSONL_LINES

    assert set(JSONL_LINES) == {name for name, fmt in FORMATS.items() if fmt.storage == "jsonl"}
    assert {fmt.storage for fmt in FORMATS.values()} <= {"jsonl", "parquet"}
