"""`--turns all` and too_long: a conversation whose next turn is longer than the server's context is left
out by the next run, as a too_long prompt is with `--turns last` (its history is made of written turns,
so the turn would be just as long again); --retry-too-long sends it again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from client.engine.turns import TurnLedger, too_long_conversations
from tests.conftest import read_failures, read_results, run_client
from tests.servers.harness import ServerGroup


@pytest.mark.parametrize(("events", "expected"), [
    (["c#2"], {"c"}),      # turn 1 written, turn 2 too long: c resumes at turn 2, which is too long
    (["c#1"], set()),      # c has a written turn 1 (a later run with --retry-too-long got through)
    (["new#1"], {"new"}),  # nothing written yet: turn 1 is the next
    (["done#3"], set()),   # finished conversations are never resumed
    (["plain"], set()),    # not an event id
])
def test_too_long_conversations(events: list[str], expected: set[str]) -> None:
    ledger = TurnLedger(finished={"done"}, latest={"c": {"turn": 1}})
    assert too_long_conversations(ledger, events) == expected


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerGroup]:
    with ServerGroup(tmp_path) as group:
        yield group


def conversation(cid: str, last_user_words: int) -> bytes:
    return orjson.dumps({"id": cid, "messages": [
        {"role": "user", "content": "say hi"},
        {"role": "assistant", "content": "SOURCE hi"},
        {"role": "user", "content": " ".join(["word"] * last_user_words)}]})


def chat_posts(server: object) -> int:
    return sum(r.get("method") == "POST" for r in server.log_records())  # type: ignore[attr-defined]


def test_a_too_long_turn_is_sent_once_not_on_every_run(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("normal", extra=("--max-model-len", "48"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(conversation("long", 60) + b"\n" + conversation("short", 2) + b"\n")
    out = tmp_path / "out"
    args = ["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out), "--max-tokens", "12",
            "--turns", "all"]

    first = run_client(args)  # max_tokens 12: the whole answer, so each turn ends by itself
    assert first.code == 0, first.stderr[-2000:]
    assert sorted(r["id"] for r in read_results(out)) == ["long#1", "short#1", "short#2!"]
    assert [(f["id"], f["error_class"]) for f in read_failures(out)] == [("long#2", "too_long")]

    for _ in range(2):
        before = chat_posts(server)
        again = run_client(args)
        assert again.code == 0, again.stderr[-2000:]
        assert "leaving out 1 prompt(s) an earlier run found longer than the server's context" in again.stderr
        assert chat_posts(server) - before == 1, "only the preflight: the too_long turn was not sent again"
    assert len(read_failures(out)) == 1

    before = chat_posts(server)
    retried = run_client([*args, "--retry-too-long"])
    assert retried.code == 0, retried.stderr[-2000:]
    assert chat_posts(server) - before == 2, "the preflight and the too_long turn, once more"
