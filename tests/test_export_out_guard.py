"""`client.export --out` never overwrites a run's own files: a path inside the run's directory (a segment, an
`.ids` sidecar, run.json) or an existing file that is not parquet is refused with exit 2 and left as it was;
a previous export (parquet) may be replaced."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from client.core.errors import ConfigError
from client.export.main import check_out_is_safe
from tests.conftest import REPO
from tests.results_fixture import result, write_segment
from tests.tokenizer_fixture import tiny_tokenizer_dir


@pytest.mark.parametrize(("where", "content", "refused"), [
    ("run/segments/seg.jsonl", b'{"id": "a"}\n', "inside the run's directory"),
    ("run/segments/seg.ids", b"a\n", "inside the run's directory"),
    ("run/run.json", b"{}", "inside the run's directory"),
    ("run/train.parquet", None, "inside the run's directory"),  # even a new file: the run's folder is not OUT's
    ("notes.jsonl", b'{"id": "a"}\n', "is not a parquet file"),
    ("train.parquet", b"PAR1....PAR1", None),  # a previous export
    ("new.parquet", None, None),
])
def test_out_guard(tmp_path: Path, where: str, content: bytes | None, refused: str | None) -> None:
    (tmp_path / "run" / "segments").mkdir(parents=True)
    out = tmp_path / where
    if content is not None:
        out.write_bytes(content)
    if refused is None:
        check_out_is_safe(out, str(tmp_path / "run"))
    else:
        with pytest.raises(ConfigError, match=refused):
            check_out_is_safe(out, str(tmp_path / "run"))


def test_export_over_a_segment_is_refused_and_the_segment_kept(tmp_path: Path) -> None:
    run = tmp_path / "run"
    segment = write_segment(run, [result(f"r{i}") for i in range(3)])
    before = segment.read_bytes()
    done = subprocess.run([sys.executable, "-m", "client.export", str(run), "--tokenizer", str(tiny_tokenizer_dir()),
                           "--out", str(segment)], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "inside the run's directory" in done.stderr and "Traceback" not in done.stderr
    assert segment.read_bytes() == before
