"""`client.export` without the `export` extra: `--help` and the option errors still work, and a run says
which extra to install and exits 2 instead of a ModuleNotFoundError traceback.

The extra is not uninstalled: the command runs in a subprocess whose import system refuses the extra's
module, as an interpreter without it would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.results_fixture import result, write_segment

# Runs `python -m client.export ARGS` with a finder first on sys.meta_path that refuses BLOCKED (and its
# submodules) the way a missing package is refused.
BLOCKER = """\
import runpy, sys
BLOCKED = sys.argv.pop(1)
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Refuse())
sys.argv[0] = "client.export"
runpy.run_module("client.export", run_name="__main__", alter_sys=True)
"""


def export_without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKER, module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_blocker_refuses_the_module() -> None:
    proc = subprocess.run([sys.executable, "-c", BLOCKER.replace('runpy.run_module("client.export", '
                                                                 'run_name="__main__", alter_sys=True)',
                                                                 "import pyarrow.parquet"), "pyarrow"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "ModuleNotFoundError: No module named 'pyarrow'" in proc.stderr


@pytest.mark.parametrize("module", ["pyarrow", "tokenizers", "jinja2"])
def test_help_needs_no_extra(module: str) -> None:
    proc = export_without(module, "--help")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("usage: python -m client.export") and "exit codes:" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("module", ["pyarrow", "tokenizers", "jinja2"])
def test_a_run_without_the_extra_says_what_to_install(tmp_path: Path, module: str) -> None:
    write_segment(tmp_path / "run", [result("p0")])
    (tmp_path / "tok").mkdir()
    proc = export_without(module, str(tmp_path / "run"), "--tokenizer", str(tmp_path / "tok"),
                          "--out", str(tmp_path / "out.parquet"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"error: client.export needs the `export` extra, and {module} cannot be imported")
    assert "pip install -e '.[export]'" in proc.stderr
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "out.parquet.part").exists()


def test_an_option_error_needs_no_extra(tmp_path: Path) -> None:
    proc = export_without("pyarrow", str(tmp_path), "--tokenizer", "t", "--out", "x.parquet", "--row-group-size", "0")
    assert proc.returncode == 2
    assert "argument --row-group-size: must be at least 1, got 0" in proc.stderr and "Traceback" not in proc.stderr
