"""Resume of multi-turn runs: which conversations are over, and the last written turn of each one a
crash (or a failure) cut off, so it continues at its next turn on the model's own history.

Read once at start-up from the done-ID ledger and the segments: only conversations without a final
(`!`) event are looked up, and only the segments whose id lists hold their last turn are read.

A conversation whose next turn an earlier run found longer than the server's context (`too_long` on that
event) is left out like a too_long prompt: that turn's history is made of written turns, so it would be
just as long again (`skip_too_long`; --retry-too-long sends it again).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from client.core.ids import leading_id, line_id
from client.engine.conversation import parse_event_id, turn_positions
from client.local.failures import read_too_long_ids
from client.local.ledger import read_ids
from client.local.prompt_files import prompt_lines
from client.local.source import Shard


@dataclass
class TurnLedger:
    """Per conversation: over (final event written), or the record of its last written turn."""

    finished: set[str] = field(default_factory=set)
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # conversation id -> event id not found
    too_long: set[str] = field(default_factory=set)  # conversations whose next turn is over the context

    def next_turn(self, conversation_id: str) -> int:
        earlier = self.latest.get(conversation_id)
        return int(earlier["turn"]) + 1 if earlier is not None else 1

    def is_finished(self, conversation_id: str) -> bool:
        return conversation_id in self.finished


def _segment_ids(segment: Path) -> list[str]:
    ids_path = segment.with_suffix(".ids")
    if ids_path.exists():
        return read_ids(ids_path)
    with segment.open("rb") as handle:
        return [value for value in map(line_id, handle) if value is not None]


def load_turn_ledger(done_ids: Iterable[str], segments_dir: Path) -> TurnLedger:
    ledger = TurnLedger()
    latest_turn: dict[str, tuple[int, str]] = {}
    for value in done_ids:
        key = parse_event_id(value)
        if key is None:
            continue
        if key.last:
            ledger.finished.add(key.conversation_id)
        elif key.turn > latest_turn.get(key.conversation_id, (0, ""))[0]:
            latest_turn[key.conversation_id] = (key.turn, value)
    needed = {value: cid for cid, (_, value) in latest_turn.items() if cid not in ledger.finished}
    if needed and segments_dir.is_dir():
        for segment in sorted(segments_dir.glob("*.jsonl")):
            if needed.keys().isdisjoint(_segment_ids(segment)):
                continue
            with segment.open("rb") as handle:
                for line in handle:
                    found = line_id(line)
                    if found is not None and found in needed:
                        ledger.latest[needed.pop(found)] = orjson.loads(line)
            if not needed:
                break
    ledger.missing = {cid: value for value, cid in needed.items()}
    return ledger


def too_long_conversations(ledger: TurnLedger, too_long_events: Iterable[str]) -> set[str]:
    """The unfinished conversations whose next turn is one of `too_long_events` (event ids)."""
    found: set[str] = set()
    for value in too_long_events:
        key = parse_event_id(value)
        if key is not None and not ledger.is_finished(key.conversation_id) \
                and ledger.next_turn(key.conversation_id) == key.turn:
            found.add(key.conversation_id)
    return found


def skip_too_long(out: Path, done_ids: set[str], ledger: TurnLedger | None,
                  train_window: int | None = None) -> set[str]:
    """The prompt ids to leave out as too_long or fills_window (for a window at least as wide as this run's)
    (blocking: reads the failures files). With --turns all (`ledger`), the conversations whose next turn is
    such, which the ledger then counts as left out."""
    too_long = read_too_long_ids(out, train_window)
    if ledger is None:
        return too_long - done_ids
    ledger.too_long = too_long_conversations(ledger, too_long)
    return ledger.too_long


def add_records(ledger: TurnLedger, records: Iterable[dict[str, Any]]) -> None:
    """Fill in last turns found elsewhere (the S3 prefix, for a fresh host)."""
    wanted = {value: cid for cid, value in ledger.missing.items()}
    for record in records:
        cid = wanted.pop(str(record.get("id")), None)
        if cid is not None:
            ledger.latest[cid] = record
            del ledger.missing[cid]
        if not wanted:
            return


def count_remaining_events(paths: Iterable[Path], ledger: TurnLedger, shard: Shard | None = None) -> int:
    """Turns still to generate, for the ETA: every planned turn of unfinished conversations, less those
    already written (a divergence may end a conversation sooner, so this is an upper bound)."""
    shard = shard or Shard(0, 1)
    remaining = 0
    seen: set[str] = set()
    for path in paths:
        with prompt_lines(path) as handle:
            for raw in handle:
                quick = leading_id(raw)
                if quick is not None and (quick in ledger.finished or quick in ledger.too_long or quick in seen):
                    continue
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                    continue
                cid = obj["id"]
                messages = obj.get("messages")
                if (cid in ledger.finished or cid in ledger.too_long or cid in seen or not shard.owns(cid)
                        or not isinstance(messages, list)):
                    continue
                seen.add(cid)
                written = int(ledger.latest[cid]["turn"]) if cid in ledger.latest else 0
                planned = turn_positions([m for m in messages if isinstance(m, dict)])
                remaining += max(0, len(planned) - written)
    return remaining
