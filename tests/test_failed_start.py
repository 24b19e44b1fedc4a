"""A run that fails at start (here: an unreachable endpoint, exit 2) leaves no empty run folder behind:
the `--out` it created, and the parents it created for it, are removed; an `--out` that existed before
is left as it was."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_prompts, run_client


@pytest.fixture
def refusing_url() -> Iterator[str]:
    # A bound socket that never listens: every connection to it is refused, at once.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"


def test_an_unreachable_endpoint_leaves_no_out_it_created(tmp_path: Path, refusing_url: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    out = tmp_path / "runs" / "first"
    result = run_client(["--endpoints", refusing_url, "--prompts", str(prompts), "--out", str(out)])
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists(), "the folders this run made are removed again"


def test_an_out_that_existed_before_is_left_as_it_was(tmp_path: Path, refusing_url: str) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    out = tmp_path / "out"
    out.mkdir()
    result = run_client(["--endpoints", refusing_url, "--prompts", str(prompts), "--out", str(out)])
    assert result.code == 2, result.stderr
    assert out.is_dir()
