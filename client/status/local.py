"""The status of a run from its local `--out` directory: the segments, `run.json` and the lock.

It reads every result segment (through `client.results.reader`, which never repairs a live segment)
for the done ids, the tokens and the records' `created` times; `run.json` for the run's model and
settings; `failures/` for the ids still failed; and the lock file for whether a client is running on the
directory now (whether its flock is held, as client.run judges it). With --prompts, or else the prompt
files run.json records (when they are all still there), it counts the total (the shard's, when the
segments all carry one shard K/N with N > 1), what remains and the ETA from the rate over the last hour
(the records whose `created` falls in the hour before now, or before the last record when no run is live,
so a finished run's rate is not diluted by the time since it ended; or since the first record when that
is sooner). A run with `--turns all` (run.json's `turns`) counts conversations: one is done
when the event that ends it (`<id>#<turn>!`) is written, and the rate is of finished conversations.

The ETA is client.core.eta's rule with nothing in flight, started from the records already done: their
lengths (every record's `usage.completion_tokens`), the token rate over the window, and the pace of one
request (the median over the window's records of completion tokens over decode time, `total_s` less
`queued_s` and `ttft_s`). So the prompts left take the work at the fleet's rate plus the longest of the
last batch at one request's pace: 11 prompts left take about as long as the longest of 11 replies. While
a run is live its requests in flight are counted as not started (this reads files, not the client), so
the figure errs long by up to one reply. Records without timings, and conversations, fall back to what
remains over the records (or conversations) per second.
"""

from __future__ import annotations

import re
import statistics
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from rich.table import Table
from rich.text import Text

from client.core.durations import format_duration
from client.core.errors import ConfigError
from client.core.eta import LengthHistogram, eta
from client.engine.conversation import parse_event_id
from client.local.lock import LOCK_FILE, Holder, probe_lock
from client.local.run_settings import RunRecord, read_run_file
from client.results.reader import ReadReport, iter_records, segment_files
from client.status.fleet import RATE_WINDOW_S, count_prompts, eta_from

# `<host>-<K>of<N>-<run id>-<seq>`: the run id is `YYYYmmddTHHMMSS-xxxx` (client.local.sink).
_SEGMENT_SHARD = re.compile(r"-(\d+)of(\d+)-\d{8}T\d{6}-[0-9a-f]{4}-\d+\.jsonl(?:\.gz)?$")


@dataclass(frozen=True, slots=True)
class LockState:
    """Who the lock file names and whether that client is running now (None: cannot tell from here)."""

    holder: Holder | None
    live: bool | None

    def describe(self) -> str:
        who = self.holder.describe() if self.holder is not None else None
        if self.live is None:
            return f"cannot tell whether a run is live: this file system has no locks (the lock names {who})"
        if self.live:
            return f"a run is live ({who or 'a client that is just starting'})"
        if who is None:
            return "no run is live (the lock is free)"
        return f"no run is live (the lock was left by a client that is gone: {who})"


def lock_state(out: Path) -> LockState:
    """Whether a client holds `OUT/.lock`, judged as client.run judges it (client.local.lock.probe_lock): by
    the flock, not by whether the pid the file names is alive (it may be an unrelated process now)."""
    holder, live = probe_lock(out)
    return LockState(holder, live)


@dataclass
class LocalStatus:
    out: str
    now: float
    lock: LockState
    run: dict[str, Any] | None = None
    segments: int = 0
    records: int = 0
    done_ids: set[str] = field(default_factory=set)
    failed_ids: set[str] = field(default_factory=set)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    first_created: float | None = None
    last_created: float | None = None
    recent_records: int = 0
    recent_tokens: int = 0
    # (created, completion tokens, finished) per record, for the rate once the window's end is known
    _created: array[float] = field(default_factory=lambda: array("d"))
    _tokens: array[int] = field(default_factory=lambda: array("q"))
    _finished: array[int] = field(default_factory=lambda: array("b"))
    _paces: array[float] = field(default_factory=lambda: array("d"))  # tok/s of each record's decode; 0: unknown
    lengths: LengthHistogram = field(default_factory=LengthHistogram)
    pace: float | None = None  # median tok/s of one request over the rate window (count_recent)
    prompts_from_run_json: bool = False
    shards: set[str] = field(default_factory=set)
    torn: int = 0
    corrupt: int = 0
    unread_examples: list[str] = field(default_factory=list)  # FILE:LINE: problem, the first few
    total: int | None = None
    conversations: bool = False  # --turns all: done and the rate count finished conversations

    @property
    def done(self) -> int:
        return len(self.done_ids)

    @property
    def failed(self) -> int:
        return len(self.failed_ids - self.done_ids)

    @property
    def remaining(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.done)

    @property
    def rate_end(self) -> float:
        """Where the rate window ends: now while a run is live (or cannot be told), else at the last record."""
        if self.lock.live is False and self.last_created is not None:
            return min(self.now, self.last_created)
        return self.now

    @property
    def window_s(self) -> float:
        if self.first_created is None:
            return RATE_WINDOW_S
        return min(RATE_WINDOW_S, max(1.0, self.rate_end - self.first_created))

    def count_recent(self) -> None:
        """The records (and their tokens) in the rate window, once every record is read."""
        end = self.rate_end
        self.recent_records = self.recent_tokens = 0
        paces = []
        for created, tokens, finished, pace in zip(self._created, self._tokens, self._finished, self._paces,
                                                   strict=True):
            if 0.0 <= end - created <= RATE_WINDOW_S:
                self.recent_records += finished
                self.recent_tokens += tokens
                if pace > 0:
                    paces.append(pace)
        self.pace = statistics.median(paces) if paces else None

    @property
    def rate(self) -> float:
        return self.recent_records / self.window_s

    @property
    def token_rate(self) -> float:
        return self.recent_tokens / self.window_s

    @property
    def eta_s(self) -> float | None:
        if self.conversations or self.pace is None or self.remaining is None or self.token_rate <= 0:
            return eta_from(self.remaining, self.rate)
        return eta(unsent=self.remaining, in_flight=(), lengths=self.lengths, pace=self.pace,
                   rate=self.token_rate).seconds

    @property
    def shard(self) -> tuple[int, int] | None:
        """The one shard K/N (N > 1) every segment carries, if they do."""
        if len(self.shards) != 1:
            return None
        index, count = (int(x) for x in next(iter(self.shards)).split("/"))
        return (index, count) if count > 1 else None


