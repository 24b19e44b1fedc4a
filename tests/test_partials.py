"""OUT/partials (client.local.partials) and what the keeper appends (client.engine.partials): a reply's ids are
written once each, in order, split by attempt; a torn last line is left out; a file of a done prompt goes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from client.core.records import Prompt
from client.engine.native_reply import ReplyInProgress
from client.engine.partials import PartialKeeper, _chunks
from client.local.partials import PartialStore


def _prompt(prompt_id: str) -> Prompt:
    return Prompt(prompt_id, [{"role": "user", "content": "hi"}], None, None, "p.jsonl", 1)


def test_the_ids_since_a_save_are_cut_where_an_attempt_ends() -> None:
    reply = ReplyInProgress(prompt_ids=[1], ids=list(range(10)), parts=[{"attempt": 1, "tokens": 4}])
    reply.open_attempt, reply.open_from = 3, 4
    assert _chunks(reply, 0) == [(1, [0, 1, 2, 3]), (3, [4, 5, 6, 7, 8, 9])]
    assert _chunks(reply, 2) == [(1, [2, 3]), (3, [4, 5, 6, 7, 8, 9])]
    assert _chunks(reply, 6) == [(3, [6, 7, 8, 9])]
    assert _chunks(reply, 10) == []


def test_a_reply_saved_in_steps_reads_back_whole_and_a_torn_line_is_left_out(tmp_path: Path) -> None:
    store = PartialStore(tmp_path)
    keeper = PartialKeeper(store, {}, lambda prompt: "k")
    reply = keeper.begin(_prompt("a"))
    reply.prompt_ids = [7, 8]
    reply.open(1)
    reply.ids.extend([1, 2, 3])
    asyncio.run(keeper.flush())
    reply.ids.extend([4])
    reply.close_attempt()
    reply.open(2)
    reply.ids.extend([5, 6])
    asyncio.run(keeper.flush())
    asyncio.run(keeper.flush())  # nothing new: nothing written
    saved, unreadable = store.load(set())
    assert unreadable == 0
    assert (saved["a"].prompt_ids, saved["a"].ids, saved["a"].parts, saved["a"].key) == (
        [7, 8], [1, 2, 3, 4, 5, 6], [{"attempt": 1, "tokens": 4}, {"attempt": 2, "tokens": 2}], "k")
    path = next((tmp_path / "partials").glob("*.jsonl"))
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
    # Two saves, three lines after the header (the second cut where attempt 1 ended): each id written once.
    assert [(line["attempt"], line["ids"]) for line in lines] == [(1, [1, 2, 3]), (1, [4]), (2, [5, 6])]
    with path.open("ab") as handle:
        handle.write(b'{"attempt": 2, "ids": [9, 1')  # a kill in the middle of a line
    assert store.load(set())[0]["a"].ids == [1, 2, 3, 4, 5, 6]
    # The next run restores it, attempts counted on; its record written, the file goes.
    restored = PartialKeeper(store, store.load(set())[0], lambda prompt: "k")
    again = restored.begin(_prompt("a"))
    assert (again.ids, again.attempt_offset, restored.restored) == ([1, 2, 3, 4, 5, 6], 2, 1)
    restored.end("a")
    asyncio.run(restored.flush())
    assert not list((tmp_path / "partials").glob("*.jsonl"))


def test_a_saved_reply_of_an_edited_prompt_is_dropped_and_one_of_a_done_prompt_removed(tmp_path: Path) -> None:
    store = PartialStore(tmp_path)
    keeper = PartialKeeper(store, {}, lambda prompt: "old")
    for prompt_id in ("a", "b"):
        reply = keeper.begin(_prompt(prompt_id))
        reply.prompt_ids = [1]
        reply.open(1)
        reply.ids.extend([5, 6])
    asyncio.run(keeper.flush())
    saved, _ = store.load({"b"})  # b's record was written before its file went
    assert list(saved) == ["a"] and len(list((tmp_path / "partials").glob("*.jsonl"))) == 1
    edited = PartialKeeper(store, saved, lambda prompt: "new")
    assert edited.begin(_prompt("a")).ids == [] and edited.dropped == 1
    asyncio.run(edited.flush())
    assert not list((tmp_path / "partials").glob("*.jsonl"))
