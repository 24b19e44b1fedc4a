"""The audit CLI on synthetic runs (a stub-ridden one must fail loudly) and on a healthy simulated run."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, run_client
from tests.results_fixture import WEATHER_TOOL, result, stub, tool_call, write_prompt_ids, write_segment


def audit(*args: str) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", *args, "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    data = orjson.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, data, proc.stderr


def messages(data: dict[str, Any]) -> str:
    return "\n".join(f"{f['level']}: {f['message']}" for f in data["findings"])


def test_stub_ridden_run_fails_loudly(tmp_path: Path) -> None:
    records = [stub(f"p{i:04d}") if i % 100 < 87 else result(f"p{i:04d}", completion_tokens=900) for i in range(1000)]
    write_segment(tmp_path / "run", records)
    prompts = write_prompt_ids(tmp_path / "p.jsonl", (f"p{i:04d}" for i in range(1000)))
    code, data, _ = audit(str(tmp_path / "run"), "--prompts", str(prompts))
    assert code == 1
    assert data["verdict"] == "broken"
    assert data["stubs"]["pattern"] == 870
    assert "most completions are stubs" in messages(data)
    # Stubs with thinking on also have no reasoning: that is its own verdict.
    assert "reasoning is missing although thinking was requested" in messages(data)
    assert data["completion_tokens"]["median"] == 6
    assert data["ids"]["missing"] == 0
    # The table form says the same in plain words.
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run")], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert "verdict: BROKEN" in proc.stdout
    assert "most completions are stubs" in proc.stdout


@pytest.mark.slow
def test_healthy_simulated_run_passes(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=32, speed=50.0,
                                         extra_args=("--tokens-per-chunk", "32", "--mean-tokens", "1500"))] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 150, with_tools_every=3)
    run = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                      "--max-tokens", "4096"])
    assert run.code == 0, run.stderr[-2000:]
    code, data, stderr = audit(str(tmp_path / "o"), "--prompts", str(prompts), "--histogram", str(tmp_path / "h.png"))
    assert code == 0, (messages(data), stderr)
    assert data["verdict"] == "healthy"
    assert data["counts"]["records"] == 150
    assert data["ids"] == {**data["ids"], "missing": 0, "duplicated": 0, "unknown": 0, "prompts": 150}
    assert data["reasoning"]["empty"] == 0
    assert data["loops"]["records"] == 0  # the simulator loops only when asked (--loop-rate)
    assert data["tool_calls"]["calls"] > 10 and not data["tool_calls"]["invalid"]
    assert set(data["endpoints"]) == set(fleet.urls)
    assert list(data["models"]) == ["Qwen/Qwen3.6-27B"]
    assert data["completion_tokens"]["median"] > 100
    png = (tmp_path / "h.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", png[16:24]) == (760, 380)


def test_exactly_once_against_the_prompt_set(tmp_path: Path) -> None:
    records = [result(f"p{i}") for i in range(8)] + [result("p3"), result("stranger")]
    write_segment(tmp_path / "run", records[:5], name="a-00001")
    write_segment(tmp_path / "run", records[5:], name="a-00002")
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(10)])
    code, data, _ = audit(str(tmp_path / "run"), "--prompts", str(prompts))
    assert code == 1
    ids = data["ids"]
    counts = (ids["prompts"], ids["missing"], ids["duplicated"], ids["duplicate_lines"], ids["unknown"])
    assert counts == (10, 2, 1, 1, 1)
    assert any(e.startswith("p3 (") and "a-00002.jsonl:4" in e for e in ids["examples"]["duplicated"])
    assert ids["examples"]["unknown"][0].startswith("stranger (")
    assert sorted(e.split(" ")[0] for e in ids["examples"]["missing"]) == ["p8", "p9"]
    assert f"{prompts}:9" in " ".join(ids["examples"]["missing"])


def test_incomplete_but_healthy_exits_3(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [result(f"p{i}") for i in range(5)])
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(6)])
    code, data, _ = audit(str(tmp_path / "run"), "--prompts", str(prompts))
    assert code == 3
    assert data["verdict"] == "incomplete"
    code, _, _ = audit(str(tmp_path / "run"))
    assert code == 0


def test_reasoning_missing_with_thinking_on_fails(tmp_path: Path) -> None:
    records = [result(f"p{i}", reasoning="" if i % 2 else "Some thought.") for i in range(40)]
    records += [result(f"q{i}", reasoning="", thinking=False) for i in range(40)]
    write_segment(tmp_path / "run", records)
    code, data, _ = audit(str(tmp_path / "run"))
    assert code == 1
    assert data["reasoning"] == {"thinking_on": 40, "empty": 20, "empty_share": 0.5}
    assert "reasoning is missing although thinking was requested" in messages(data)


def test_invalid_tool_calls_and_mixed_models_fail(tmp_path: Path) -> None:
    good = tool_call("get_weather", '{"city": "Paris", "unit": "celsius"}')
    bad = [tool_call("get_weather", '{"city": 3}'), tool_call("get_weather", "{not json"),
           tool_call("get_time", "{}"), tool_call("get_weather", '{"unit": "kelvin", "city": "Oslo"}')]
    records = [result(f"g{i}", tool_calls=[good], tools=[WEATHER_TOOL]) for i in range(20)]
    records += [result(f"b{i}", tool_calls=[call], tools=[WEATHER_TOOL]) for i, call in enumerate(bad)]
    records += [result("other", model="another/model")]
    write_segment(tmp_path / "run", records)
    code, data, _ = audit(str(tmp_path / "run"))
    assert code == 1
    assert data["tool_calls"]["invalid"] == {"schema mismatch": 2, "arguments not JSON": 1, "unknown tool": 1}
    assert data["tool_calls"]["calls"] == 24
    text = messages(data)
    assert "4 of 24 tool calls are invalid" in text
    assert "more than one model" in text and "a run must come from one model" in text


def test_unreadable_lines_diverged_and_finish_reasons_are_counted(tmp_path: Path) -> None:
    records = [result(f"p{i}", diverged=i < 2) for i in range(10)]
    records.append(result("cut", finish_reason="length", completion_tokens=8192))
    path = write_segment(tmp_path / "run", records)
    with path.open("ab") as handle:
        handle.write(b"this is not json\n")
        handle.write(b'{"id": "torn", "messa')
    code, data, _ = audit(str(path))
    assert code == 0, messages(data)
    assert data["counts"]["records"] == 11
    assert data["counts"]["corrupt_lines"] == 1 and data["counts"]["torn_tails"] == 1
    assert data["counts"]["diverged"] == 2 and data["counts"]["with_diverged_field"] == 10
    assert data["finish_reasons"] == {"stop": 10, "length": 1}
    assert f"{path}:12" in data["unreadable_examples"][0]
    assert "2 conversation(s) ended early where the regenerated tool calls diverged" in messages(data)


def test_bad_location_and_help(tmp_path: Path) -> None:
    code, _, stderr = audit(str(tmp_path / "nothing"))
    assert code == 2
    assert "no such results directory" in stderr
    helptext = subprocess.run([sys.executable, "-m", "client.audit", "--help"], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout
    assert "exit codes:" in helptext and "3  healthy so far, but incomplete" in helptext


@pytest.mark.parametrize(("reasoning", "content", "calls", "expected"), [
    ("", "OK.", False, True),
    ("", "<think>\n</think>\nOK.", False, True),
    ("\n", " ok ", False, True),
    ("", "OK.<|im_end|>", False, True),
    ("thinking", "OK.", False, False),
    ("", "OK.", True, False),
    ("", "OK, here is the full answer.", False, False),
])
def test_stub_pattern(reasoning: str, content: str, calls: bool, expected: bool) -> None:
    from client.results.rules import is_stub

    assert is_stub(reasoning, content, calls) is expected


@pytest.mark.parametrize(("value", "schema", "problem"), [
    ({"city": "Paris"}, WEATHER_TOOL["function"]["parameters"], None),
    ({}, WEATHER_TOOL["function"]["parameters"], "arguments lacks the required key 'city'"),
    ({"city": 1}, WEATHER_TOOL["function"]["parameters"], "arguments.city is int; the schema wants string"),
    ({"city": "x", "unit": "K"}, WEATHER_TOOL["function"]["parameters"], "arguments.unit is 'K'; the schema allows"),
    ({"city": "x", "zip": 1}, WEATHER_TOOL["function"]["parameters"], "arguments has the key 'zip', which the schema"),
    ({"n": 2.0}, {"properties": {"n": {"type": "integer"}}}, None),
    ({"n": True}, {"properties": {"n": {"type": "number"}}}, "arguments.n is bool; the schema wants number"),
    ({"n": None}, {"properties": {"n": {"type": ["string", "null"]}}}, None),
    ({"xs": [1, "a"]}, {"properties": {"xs": {"type": "array", "items": {"type": "integer"}}}},
     "arguments.xs[1] is str"),
    ({"o": {"deep": 1}}, {"properties": {"o": {"type": "object", "required": ["other"]}}},
     "arguments.o lacks the required key 'other'"),
    ({"x": 1}, {"type": "object", "properties": {"x": {"type": "mystery"}}}, None),
])
def test_schema_check(value: object, schema: object, problem: str | None) -> None:
    from client.results.rules import schema_problem

    found = schema_problem(value, schema)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


@pytest.mark.parametrize(("with_ids", "without", "warned"), [
    (8, 2, True),    # a server stopped giving ids, or a resume with other --token-ids
    (10, 0, False),  # every record exact
    (0, 10, False),  # a run without ids at all is not damage
])
def test_records_without_token_ids_beside_records_with_them_are_reported(
        tmp_path: Path, with_ids: int, without: int, warned: bool) -> None:
    records = [result(f"a{i}", prompt_token_ids=[1, 2], completion_token_ids=[3] * 120) for i in range(with_ids)]
    records += [result(f"b{i}") for i in range(without)]
    code, data, _ = audit(str(write_segment(tmp_path / "run", records)))
    assert code == 0, messages(data)
    assert data["counts"]["with_token_ids"] == with_ids
    expected = f"{without} of {with_ids + without} record(s) carry no token ids while {with_ids} do"
    assert (expected in messages(data)) is warned, messages(data)


def test_invalid_prompt_lines_are_not_missing(tmp_path: Path) -> None:
    """The run skips a prompt line that is not a valid record (here ShareGPT rows, with no `messages`) and
    exits 0; the audit used to count them as missing and say INCOMPLETE, exit 3, for ever."""
    write_segment(tmp_path / "run", [result(f"p{i}") for i in range(3)])
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(3)])
    with prompts.open("ab") as handle:
        for i in range(3):
            handle.write(orjson.dumps({"id": f"share{i}", "conversations": [{"from": "human", "value": "hi"}]}) + b"\n")
        handle.write(b"not json at all\n")
    code, data, _ = audit(str(tmp_path / "run"), "--prompts", str(prompts))
    assert code == 0, messages(data)
    assert data["ids"]["missing"] == 0 and data["ids"]["invalid_prompts"] == 4
    assert f"4 line(s) of the prompt files are not valid records (e.g. {prompts}:4: messages is missing" \
        in messages(data)


def test_without_prompts_the_table_says_how_to_check_exactly_once(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [result(f"p{i}") for i in range(3)])
    plain = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run")], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 0, plain.stderr
    row = next(line for line in plain.stdout.splitlines() if "exactly once" in line)
    assert "not checked: --prompts FILE checks that every prompt has exactly one result" in row, plain.stdout
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(3)])
    checked = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run"), "--prompts", str(prompts)],
                             cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert "prompts 3; missing 0, duplicated 0, unknown 0" in checked.stdout, checked.stdout


def test_without_prompts_the_json_says_exactly_once_was_not_checked_and_how(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [result(f"p{i}") for i in range(3)])
    plain = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run"), "--json"], cwd=REPO,
                           capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 0, plain.stderr
    doc = orjson.loads(plain.stdout)
    assert doc["ids"] is None
    assert doc["exactly_once"] == {"checked": False, "note": "not checked: --prompts FILE checks that every prompt "
                                                             "has exactly one result"}
    prompts = write_prompt_ids(tmp_path / "p.jsonl", [f"p{i}" for i in range(3)])
    checked = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run"), "--prompts", str(prompts),
                              "--json"], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert orjson.loads(checked.stdout)["exactly_once"] == {"checked": True, "note": None}, checked.stdout
