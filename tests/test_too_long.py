"""Prompts longer than the server's context are a permanent class, `too_long`: counted apart, shown in the
summary and the reconciliation, not sent again by the next run unless --retry-too-long."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.errors import RequestRejected, ServerError, TooLong, error_for_status
from tests.conftest import read_failures, read_results, run_client
from tests.servers.harness import ServerGroup


@pytest.mark.parametrize(("status", "body", "kind"), [
    (400, b'{"message": "This model\'s maximum context length is 4096 tokens. However, you requested 5000 tokens."}',
     TooLong),
    (400, b"The input (5000 tokens) is longer than the model's context length (4096 tokens).", TooLong),
    (400, b"Requested token count exceeds the model's maximum context length of 4096 tokens.", TooLong),
    (400, b'{"error": {"code": "context_length_exceeded", "message": "too many tokens"}}', TooLong),
    (422, b"prompt exceeds the available context size, try increasing it", TooLong),
    (400, b"Unexpected fields in the request: {'top_k'}", RequestRejected),
    (404, b"maximum context length", RequestRejected),   # a 404 is a wrong path, whatever it says
    (500, b"maximum context length", ServerError),
])
def test_context_overflow_is_told_apart(status: int, body: bytes, kind: type) -> None:
    error = error_for_status(status, body)
    assert type(error) is kind
    if kind is TooLong:
        assert error.kind == "too_long" and not error.retryable


def _prompts(path: Path) -> Path:
    lines = []
    for i in range(8):
        words = 60 if i % 4 == 0 else 3  # ids q0, q4 are over the 48-token context with max_tokens 16
        message = {"role": "user", "content": " ".join(["word"] * words)}
        lines.append(orjson.dumps({"id": f"q{i}", "messages": [message]}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_too_long_is_counted_apart_and_not_retried(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("normal", extra=("--max-model-len", "48"))
    prompts = _prompts(tmp_path / "p.jsonl")
    out = tmp_path / "out"
    args = ["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out), "--max-tokens", "16"]

    first = run_client(args)
    assert first.code == 0, first.stderr  # too_long alone is not a failure to retry
    assert sorted(r["id"] for r in read_results(out)) == ["q1", "q2", "q3", "q5", "q6", "q7"]
    failures = read_failures(out)
    assert sorted(f["id"] for f in failures) == ["q0", "q4"]
    assert {f["error_class"] for f in failures} == {"too_long"}
    assert all("maximum context length is 48 tokens" in f["last_error"] for f in failures)
    assert all(f["attempts"] == 1 for f in failures), "a permanent class is not retried within the run"
    assert "2 prompt(s) are longer than the server's context (too_long" in first.stderr
    assert "failed 2 (too_long 2)" in first.stderr

    posts_before = sum(r.get("method") == "POST" for r in server.log_records())
    second = run_client(args)
    assert second.code == 0, second.stderr
    assert "leaving out 2 prompt(s) an earlier run found longer than the server's context" in second.stderr
    assert "too-long-or-fills-window-earlier 2" in second.stderr
    posts = sum(r.get("method") == "POST" for r in server.log_records()) - posts_before
    assert posts == 1, "only the preflight request; the too_long prompts were not sent again"

    third = run_client([*args, "--retry-too-long"])
    assert third.code == 0, third.stderr
    assert "failed 2 (too_long 2)" in third.stderr
    assert len(read_results(out)) == 6
