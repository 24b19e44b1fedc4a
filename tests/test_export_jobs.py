"""The template check on worker processes (`--jobs`) writes what one process writes: the same rows in the
same order, the same report with the same examples in the same order, rows checked and rows passed through
unchecked (records without the server's ids) kept in their places."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.export.checking import CHUNK
from tests.results_fixture import write_segment
from tests.test_export import cases, export, without_ids
from tests.test_export_fidelity import trainer_template


def _records(count: int) -> list[dict[str, Any]]:
    out = []
    for index in range(count):
        for record in cases():
            record = {**record, "id": f"{record['id']}-{index}"}
            out.append(without_ids(record) if index % 5 == 4 else record)  # re-rendered: not checked
    return out


@pytest.mark.parametrize("trainer", [True, False])
def test_worker_processes_write_what_one_process_writes(tmp_path: Path, trainer: bool) -> None:
    records = _records(CHUNK)  # more than two chunks: the pool starts, several chunks are out at once
    write_segment(tmp_path / "run", records)
    # A trainer's template that differs: every checked row is a mismatch with its example, in order; the
    # serving one: the re-rendered rows are exported unchecked between the checked ones.
    template = ["--chat-template", str(trainer_template(tmp_path))] if trainer else []
    results = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}.jsonl"
        code, report, stderr = export(tmp_path / "run", out, "--format", "specforge", "--jobs", jobs,
                                      *template, "--allow-template-mismatch")
        assert code in (0, 1) and not stderr.count("Traceback"), stderr
        results[jobs] = (out.read_bytes(), report, stderr.replace(str(out), "OUT"))
    assert results["1"] == results["2"]
    rows, report, _ = results["2"]
    assert report["template"]["checked"] > 2 * CHUNK
    assert report["template"]["mismatched"] > 0 and (report["template"]["unchecked"] > 0) != trainer
    assert report["exported"] + sum(report["left_out_by_reason"].values()) == report["records"] == len(records)
    assert len(rows.splitlines()) == report["exported"]
