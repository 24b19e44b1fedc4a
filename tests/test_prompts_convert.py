"""The converters on small inline inputs: mapping, bad lines reported as FILE:LINE, exit codes, and
every output record passing validate_prompt."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from prompts import from_openai, from_sharegpt
from prompts.convert_io import EXIT_OK, EXIT_SKIPPED, EXIT_STRICT, EXIT_USAGE, iter_items
from prompts.schema import validate_prompt

REPO = Path(__file__).resolve().parent.parent


def jsonl(path: Path, *rows: object) -> Path:
    """Write rows as lines; a str row is written verbatim (to make bad lines)."""
    path.write_bytes(b"".join((r.encode() if isinstance(r, str) else orjson.dumps(r)) + b"\n" for r in rows))
    return path


def read_out(path: Path) -> list[dict[str, Any]]:
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for record in records:
        assert validate_prompt(record) is None, record
    return records


def conv(text: str, *more: dict[str, str]) -> list[dict[str, str]]:
    turns = [{"from": "human", "value": text}]
    return turns + list(more)


GPT = {"from": "gpt", "value": "Hello!"}


# --- ShareGPT -------------------------------------------------------------------------------------------


def test_sharegpt_maps_roles_ids_meta_and_reports_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = jsonl(
        tmp_path / "in.jsonl",
        {"conversations": [{"from": "system", "value": "Be brief."}, *conv("hi"), GPT], "lang": "en"},
        {"id": 7, "conversations": conv("hey")},
        "{not json",
        {"conversations": [{"from": "robot", "value": "beep"}]},
        "",
        {"conversations": [*conv("q"), {"from": "observation", "value": "42"}]},
        {"id": "x", "system": "You are terse.", "conversations": conv("ok"), "meta": {"split": "train"}},
    )
    out = tmp_path / "out.jsonl"
    code = from_sharegpt.main([str(src), "--out", str(out), "--source", "sg"])
    err = capsys.readouterr().err
    assert code == EXIT_SKIPPED
    records = read_out(out)
    assert [r["id"] for r in records] == ["sharegpt-1", "7", "x"]
    assert [m["role"] for m in records[0]["messages"]] == ["system", "user", "assistant"]
    assert records[0]["meta"] == {"lang": "en", "source": "sg"}
    assert records[2]["messages"][0] == {"role": "system", "content": "You are terse."}
    assert records[2]["meta"] == {"split": "train", "source": "sg"}
    assert f"{src}:3: not valid JSON" in err
    assert f'{src}:4: conversations[0].from is "robot"' in err
    assert f"{src}:6: conversations[1] is a tool result, but no tool call is waiting" in err
    assert "3 of 6 record(s) written" in err and "3 bad record(s) skipped" in err


def test_sharegpt_function_call_observation_and_tools(tmp_path: Path) -> None:
    tools = [{"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {}}}]
    call = {"name": "get_weather", "arguments": {"city": "Paris"}}
    record = {
        "tools": orjson.dumps(tools).decode(),
        "conversations": conv(
            "Weather in Paris?",
            {"from": "gpt", "value": "Let me check."},
            {"from": "function_call", "value": orjson.dumps(call).decode()},
            {"from": "observation", "value": '{"temp": 21}'},
            {"from": "gpt", "value": "It's 21°C."},
        ),
    }
    out = tmp_path / "out.jsonl"
    assert from_sharegpt.main([str(jsonl(tmp_path / "in.jsonl", record)), "--out", str(out), "--quiet"]) == EXIT_OK
    (result,) = read_out(out)
    messages = result["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1]["content"] == "Let me check."  # the gpt turn and the call it announced are one turn
    (tool_call,) = messages[1]["tool_calls"]
    assert tool_call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert messages[2]["tool_call_id"] == tool_call["id"]
    assert result["tools"] == [{"type": "function", "function": tools[0]}]


def test_sharegpt_hermes_tool_call_blocks(tmp_path: Path) -> None:
    gpt = (
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>'
    )
    tool = "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>"
    record = {"conversations": conv("go", {"from": "gpt", "value": gpt}, {"from": "tool", "value": tool})}
    out = tmp_path / "out.jsonl"
    assert from_sharegpt.main([str(jsonl(tmp_path / "in.jsonl", record)), "--out", str(out), "--quiet"]) == EXIT_OK
    (result,) = read_out(out)
    assistant, first, second = result["messages"][1:]
    assert assistant["content"] is None
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["f", "g"]
    assert (first["content"], second["content"]) == ("one", "two")
    assert [first["tool_call_id"], second["tool_call_id"]] == [c["id"] for c in assistant["tool_calls"]]


def test_sharegpt_json_array_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [{"conversations": conv("a")}, {"conversations": "oops"}, {"id": "z", "conversations": conv("c")}]
    src = tmp_path / "in.json"
    src.write_bytes(orjson.dumps(records, option=orjson.OPT_INDENT_2))
    out = tmp_path / "out.jsonl"
    code = from_sharegpt.main([str(src), "--out", str(out), "--id-prefix", "sg-"])
    assert code == EXIT_SKIPPED
    assert [r["id"] for r in read_out(out)] == ["sg-1", "z"]  # position in the array, not the line
    assert f'{src}:10: item 2: conversations is "oops"' in capsys.readouterr().err


def test_strict_stops_and_leaves_no_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = jsonl(tmp_path / "in.jsonl", {"conversations": conv("a")}, "[1]", {"conversations": conv("b")})
    out = tmp_path / "out.jsonl"
    assert from_sharegpt.main([str(src), "--out", str(out), "--strict"]) == EXIT_STRICT
    assert not out.exists() and not (tmp_path / "out.jsonl.part").exists()
    err = capsys.readouterr().err
    assert f"{src}:2: record is a list" in err
    assert "stopped at the first bad record" in err


def test_duplicate_ids_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = jsonl(tmp_path / "in.jsonl", {"id": "a", "conversations": conv("1")}, {"id": "a", "conversations": conv("2")})
    out = tmp_path / "out.jsonl"
    assert from_sharegpt.main([str(src), "--out", str(out)]) == EXIT_SKIPPED
    assert len(read_out(out)) == 1
    assert f'{src}:2: id "a" was already used' in capsys.readouterr().err


def test_gzip_input_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.jsonl.gz"
    src.write_bytes(gzip.compress(orjson.dumps({"conversations": conv("zipped")}) + b"\n"))
    out = tmp_path / "out.jsonl"
    assert from_sharegpt.main([str(src), "--out", str(out), "--quiet"]) == EXIT_OK
    assert read_out(out)[0]["messages"][0]["content"] == "zipped"
    assert from_sharegpt.main([str(tmp_path / "nope.jsonl"), "--out", str(out)]) == EXIT_USAGE
    assert "cannot read" in capsys.readouterr().err


# --- OpenAI ---------------------------------------------------------------------------------------------


def test_openai_ids_shapes_and_meta(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user = [{"role": "user", "content": "hi"}]
    src = jsonl(
        tmp_path / "in.jsonl",
        {"id": "a", "messages": user, "temperature": 0.7},
        {"custom_id": "b", "messages": user},
        {"messages": user},
        {
            "custom_id": "req-4",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o", "messages": user, "tools": [{"type": "function", "function": {"name": "f"}}]},
        },
        {"messages": [{"role": "robot", "content": "x"}]},
        {"messages": "hi"},
    )
    out = tmp_path / "out.jsonl"
    assert from_openai.main([str(src), "--out", str(out)]) == EXIT_SKIPPED
    records = read_out(out)
    assert [r["id"] for r in records] == ["a", "b", "openai-3", "req-4"]
    assert records[0]["meta"] == {"temperature": 0.7}
    assert records[3]["meta"] == {"model": "gpt-4o"}  # Batch plumbing (method, url) is dropped
    assert records[3]["tools"][0]["function"]["name"] == "f"
    err = capsys.readouterr().err
    assert f'{src}:5: messages[0].role is "robot"' in err
    assert f'{src}:6: messages is "hi"' in err


def test_openai_canonicalises_tool_calls(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?", "name": None},
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {
                    "id": "call_r",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                },
            ],
        },
        {"role": "tool", "content": {"temp": 21}},
        {"role": "tool", "tool_call_id": "call_r", "content": "19"},
    ]
    out = tmp_path / "out.jsonl"
    src = jsonl(tmp_path / "in.jsonl", {"messages": messages})
    assert from_openai.main([str(src), "--out", str(out), "--quiet"]) == EXIT_OK
    (record,) = read_out(out)
    user, assistant, paris, rome = record["messages"]
    assert "name" not in user and "refusal" not in assistant
    first, second = assistant["tool_calls"]
    assert first["type"] == "function" and first["function"]["arguments"] == '{"city":"Paris"}'
    assert paris == {"role": "tool", "tool_call_id": first["id"], "content": '{"temp":21}'}
    assert rome["tool_call_id"] == second["id"] == "call_r"


def test_openai_legacy_functions(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "function_call": {"name": "now", "arguments": "{}"}},
        {"role": "function", "name": "now", "content": "12:00"},
    ]
    src = jsonl(tmp_path / "in.jsonl", {"messages": messages, "functions": [{"name": "now", "parameters": {}}]})
    out = tmp_path / "out.jsonl"
    assert from_openai.main([str(src), "--out", str(out), "--quiet"]) == EXIT_OK
    (record,) = read_out(out)
    assistant, tool = record["messages"][1:]
    assert tool["role"] == "tool" and tool["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert record["tools"] == [{"type": "function", "function": {"name": "now", "parameters": {}}}]


def test_openai_to_stdout(tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    src = jsonl(tmp_path / "in.jsonl", {"id": "s", "messages": [{"role": "user", "content": "hi"}]})
    assert from_openai.main([str(src), "--out", "-", "--quiet"]) == EXIT_OK
    assert orjson.loads(capsysbinary.readouterr().out)["id"] == "s"


# --- reading --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 2, 5, 64, 1 << 20])
def test_json_array_split_is_chunk_independent(tmp_path: Path, chunk_size: int) -> None:
    tricky = ['a "quoted" ] } , [ {', "back\\slash\\", "line\nbreak", "tab\t\u00e9\u4e2d"]
    records = [{"id": str(i), "v": tricky, "nested": [[i], {"k": [i]}]} for i in range(6)]
    path = tmp_path / "in.json"
    path.write_bytes(b"\xef\xbb\xbf  \n" + orjson.dumps(records, option=orjson.OPT_INDENT_2))
    items = list(iter_items(str(path), chunk_size))
    assert [orjson.loads(item.raw) for item in items] == records
    assert [item.index for item in items] == list(range(1, 7))
    assert items[0].line == 3 and all(item.error is None for item in items)


def test_array_problems_are_items(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(b'[{"a": 1},\n {"b": 2}] trailing')
    *_, last = iter_items(str(path))
    assert last.error == "text after the JSON array's closing ]"
    path.write_bytes(b'[{"a": 1},\n {"b": ')
    *_, last = iter_items(str(path))
    assert last.error == "the JSON array ends without its closing ]" and last.line == 2


def test_jsonl_lines_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\n{"a": 1}\r\n\r\n{"b": 2}')
    items = list(iter_items(str(path), 3))
    assert [(item.line, orjson.loads(item.raw)) for item in items] == [(2, {"a": 1}), (4, {"b": 2})]


@pytest.mark.parametrize("module", ["prompts.from_sharegpt", "prompts.from_openai"])
def test_cli_help_documents_exit_codes(module: str) -> None:
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0
    for text in ("--out", "--strict", "--id-prefix", "exit codes:", "FILE:LINE"):
        assert text in proc.stdout
