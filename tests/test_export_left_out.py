"""The export's summary names every record it leaves out under its one reason, and the counts add up to the
records read: exported plus each reason's count is every record, in the JSON report and on the summary
line (which once showed "dropped as truncated 0" beside rows left out for other reasons)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.export.build import LEFT_OUT_REASONS
from tests.results_fixture import result, write_segment
from tests.test_export import cases, export, without_ids
from tests.test_export_fidelity import trainer_template


def _records() -> list[dict[str, Any]]:
    plain, no_think, tools, cut = cases()
    loop = without_ids(result("loop", reasoning="again " * 40, content="", finish_reason="repetition"))
    altered = without_ids(no_think)
    altered["id"], altered["content"] = "altered", altered["content"] + " Also rain."  # counts not the server's
    bad = without_ids(result("bad-calls", tool_calls="get_weather(Paris)"))  # type: ignore[arg-type]
    bad["tool_calls"] = "get_weather(Paris)"  # the template cannot render it
    empty = without_ids(result("no-messages"))
    empty["messages"] = []  # nothing to render
    return [plain, tools, cut, loop, altered, bad, empty, plain]  # the last: a duplicate id


def _line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("exported "))


def _adds_up(report: dict[str, Any]) -> dict[str, int]:
    reasons: dict[str, int] = report["left_out_by_reason"]
    assert set(reasons) == set(LEFT_OUT_REASONS)
    assert report["exported"] + sum(reasons.values()) == report["records"]
    return {reason: count for reason, count in reasons.items() if count}


@pytest.mark.parametrize("fmt", ["specforge", "parquet"])
def test_every_record_left_out_is_counted_under_its_reason(tmp_path: Path, fmt: str) -> None:
    write_segment(tmp_path / "run", _records())
    out = tmp_path / ("t.jsonl" if fmt == "specforge" else "t.parquet")
    code, report, stderr = export(tmp_path / "run", out, "--format", fmt)
    assert code == 1, stderr
    reasons = _adds_up(report)
    expected = {"dropped_loops": 1, "mismatched_left_out": 1, "failed": 2, "duplicates": 1}
    if fmt == "specforge":
        expected["unreproducible"] = 1  # "cut" ended by max_tokens: SpecForge would close it
    assert reasons == expected
    assert report["records"] == 8 and report["exported"] == 8 - sum(expected.values())
    line = _line(stderr)
    assert f"exported {report['exported']} of 8 record(s)" in line
    assert f"left out {sum(expected.values())} (" in line
    for named in ("loops 1", "token counts not the server's 1", "render failures 2", "duplicate ids 1"):
        assert named in line
    assert ("did not end by themselves 1" in line) == (fmt == "specforge")
    assert "dropped as truncated" not in line


def test_rows_the_template_check_and_the_window_leave_out_are_counted(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", cases())
    code, report, stderr = export(tmp_path / "run", tmp_path / "a.jsonl", "--format", "specforge", "--chat-template",
                                  str(trainer_template(tmp_path)), "--max-template-mismatch", "1")
    assert code == 1, stderr
    assert _adds_up(report) == {"template_left_out": 3, "unreproducible": 1}
    assert "left out 4 (did not end by themselves 1, trained differently by the template 3)" in _line(stderr)
    code, report, stderr = export(tmp_path / "run", tmp_path / "b.parquet", "--max-length", "20",
                                  "--over-length", "drop", "--drop-truncated")
    assert _adds_up(report) == {"dropped_truncated": 1, "dropped_long": 3}, stderr
    assert "left out 4 (truncated (--drop-truncated) 1, longer than --max-length 3)" in _line(stderr)
