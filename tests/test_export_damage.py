"""What the export does with records a trainer must not be fed, or that it cannot read, each a case found
on the way to the real trainers:

- a reply stopped as a loop (finish_reason `repetition`) never reached SGLang's id chunk; it is left out of
  every format (a loop is not training data), so `--require-exact-ids` is not refused for it, and no
  row ends in a `</think>`/`<|im_end|>` the model never generated;
- a reply cut by max_tokens inside a tool call is left out of `specforge` rows, where SpecForge would
  render its arguments as `{}`; the tokenized formats keep its server ids;
- damaged lines in a segment and a record whose fields have the wrong types are named (FILE:LINE) and make
  the exit code 1, never a silent "exported 3 of 3" and never a traceback;
- a prompt whose message content is a list of parts is flattened as SGLang flattens it, not a crash.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from simulator.config import ChatTemplateName
from tests.results_fixture import WEATHER_TOOL, result, tool_call, write_segment
from tests.test_export import cases, export, served, without_ids

ASK = "<|im_start|>user\nQuestion {}?<|im_end|>\n<|im_start|>assistant\n<think>\n"


def loop_record() -> dict[str, object]:
    looping = "Wait, let me check again. " * 40
    return without_ids(result("loop", reasoning=looping, content="", finish_reason="repetition",
                              completion_tokens=400))


def test_loops_are_left_out_and_do_not_refuse_the_exact_ids_export(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [*[r for r in cases() if r["id"] != "no-think"], loop_record()])
    for fmt in ("specforge-tokenized", "speculators", "parquet", "specforge"):
        out = tmp_path / f"out-{fmt}"
        code, report, stderr = export(tmp_path / "run", out, "--format", fmt, "--require-exact-ids")
        assert code == 0, stderr
        assert report["dropped_loops"] == 1 and report["without_ids"] == 0, fmt
        assert "1 reply(ies) stopped as loops" in stderr
        if fmt != "parquet":
            ids = {json.loads(line)["id"] for line in out.read_text().splitlines()}
            assert "loop" not in ids


def test_a_call_cut_inside_its_arguments_is_not_a_specforge_row(tmp_path: Path) -> None:
    cut_call = tool_call("get_weather", '{"city": "Par')
    record = served("cut-call", ASK.format("cut-call"),
                    'I should call it.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par',
                    reasoning="I should call it.", content="", tool_calls=[cut_call], tools=[WEATHER_TOOL],
                    finish_reason="length")
    write_segment(tmp_path / "run", [cases()[0], record])
    code, report, stderr = export(tmp_path / "run", tmp_path / "s.jsonl", "--format", "specforge")
    assert code == 0, stderr
    assert report["unreproducible"] == 1 and report["exported"] == 1
    assert "1 reply(ies) that did not end by themselves" in stderr and "problems (" not in stderr
    assert [json.loads(line)["id"] for line in (tmp_path / "s.jsonl").read_text().splitlines()] == ["plain"]
    code, report, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized")
    assert code == 0 and report["exported"] == 2, stderr


def test_damaged_lines_are_named_and_make_the_exit_code_1(tmp_path: Path) -> None:
    segment = write_segment(tmp_path / "run", cases()[:3])
    lines = segment.read_bytes().splitlines(keepends=True)
    segment.write_bytes(lines[0] + b'{"id": "torn", "messa\n' + lines[1] + b"\x00\x01 not json\n" + lines[2])
    code, report, stderr = export(tmp_path / "run", tmp_path / "t.jsonl", "--format", "specforge-tokenized")
    assert code == 1, stderr
    assert report["unreadable"] == 2 and report["exported"] == 3
    assert f"{segment}:2: not valid JSON" in stderr and f"{segment}:4: " in stderr
    assert "2 result line(s) could not be read as records" in stderr


def test_a_record_with_fields_of_the_wrong_type_is_named_not_a_traceback(tmp_path: Path) -> None:
    bad = without_ids(result("bad-calls", tool_calls="get_weather(Paris)"))  # type: ignore[arg-type]
    bad["tool_calls"] = "get_weather(Paris)"
    write_segment(tmp_path / "run", [cases()[0], bad])
    code, report, stderr = export(tmp_path / "run", tmp_path / "s.jsonl", "--format", "specforge")
    assert "Traceback" not in stderr
    assert code == 1, stderr
    # Its template cannot render it: one row fails under its reason, named by file, line and id.
    assert report["exported"] == 1 and report["left_out"] == 1
    assert report["left_out_by_reason"]["failed"] == 1 and report["problems"] == {"render failed": 1}
    assert re.search(r"host-0of1-run-\d+\.jsonl:2: bad-calls: the chat template failed", stderr), stderr


@pytest.mark.parametrize(("template", "joined"), [("qwen3", "one two"), ("qwen3.6", "onetwo")])
def test_content_parts_are_flattened_as_sglang_flattens_them(tmp_path: Path, template: ChatTemplateName,
                                                             joined: str) -> None:
    """No ids: the row is re-rendered, and a list of text parts is handed to the template as SGLang hands it:
    one string of the parts joined by a space for a template that does not loop over a message's content
    (the Qwen3 style), the parts themselves for one that does (Qwen3.6's, which writes them one after the
    other). The count must agree with what the server reported for the same prompt as that one string."""
    text = served("as-text", ASK.format(joined), "Fine.\n</think>\n\nDone.<|im_end|>", template,
                  reasoning="Fine.", content="Done.")
    text["messages"] = [{"role": "user", "content": f"Question {joined}?"}]
    parts = dict(text, id="as-parts", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Question one"}, {"type": "text", "text": "two?"}]}])
    write_segment(tmp_path / "run", [without_ids(text), without_ids(parts)])
    for fmt in ("specforge", "specforge-tokenized", "parquet"):
        code, report, stderr = export(tmp_path / "run", tmp_path / f"o-{fmt}", "--format", fmt, template=template)
        assert "Traceback" not in stderr
        assert code == 0, stderr
        assert report["exported"] == 2 and report["prompt_mismatch"] == 0, fmt
