"""Prompt reading: every kind of bad record is reported with file and line; done ids are skipped."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from client.core.errors import InputError
from client.core.ids import leading_id
from client.core.records import LineProblem
from client.local.source import PromptSource, Shard, count_remaining

GOOD = {"id": "a", "messages": [{"role": "user", "content": "hi"}]}


def write_lines(path: Path, lines: list[bytes | dict[str, object]]) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else orjson.dumps(line)) + b"\n" for line in lines))
    return path


BAD_CASES = [
    ("not JSON", b'{"id": "x", "messages": [', "not valid JSON"),
    ("missing id", {"messages": [{"role": "user", "content": "hi"}]}, "id"),
    ("non-string id", {"id": 7, "messages": [{"role": "user", "content": "hi"}]}, "id"),
    ("messages not a list", {"id": "x", "messages": "hi"}, "messages"),
    ("unknown role", {"id": "x", "messages": [{"role": "robot", "content": "hi"}]}, "robot"),
    ("content of the wrong type", {"id": "x", "messages": [{"role": "user", "content": 42}]}, "content"),
    ("tools not a list", {"id": "x", "messages": [{"role": "user", "content": "hi"}], "tools": {"a": 1}}, "tools"),
    ("tool not a function schema",
     {"id": "x", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools[0]"),
    ("id not UTF-8", b'{"id": "a\xff", "messages": [{"role": "user", "content": "hi"}]}',
     "not valid UTF-8: byte 0xff at byte 10"),
    ("late id not UTF-8", b'{"messages": [{"role": "user", "content": "hi"}], "id": "\xfe"}',
     "not valid UTF-8: byte 0xfe"),
    ("content not UTF-8", b'{"id": "x", "messages": [{"role": "user", "content": "h\xffi"}]}',
     "not valid UTF-8: byte 0xff"),
]


@pytest.mark.parametrize(("name", "line", "expected"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_record_is_reported_with_file_and_line(tmp_path: Path, name: str, line: bytes | dict[str, object],
                                                   expected: str) -> None:
    path = write_lines(tmp_path / "p.jsonl", [GOOD, line, {**GOOD, "id": "b"}])
    source = PromptSource([path], set())
    ids = [p.id for p in source]
    assert ids == ["a", "b"], "the bad record is skipped, the others are kept"
    assert source.counts.invalid == 1
    (problem,) = source.counts.problems
    assert problem.where == str(path) and problem.line == 2
    assert expected in problem.problem
    assert str(problem).startswith(f"{path}:2: ")


@pytest.mark.parametrize(("name", "line", "expected"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_record_stops_under_strict(tmp_path: Path, name: str, line: bytes | dict[str, object],
                                       expected: str) -> None:
    path = write_lines(tmp_path / "p.jsonl", [GOOD, line])
    with pytest.raises(InputError, match=rf"p\.jsonl:2: .*{re.escape(expected)}"):
        list(PromptSource([path], set(), strict=True))


def test_duplicate_id_is_reported(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [GOOD, b"", GOOD])
    source = PromptSource([path], set())
    assert [p.id for p in source] == ["a"]
    assert source.counts.duplicates == 1
    assert source.counts.problems[0].line == 3
    assert 'duplicate id "a"' in source.counts.problems[0].problem


def test_duplicate_of_a_done_id_is_still_reported(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [GOOD, GOOD])
    source = PromptSource([path], {"a"})
    assert list(source) == []
    assert source.counts.skipped_done == 1 and source.counts.duplicates == 1


def test_done_ids_skipped_and_counted_across_files(tmp_path: Path) -> None:
    first = write_lines(tmp_path / "1.jsonl", [{**GOOD, "id": f"p{i}"} for i in range(5)])
    second = write_lines(tmp_path / "2.jsonl", [{"messages": GOOD["messages"], "id": f"q{i}"} for i in range(5)])
    done = {"p1", "p3", "q0"}
    source = PromptSource([first, second], done)
    ids = [p.id for p in source]
    assert ids == ["p0", "p2", "p4", "q1", "q2", "q3", "q4"]
    assert source.counts.skipped_done == 3
    assert count_remaining([first, second], done) == 7
    prompt = PromptSource([second], set())
    assert next(iter(prompt)).line == 1


def test_count_remaining_skips_a_line_that_is_not_utf8(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "p.jsonl", [GOOD, b'{"id": "a\xff", "messages": []}', {**GOOD, "id": "b"}])
    assert count_remaining([path], set()) == 2
    assert count_remaining([path], {"a"}) == 1


def test_shards_partition_ids() -> None:
    ids = [f"id-{i}" for i in range(1000)]
    shards = [Shard(k, 3) for k in range(3)]
    owners = [[s.owns(i) for s in shards].count(True) for i in ids]
    assert owners == [1] * 1000
    sizes = [sum(s.owns(i) for i in ids) for s in shards]
    assert all(250 < size < 420 for size in sizes)


@pytest.mark.parametrize(("text", "ok"), [("0/1", True), ("2/4", True), ("4/4", False), ("1", False), ("a/b", False)])
def test_shard_parse(text: str, ok: bool) -> None:
    if ok:
        assert Shard.parse(text).count >= 1
    else:
        with pytest.raises(ValueError, match="--shard"):
            Shard.parse(text)


@pytest.mark.parametrize(("line", "expected"), [
    (b'{"id":"abc","messages":[]}', "abc"),
    (b'{ "id" : "a b" , "x": 1}', "a b"),
    (b'{"messages":[],"id":"late"}', None),
    (b'{"id":"esc\\"aped"}', None),
    (b'{"id":5}', None),
])
def test_leading_id(line: bytes, expected: str | None) -> None:
    assert leading_id(line) == expected


@pytest.mark.parametrize(("problem", "shown"), [
    (LineProblem("p.jsonl", 2, "not valid JSON"), "p.jsonl:2: not valid JSON"),
    (LineProblem("s3://b/p/segments/x.jsonl", 0, "truncated"), "s3://b/p/segments/x.jsonl: truncated"),
])
def test_one_line_problem_for_prompts_and_results(problem: LineProblem, shown: str) -> None:
    # The source's bad records and the results reader's bad lines are the same type, shown the same way.
    assert str(problem) == shown