def _number(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _add_record(status: LocalStatus, record: dict[str, Any]) -> None:
    status.records += 1
    finished = True
    if status.conversations:
        key = parse_event_id(record["id"])
        finished = key is not None and key.last
        if finished and key is not None:
            status.done_ids.add(key.conversation_id)
    else:
        status.done_ids.add(record["id"])
    raw_usage = record.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    tokens = _number(usage.get("completion_tokens"))
    status.completion_tokens += tokens
    status.lengths.add(tokens)
    status.prompt_tokens += _number(usage.get("prompt_tokens"))
    created = record.get("created")
    if isinstance(created, (int, float)) and not isinstance(created, bool):
        status.first_created = created if status.first_created is None else min(status.first_created, created)
        status.last_created = created if status.last_created is None else max(status.last_created, created)
        status._created.append(float(created))
        status._tokens.append(tokens)
        status._finished.append(int(finished))
        status._paces.append(_pace(record.get("timings"), tokens))


def _pace(timings: object, tokens: int) -> float:
    """Completion tokens per second of decode (total less queue and first token); 0 when unknown."""
    if not isinstance(timings, dict) or tokens < 2:
        return 0.0
    total, queued, ttft = timings.get("total_s"), timings.get("queued_s"), timings.get("ttft_s")
    if not isinstance(total, (int, float)):
        return 0.0
    decode = total - (queued if isinstance(queued, (int, float)) else 0.0) - (ttft if isinstance(ttft, (int, float))
                                                                               else 0.0)
    return tokens / decode if decode > 0 else 0.0


def _failed_ids(out: Path) -> set[str]:
    ids: set[str] = set()
    for path in sorted((out / "failures").glob("failures-*.jsonl")):
        try:
            with path.open("rb") as handle:
                for raw in handle:
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    if not isinstance(obj, dict) or obj.get("error_class") == "too_long":
                        continue
                    if isinstance(obj.get("id"), str):
                        ids.add(obj["id"])
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return ids


def read_local(out: Path, prompt_paths: Sequence[Path], *, now: float) -> LocalStatus:
    """Everything `client.status --out` shows. ConfigError when `out` is not a run's directory."""
    if not out.is_dir():
        raise ConfigError(f"--out {out}: no such directory")
    run = read_run_file(out)
    has_segments = (out / "segments").is_dir() and any((out / "segments").glob("*.jsonl*"))
    if run is None and not has_segments and not (out / LOCK_FILE).exists():
        raise ConfigError(f"--out {out}: not a run's directory (no run.json, segments/ or lock file); give the "
                          "--out a client.run wrote to")
    status = LocalStatus(str(out), now, lock_state(out))
    if run is not None:
        status.conversations = run.settings.get("turns") == "all"
        status.run = {"run": run.run, "created": run.created, "settings": run.settings,
                      "prompts": [p.path for p in run.prompts], "changes": len(run.history)}
    if has_segments:
        _read_segments(out, status)
    status.failed_ids = _failed_ids(out)
    _count_total(_prompt_files(prompt_paths, run, status), status)
    return status


def _read_segments(out: Path, status: LocalStatus) -> None:
    """The records of every segment into `status`, with the shards their names give and what was unreadable."""
    files = segment_files(out)
    status.segments = len(files)
    for path in files:
        match = _SEGMENT_SHARD.search(path.name)
        if match:
            status.shards.add(f"{match.group(1)}/{match.group(2)}")
    report = ReadReport()
    for _, record in iter_records(str(out), report):
        _add_record(status, record)
    status.torn, status.corrupt = report.torn_tails, report.corrupt
    status.unread_examples = [str(bad) for bad in report.examples]
    status.count_recent()


def _prompt_files(given: Sequence[Path], run: RunRecord | None, status: LocalStatus) -> Sequence[Path]:
    """--prompts, else the files run.json records when every one is still here (a moved set would count
    the wrong prompts, so it is not guessed at)."""
    if given or run is None or not run.prompts:
        return given
    recorded = [Path(p.path) for p in run.prompts]
    if not all(path.is_file() for path in recorded):
        return given
    status.prompts_from_run_json = True
    return recorded


def _count_total(prompt_paths: Sequence[Path], status: LocalStatus) -> None:
    """The prompts this run (or its one shard) owes, when there are prompt files to count."""
    if not prompt_paths:
        return
    shard = status.shard
    total, per = count_prompts(prompt_paths, {shard[1]} if shard else set())
    status.total = per[shard[1]][shard[0]] if shard else total


def as_json(status: LocalStatus) -> dict[str, Any]:
    return {
        "out": status.out,
        "live": status.lock.live,
        "lock": status.lock.describe(),
        "holder": None if status.lock.holder is None else {"host": status.lock.holder.host,
                                                           "pid": status.lock.holder.pid,
                                                           "started": status.lock.holder.started},
        "run": status.run,
        "counts": "conversations" if status.conversations else "prompts",
        "shard": None if status.shard is None else f"{status.shard[0]}/{status.shard[1]}",
        "segments": status.segments, "records": status.records, "done": status.done, "failed": status.failed,
        "completion_tokens": status.completion_tokens, "prompt_tokens": status.prompt_tokens,
        "prompts": status.total, "remaining": status.remaining,
        "prompts_from": "run.json" if status.prompts_from_run_json else ("--prompts" if status.total is not None
                                                                         else None),
        "first_created": status.first_created, "last_created": status.last_created,
        "rate_window_s": round(status.window_s, 1), "records_in_window": status.recent_records,
        "rate_per_s": round(status.rate, 4), "tokens_per_s": round(status.token_rate, 1),
        "pace_tokens_per_s": None if status.pace is None else round(status.pace, 2),
        "mean_completion_tokens": status.lengths.mean, "eta_s": status.eta_s,
        "torn_tails": status.torn, "corrupt_lines": status.corrupt, "unreadable_examples": status.unread_examples,
    }


def render(status: LocalStatus) -> Table:
    table = Table(title=f"{status.out}", header_style="bold", show_edge=False, show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")  # a long FILE:LINE folds onto the next line, never cut short
    table.add_row("run", status.lock.describe())
    if status.run is not None:
        settings = status.run["settings"]
        model = settings.get("model", "?") if isinstance(settings, dict) else "?"
        table.add_row("run.json", f"model {model}, run {status.run['run'] or '?'}, "
                                  f"{status.run['changes']} recorded change(s)")
    if status.shard is not None:
        table.add_row("shard", f"{status.shard[0]}/{status.shard[1]}")
    total = "?" if status.total is None else f"{status.total:,}"
    percent = "" if not status.total else f" ({100.0 * status.done / status.total:.1f}%)"
    unit = " conversations" if status.conversations else ""
    source = " (prompts from run.json)" if status.prompts_from_run_json else ""
    table.add_row("done", f"{status.done:,} / {total}{unit}{percent}: {status.records:,} record(s) in "
                          f"{status.segments} segment(s){source}")
    if status.failed:
        table.add_row("failed", f"{status.failed:,} (sent again by the next run)")
    table.add_row("tokens", f"{status.completion_tokens:,} completion, {status.prompt_tokens:,} prompt")
    window = format_duration(status.window_s)
    what = "conversations" if status.conversations else "records"
    ending = "" if status.rate_end == status.now else ", up to the last record: no run is live"
    table.add_row("rate", f"{status.rate * 3600:,.0f} {what}/h, {status.token_rate:,.0f} tok/s (last {window}{ending})")
    if status.last_created is not None:
        table.add_row("last record", f"{format_duration(max(0.0, status.now - status.last_created))} ago")
    eta = status.eta_s
    if eta is None:
        eta_text = ("? (give --prompts: run.json's prompt files are not all here)" if status.total is None
                    else "? (no record in the last hour)")
    else:
        eta_text = "done" if eta == 0 else format_duration(eta)
    table.add_row("ETA", eta_text)
    if status.torn or status.corrupt:
        table.add_row("unread", f"{status.torn} torn last line(s), {status.corrupt} unreadable line(s)")
        for example in status.unread_examples[:3]:
            table.add_row("", Text(example))  # Text: a FILE:LINE may hold `[`, which markup would eat
    return table
