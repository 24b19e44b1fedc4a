"""Readiness as a user meets it: a server without /health, a slow /health, and an endpoint that never gets
ready, whose reason shows in the plain progress lines while the rest of the fleet does the work."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_prompts, read_results, run_client
from tests.servers.harness import ServerGroup


def test_no_health_route_is_ready_by_models(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("health404")
    prompts = make_prompts(tmp_path / "p.jsonl", 6)
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 0, result.stderr
    assert f"{server.url}: no /health route; ready because /v1/models answers" in result.stderr
    assert len(read_results(tmp_path / "out")) == 6
    # The readiness probe's /v1/models is the one the model, context and kind checks read.
    assert [r["path"] for r in server.log_records()].count("/v1/models") == 1


def test_models_are_asked_once_at_start(servers: ServerGroup, tmp_path: Path) -> None:
    """resolve_model, check_max_tokens and the preflight's kind detection read one /v1/models answer."""
    server = servers.oddserver()
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 0, result.stderr
    assert [r["path"] for r in server.log_records()].count("/v1/models") == 1


@pytest.mark.slow
def test_slow_health_is_waited_for(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("health_slow", extra=("--health-delay", "7"))  # over the old 5 s limit
    prompts = make_prompts(tmp_path / "p.jsonl", 4)
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 0, result.stderr
    assert "cannot reach" not in result.stderr
    assert len(read_results(tmp_path / "out")) == 4


@pytest.mark.slow
def test_an_endpoint_never_ready_shows_why(servers: ServerGroup, tmp_path: Path) -> None:
    good = servers.oddserver("normal", extra=("--chunk-delay", "0.15"))
    loading = servers.oddserver("normal", extra=("--health-status", "503"))
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    result = run_client(["--endpoints", f"{good.url},{loading.url}", "--prompts", str(prompts),
                         "--out", str(tmp_path / "out"), "--max-in-flight", "4"])
    assert result.code == 0, result.stderr
    assert f"{loading.url} starting: not ready: /health answered 503 (still starting?)" in result.stdout
    records = read_results(tmp_path / "out")
    assert len(records) == 12 and {r["endpoint"] for r in records} == {good.url}
