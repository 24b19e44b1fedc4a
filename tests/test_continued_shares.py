"""`continued` read back (client.results.rules.continued_shares): a continued reply's tokens per attempt must
describe the reply, or the audit fails it."""

from __future__ import annotations

from typing import Any

import pytest

from client.results.rules import continued_shares


def _record(parts: Any, ids: int | None = 10, usage: int | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {"id": "a", "continued": parts}
    if ids is not None:
        record["completion_token_ids"] = list(range(ids))
    if usage is not None:
        record["usage"] = {"completion_tokens": usage}
    return record


@pytest.mark.parametrize(("record", "expected"), [
    ({"id": "a"}, None),
    (_record([{"attempt": 1, "tokens": 4}, {"attempt": 2, "tokens": 6}]), (4, 6)),
    (_record([{"attempt": 1, "tokens": 2}, {"attempt": 3, "tokens": 3}, {"attempt": 4, "tokens": 5}]), (5, 5)),
    (_record([{"attempt": 1, "tokens": 4}, {"attempt": 2, "tokens": 6}], ids=None, usage=10), (4, 6)),
    (_record([{"attempt": 1, "tokens": 4}, {"attempt": 2, "tokens": 6}], ids=None), (4, 6)),
    (_record([{"attempt": 1, "tokens": 4}, {"attempt": 2, "tokens": 5}]), "add up to 9 tokens, the reply has 10"),
    (_record([{"attempt": 2, "tokens": 4}, {"attempt": 2, "tokens": 6}]), "do not rise"),
    (_record([{"attempt": 1, "tokens": 10}]), "not the shares of two attempts"),
    (_record("yes"), "not the shares of two attempts"),
    (_record([{"attempt": 1, "tokens": -1}, {"attempt": 2, "tokens": 11}]), "not {attempt, tokens}"),
    (_record([{"attempt": 1}, {"attempt": 2, "tokens": 10}]), "not {attempt, tokens}"),
])
def test_the_shares_of_a_continued_reply(record: dict[str, Any], expected: Any) -> None:
    found = continued_shares(record)
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found, found
    else:
        assert found == expected
