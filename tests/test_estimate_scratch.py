"""`client.estimate --simulate` leaves nothing behind unless asked: its sample and results (tens of MB on
the sample set) go to a temporary directory removed at exit; `--out DIR` keeps them there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO


def _prompts(path: Path) -> Path:
    path.write_bytes(b"".join(orjson.dumps({"id": f"q{i}", "messages": [{"role": "user", "content": f"q {i}"}]})
                              + b"\n" for i in range(12)))
    return path


def _estimate(cwd: Path, scratch: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(scratch),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "client.estimate", "--simulate", "1", "--sample", "8",
                           "--sim-arg=--mean-tokens", "--sim-arg=40", "--progress-every", "60", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_a_simulated_calibration_leaves_no_folder_unless_kept(tmp_path: Path) -> None:
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    prompts = _prompts(work / "p.jsonl")
    plain = _estimate(work, scratch, "--prompts", str(prompts))
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "results not kept (--out DIR keeps them)" in plain.stdout, plain.stdout
    assert not (work / "runs").exists(), "no runs/estimate-* folder in the current directory"
    assert not [p for p in scratch.iterdir() if p.name.startswith("regen-estimate-")], "the temporary one is removed"

    kept = _estimate(work, scratch, "--prompts", str(prompts), "--out", str(work / "cal"))
    assert kept.returncode == 0, kept.stderr[-3000:]
    cal = work / "cal"
    assert (f"sample and results kept in {cal} (sample.jsonl, segments/; --from-results {cal} re-reads them)"
            in " ".join(kept.stdout.split())), kept.stdout
    again = _estimate(work, scratch, "--prompts", str(prompts), "--out", str(work / "cal2"), "--json")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["input"]["out"] == str(work / "cal2")
    assert (work / "cal" / "sample.jsonl").exists() and list((work / "cal" / "segments").glob("*.jsonl"))
