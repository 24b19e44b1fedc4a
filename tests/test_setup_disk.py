"""The install scripts' care of the disk: `tests/setup/disk.sh` refuses an install that cannot fit with the
figures and what to do, and `tests/setup/share_venvs.sh` links only files that are truly the same."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parent / "setup"


def _free_mib(path: Path) -> int:
    return shutil.disk_usage(path).free // (1024 * 1024)


@pytest.mark.parametrize(
    ("need", "fits"),
    [
        pytest.param(1, True, id="one-mib"),
        pytest.param(10**9, False, id="a-petabyte"),
    ],
)
def test_disk_check_passes_or_names_the_shortfall(tmp_path: Path, need: int, fits: bool) -> None:
    done = subprocess.run(
        ["bash", str(SETUP / "disk.sh"), str(tmp_path), str(need), "a test venv"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    if fits:
        assert (done.returncode, done.stderr) == (0, "")
        return
    assert done.returncode == 1
    first = done.stderr.splitlines()[0]
    assert f"installing a test venv needs about {need} MiB free" in first
    free = int(first.rsplit(" has ", 1)[1].split()[0])
    assert abs(free - _free_mib(tmp_path)) < 512  # the figure is the file system's, read at the check
    assert "make engines" in done.stderr


def test_disk_check_usage_error() -> None:
    done = subprocess.run(["bash", str(SETUP / "disk.sh"), "."], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "usage:" in done.stderr


def test_share_venvs_links_only_identical_large_files(tmp_path: Path) -> None:
    (tmp_path / "tests" / "setup").mkdir(parents=True)
    shutil.copy(SETUP / "share_venvs.sh", tmp_path / "tests" / "setup")
    big = os.urandom(200 * 1024)
    files = {
        "same": (big, 0o644, 0o644),
        "other-content": (big, 0o644, None),
        "other-mode": (big, 0o644, 0o755),
        "small": (b"x" * 1024, 0o644, 0o644),
    }
    for name, (content, mode_a, mode_b) in files.items():
        for venv, mode in ((".venv", mode_a), (".venv-trainer", mode_b)):
            path = tmp_path / venv / "lib" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if mode is not None else os.urandom(len(content)))
            path.chmod(mode if mode is not None else mode_a)
    (tmp_path / "not-a-venv").mkdir()
    (tmp_path / "not-a-venv" / "same").write_bytes(big)

    done = subprocess.run(
        ["bash", str(tmp_path / "tests" / "setup" / "share_venvs.sh")], capture_output=True, text=True, check=False
    )

    assert done.returncode == 0, done.stderr
    assert "2 venvs:" in done.stderr

    def linked(name: str) -> bool:
        return (tmp_path / ".venv" / "lib" / name).samefile(tmp_path / ".venv-trainer" / "lib" / name)

    assert {name: linked(name) for name in files} == {
        "same": True,
        "other-content": False,
        "other-mode": False,
        "small": False,
    }
    assert (tmp_path / "not-a-venv" / "same").stat().st_nlink == 1
    assert (tmp_path / ".venv" / "lib" / "same").read_bytes() == big


def test_share_venvs_never_stops_the_install(tmp_path: Path) -> None:
    # A hardlink that fails (venvs on two file systems, say): the venvs keep their copies, the install goes on.
    (tmp_path / "tests" / "setup").mkdir(parents=True)
    shutil.copy(SETUP / "share_venvs.sh", tmp_path / "tests" / "setup")
    for venv in (".venv", ".venv-trainer"):
        (tmp_path / venv).mkdir()
    failing = tmp_path / "bin" / "hardlink"
    failing.parent.mkdir()
    failing.write_text("#!/bin/sh\necho 'hardlink: cannot link: Invalid cross-device link' >&2\nexit 1\n")
    failing.chmod(0o755)

    done = subprocess.run(
        ["bash", str(tmp_path / "tests" / "setup" / "share_venvs.sh")], capture_output=True, text=True,
        check=False, env={**os.environ, "PATH": f"{failing.parent}{os.pathsep}{os.environ['PATH']}"},
    )

    assert done.returncode == 0, done.stderr
    assert "hardlink could not share every file" in done.stderr
    assert "Invalid cross-device link" in done.stderr
    assert "2 venvs: nothing shared" in done.stderr
