"""`client.estimate`'s numbers from the command line and from the results are bounded: a GPU count past
2^63 (--what-if-gpus, --project KINDxN) was a traceback, --rounds 99999999 ran for hours, --gpu-kind ''
was ignored in silence, and a record's `created` of ±1e308 ended in "cannot convert float NaN to integer".
Each is now refused with one line naming what is wrong, exit 2. The calibration sample on a full disk is
exit 4 (it was 2), with no half-written sample left."""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO, SAMPLE
from tests.test_export import cases


def _results(tmp: Path, created: float | None = None) -> tuple[Path, Path]:
    run = tmp / "run"
    (run / "segments").mkdir(parents=True)
    records = [{**cases()[0], "id": f"p{i}"} for i in range(3)]
    if created is not None:
        records[1]["created"] = created
    (run / "segments" / "h-0of1-r-00001.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    prompts = tmp / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": r["id"], "messages": [{"role": "user", "content": "q"}]})
                                 + b"\n" for r in records))
    return run, prompts


def _estimate(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.estimate", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("option", "value", "named"), [
    ("--what-if-gpus", str(2**64), "--what-if-gpus"),
    ("--what-if-gpus", "8,99999999999999999999", "--what-if-gpus"),
    ("--project", f"b200x{2**64}", "--project"),
    ("--gpus", str(2**64), "--gpus"),
    ("--what-if-max-tokens", str(2**64), "--what-if-max-tokens"),
    ("--rounds", "99999999", "--rounds"),
    ("--gpu-kind", "", "--gpu-kind"),
    ("--gpu-kind", "  ", "--gpu-kind"),
    ("--project", "", "--project"),
], ids=["what-if-gpus", "what-if-gpus-list", "project-count", "gpus", "what-if-max-tokens", "rounds",
        "gpu-kind-empty", "gpu-kind-blank", "project-empty"])
def test_an_absurd_option_is_refused_in_one_line(tmp_path: Path, option: str, value: str, named: str) -> None:
    run, prompts = _results(tmp_path)
    done = _estimate("--from-results", str(run), "--prompts", str(prompts), option, value)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert named in done.stderr


@pytest.mark.parametrize("created", [1e308, -1e308], ids=["far-future", "far-past"])
def test_a_record_with_an_absurd_created_is_refused_by_file_and_line(tmp_path: Path, created: float) -> None:
    run, prompts = _results(tmp_path, created)
    done = _estimate("--from-results", str(run), "--prompts", str(prompts))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "h-0of1-r-00001.jsonl:2: created" in last, last


def _file_size_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


def test_the_calibration_sample_on_a_full_disk_is_exit_4(tmp_path: Path) -> None:
    out = tmp_path / "calibration"
    done = subprocess.run([sys.executable, "-m", "client.estimate", "--simulate", "1", "--sample", "50", "--prompts",
                           str(SAMPLE), "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False, preexec_fn=_file_size_limit)
    assert done.returncode == 4, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert str(out / "sample.jsonl") in last and "free space" in last.lower(), last
    assert not (out / "sample.jsonl").exists()
