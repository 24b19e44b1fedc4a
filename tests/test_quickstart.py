"""The README's Quickstart, run as written in a fresh copy of the repository, then audited and exported in
every format: every record of the demo run is exported or left out by a documented rule, none mismatched.

The copy holds the tracked files only (what a clone holds: no runs/, no caches), and the tiny tokenizer's
cache is a new directory, so the build on first use is part of the run. The set-up line (`-m venv` and
`pip install`) is the one thing not run: a test has no network, so the copy's `.venv` is this test's own
environment, which holds the same packages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from client.export.formats import FORMATS
from tests.conftest import REPO


def quickstart_commands(readme: str) -> list[str]:
    """The lines of the first bash block under the `## Quickstart...` heading."""
    section = readme.split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert found, "the Quickstart has no bash block"
    return [line for line in found.group(1).splitlines() if line.strip()]


def _fresh_copy(target: Path) -> Path:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if name and (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    (target / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return target


def test_the_commands_are_the_ones_documented() -> None:
    commands = quickstart_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert commands[0].endswith("-m venv .venv && .venv/bin/pip install -e '.[sim,export]'")
    assert commands[1:] == [
        ". .venv/bin/activate",
        "python -m client.run --simulate 4 --prompts prompts/sample.jsonl --out runs/demo",
        "python -m client.audit runs/demo",
        "python -m client.export runs/demo --tokenizer sim --out runs/demo.parquet",
    ]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_quickstart_reaches_a_training_file_in_every_format(tmp_path: Path) -> None:
    clone = _fresh_copy(tmp_path / "regen-swarm")
    commands = quickstart_commands((clone / "README.md").read_text(encoding="utf-8"))
    script = "\n".join(["set -e", *(line for line in commands if " -m venv " not in line)])
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(REGEN_SWARM_CACHE=str(tmp_path / "cache"), NO_COLOR="1", COLUMNS="100")
    proc = subprocess.run(["bash", "-c", script], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=540, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (tmp_path / "cache" / "tiny-qwen-tokenizer").is_dir(), "the tokenizer was built on first use"
    # The run named its output and the next commands; the audit passed; the parquet holds every record.
    assert "output: runs/demo holds 264 record(s) in segments/ (264 written by this run)" in proc.stderr
    assert "  python -m client.export runs/demo --tokenizer sim --out runs/demo.parquet" in proc.stderr
    assert "verdict: HEALTHY" in " ".join(proc.stdout.split())
    assert "exported 264 of 264 record(s) to runs/demo.parquet (264 from server token ids" in proc.stderr

    python = str(clone / ".venv" / "bin" / "python")
    for name, fmt in FORMATS.items():
        out = clone / "runs" / f"demo-{name}.{'parquet' if fmt.storage == 'parquet' else 'jsonl'}"
        done = subprocess.run([python, "-m", "client.export", "runs/demo", "--tokenizer", "sim", "--format", name,
                               "--out", str(out), "--json"], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        report = orjson.loads(done.stdout)
        assert report["records"] == 264
        assert report["completion_mismatch"] == report["prompt_mismatch"] == report["failed"] == 0, report
        # Every record is exported, or left out by a documented rule and counted.
        left_by_rule = report["dropped_loops"] + report["unreproducible"]
        assert report["exported"] + left_by_rule == 264, report
        assert report["exact"] == report["exported"], "every exported row is the servers' own token ids"
        if name != "specforge":
            assert report["exported"] == 264, report
