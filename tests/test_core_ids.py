"""The one id hash, the one raw-line id reader and the one ledger format (client.core.ids), and the
ledger's round trip through a real segment sidecar on disk."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.durations import format_duration
from client.core.ids import decode_ledger, encode_ledger, id_hash, leading_id, line_id, not_utf8, shard_of
from client.local.ledger import read_done_ids
from client.local.sink import ResultSink
from client.local.source import Shard

AWKWARD_IDS = ["plain", "with\nnewline", "with\rreturn", "crlf\r\nid", "ls\u2028sep", "nel\u0085x",
               'quote"inside', "back\\slash", "tab\there", "", " ", "ünïcödé", "emoji-🙂", '"starts-with-quote']


@pytest.mark.parametrize("prompt_id", AWKWARD_IDS)
def test_ledger_round_trips_any_json_string(prompt_id: str) -> None:
    blob = encode_ledger([prompt_id, "next"])
    assert blob.count(b"\n") == 2, "one line per id, whatever the id holds"
    assert decode_ledger(blob) == [prompt_id, "next"]


@pytest.mark.parametrize(("blob", "ids"), [
    (b"a\nb\n", ["a", "b"]),                      # a ledger written before ids were JSON-encoded
    (b"a\rb\n", ["a\rb"]),                        # legacy raw id with a CR stays one id
    (b'"x"\nlegacy\n"y\\ny"\n', ["x", "legacy", "y\ny"]),
    (b"", []),
    (b"\n\n", []),
])
def test_decode_ledger_reads_legacy_and_mixed_lines(blob: bytes, ids: list[str]) -> None:
    assert decode_ledger(blob) == ids


def test_decode_ledger_refuses_a_damaged_json_line() -> None:
    with pytest.raises(ValueError):  # orjson's decode error is a ValueError
        decode_ledger(b'"ok"\n"unterminated\n')


@pytest.mark.parametrize(("line", "leading", "parsed"), [
    (b'{"id": "a1", "messages": []}', "a1", "a1"),
    (b'  {"id":"b2"}', "b2", "b2"),
    (b'{"messages": [], "id": "late"}', None, "late"),
    (b'{"id": "esc\\"aped"}', None, 'esc"aped'),
    (b'{"id": "new\\nline"}', None, "new\nline"),
    (b'{"id": 7}', None, None),
    (b"not json", None, None),
    (b"[1, 2]", None, None),
    (b"", None, None),
    (b'{"id": "a\xff", "messages": []}', None, None),  # a byte that is not UTF-8: no id, and no decode error
    (b'{"messages": [], "id": "late\xfe"}', None, None),
    (b'{"id": "ok", "content": "\xff"}', "ok", "ok"),  # the id is readable; validation finds the rest
])
def test_line_id(line: bytes, leading: str | None, parsed: str | None) -> None:
    assert leading_id(line) == leading
    assert line_id(line) == parsed


@pytest.mark.parametrize(("line", "problem"), [
    (b'{"id": "a\xff"}', "not valid UTF-8: byte 0xff at byte 10 of the line"),
    (b"\xfe", "not valid UTF-8: byte 0xfe at byte 1 of the line"),
    (b'{"id": "\xc3"}', "not valid UTF-8: byte 0xc3 at byte 9 of the line"),  # a sequence cut short
    ('{"id": "ünïcödé"}'.encode(), None),
    (b"not json", None),  # UTF-8, so not this problem
    (b"", None),
])
def test_not_utf8_names_the_byte_and_where(line: bytes, problem: str | None) -> None:
    found = not_utf8(line)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def test_id_hash_is_stable_and_unsigned_64_bit() -> None:
    # Pinned: shards computed by an older client must still match.
    assert id_hash("p000001") == int.from_bytes(
        __import__("hashlib").blake2b(b"p000001", digest_size=8).digest(), "big")
    assert all(0 <= id_hash(i) < 2**64 for i in AWKWARD_IDS)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64])
def test_shard_of_matches_what_a_shard_owns(count: int) -> None:
    for n in range(200):
        prompt_id = f"id-{n}"
        owner = shard_of(prompt_id, count)
        assert [k for k in range(count) if Shard(k, count).owns(prompt_id)] == [owner]


def test_sink_sidecar_keeps_awkward_ids_whole(tmp_path: Path) -> None:
    sink = ResultSink(tmp_path, run_id="r1")
    ResultSink.prepare(tmp_path)
    for prompt_id in AWKWARD_IDS:
        sink.write_result({"id": prompt_id, "usage": {"completion_tokens": 1}})  # type: ignore[typeddict-item]
    sink.close()
    done, report = read_done_ids(tmp_path / "segments")
    assert done == set(AWKWARD_IDS)
    assert (report.records, report.duplicate_ids, report.corrupt_lines) == (len(AWKWARD_IDS), 0, 0)
    segment = next((tmp_path / "segments").glob("*.jsonl"))
    assert [orjson.loads(line)["id"] for line in segment.read_bytes().split(b"\n") if line] == AWKWARD_IDS


def test_sidecar_lost_after_crash_is_rebuilt_with_awkward_ids(tmp_path: Path) -> None:
    sink = ResultSink(tmp_path, run_id="r1")
    ResultSink.prepare(tmp_path)
    for prompt_id in AWKWARD_IDS:
        sink.write_result({"id": prompt_id, "usage": {"completion_tokens": 1}})  # type: ignore[typeddict-item]
    sink.close()
    for sidecar in (tmp_path / "segments").glob("*.ids"):
        sidecar.unlink()
    done, _ = read_done_ids(tmp_path / "segments")
    assert done == set(AWKWARD_IDS)
    again, _ = read_done_ids(tmp_path / "segments")  # now from the rewritten sidecar
    assert again == set(AWKWARD_IDS)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "?"), (-3, "0s"), (0, "0s"), (59.9, "59s"), (60, "1m00s"), (3599, "59m59s"), (3600, "1h00m"),
    (86399, "23h59m"), (86400, "1d00h00m"), (90061, "1d01h01m"),
])
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text
