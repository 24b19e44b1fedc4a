"""`OUT/run.json`: the settings that shape a run's data, recorded by its first run, and the comparison a
resume makes against them.

The settings are the model, the sampling block as recorded in every ResultRecord
(`SamplingSettings.recorded(policy)`), thinking, the turns mode and the extension fields the run sends
(the `--compat` result). A resume whose settings differ is refused unless asked for; an allowed change
replaces `settings` and is appended to `history`. Prompt files are recorded with their sha256; adding or
changing them is allowed and only reported. `sync` says where the run syncs (the --s3 prefix) and
whether a run of it ever deleted uploaded local segments: then the done ids live only in S3, and a
resume without that --s3 is refused (`sync_refusal`). `fleets` says what the runs ran on, in order (a run on
the same fleet as the one before adds nothing): whether it was simulated (then its servers, speed, the GPU kind
it models and that its time is the modelled clock's) and the GPUs the servers report, so a reader of the
results (`client.estimate --from-results`) knows where their timings came from and never counts ports as GPUs.

Everything here is pure except `read_run_file`, `write_run_file` and `hash_prompt_file` (blocking: call
them in a thread). The same bytes go to `PREFIX/run.json` with --s3 (client.run's wiring).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from client.core.errors import ConfigError, map_write_error

RUN_FILE = "run.json"
KIND = "regen-swarm run"
FORMAT = 1
ABSENT = "(absent)"
_HASH_BLOCK = 4 << 20


@dataclass(frozen=True, slots=True)
class PromptFile:
    """One prompt file as a run was given it: the path as given, its sha256 and size."""

    path: str
    sha256: str
    bytes: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The content of run.json. `settings` are the latest accepted ones; `history` lists every change."""

    settings: dict[str, Any]
    prompts: tuple[PromptFile, ...]
    created: float
    run: str = ""
    history: tuple[dict[str, Any], ...] = field(default=())
    sync: SyncTarget | None = None
    fleets: tuple[dict[str, Any], ...] = field(default=())


@dataclass(frozen=True, slots=True)
class SyncTarget:
    """Where the run syncs: the --s3 prefix, and whether any run of it deleted uploaded local segments."""

    s3: str
    deleted_uploaded: bool = False

    def after(self, s3: str | None, delete_uploaded: bool) -> SyncTarget:
        """This target after a run with `s3`/`delete_uploaded`: deletion is remembered for good."""
        return SyncTarget(s3 or self.s3, self.deleted_uploaded or (bool(s3) and delete_uploaded))


def next_sync(previous: SyncTarget | None, s3: str | None, delete_uploaded: bool) -> SyncTarget | None:
    if previous is not None:
        return previous.after(s3, delete_uploaded)
    return SyncTarget(s3, delete_uploaded) if s3 else None


def next_fleets(previous: tuple[dict[str, Any], ...], fleet: Mapping[str, Any] | None, *, run: str,
                at: float) -> tuple[dict[str, Any], ...]:
    """`previous` with this run's fleet appended, unless it is the fleet the last entry names (or unknown)."""
    if fleet is None:
        return previous
    last = {k: v for k, v in previous[-1].items() if k not in ("run", "at_utc")} if previous else None
    if last == dict(fleet):
        return previous
    return (*previous, {"run": run, "at_utc": _iso(at), **fleet})


def sync_refusal(out: Path, recorded: SyncTarget | None, s3: str | None) -> str | None:
    """Why a run with `s3` (None: no --s3) must not resume `out` (None when it may)."""
    if recorded is None or not recorded.deleted_uploaded or s3 == recorded.s3:
        return None
    given = f"--s3 {s3}" if s3 else "no --s3"
    return (f"--out {out} syncs to {recorded.s3} and an earlier run deleted its uploaded segments "
            f"(--delete-uploaded, recorded in {out / RUN_FILE}): the done ids live only there. This run has "
            f"{given}, so it would generate done prompts again. Run with --s3 {recorded.s3} (and the same "
            "--s3-endpoint-url), or give a new --out.")


def shaping_settings(*, model: str, sampling: Mapping[str, Any], thinking: bool, turns: str,
                     fields: Iterable[str], loop_stop: bool = False, train_window: int | None = None,
                     plan: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings compared between runs, in run.json's shape. `loop_stop` and `train_window` are recorded
    only when on, so a run.json written before they existed reads as a run without them. A sampling plan
    (`plan`: its description, digest and seed) takes the place of `sampling` and `thinking`, which then
    differ by prompt; a run without one records them as before."""
    settings: dict[str, Any] = ({"model": model, "sampling_plan": dict(plan)} if plan is not None else
                                {"model": model, "sampling": dict(sampling), "thinking": thinking})
    settings.update({"turns": turns, "fields": sorted(fields)})
    if loop_stop:
        settings["loop_stop"] = True
    if train_window is not None:
        settings["train_window"] = train_window
    return settings


def flatten(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested objects as dotted keys (`sampling.temperature`); lists and scalars are leaves."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def show(value: Any) -> str:
    """A value as a change line shows it: strings bare, everything else as JSON."""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()


def setting_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """`key: old -> new` for every setting that differs, sorted by key; a missing one shows `(absent)`."""
    before, after = flatten(old), flatten(new)
    missing = object()
    lines = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key, missing), after.get(key, missing)
        if a is missing or b is missing or not same_value(a, b):
            lines.append(f"{key}: {ABSENT if a is missing else show(a)} -> {ABSENT if b is missing else show(b)}")
    return lines


def same_value(a: Any, b: Any) -> bool:
    """Equal as settings: 1 and 1.0 are one value (JSON does not keep the difference); true and 1 are not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _short(digest: str) -> str:
    return digest[:12]


def prompt_changes(old: Sequence[PromptFile], new: Sequence[PromptFile]) -> list[str]:
    """What changed in the prompt files, one line each (allowed; reported, not refused)."""
    before = {p.path: p for p in old}
    after = {p.path: p for p in new}
    lines = []
    for path, now in after.items():
        was = before.get(path)
        if was is None:
            lines.append(f"added {path} (sha256 {_short(now.sha256)}, {now.bytes:,} bytes)")
        elif was.sha256 != now.sha256:
            lines.append(f"changed {path} (sha256 {_short(was.sha256)} -> {_short(now.sha256)}, "
                         f"{was.bytes:,} -> {now.bytes:,} bytes)")
    lines.extend(f"no longer given: {path}" for path in before if path not in after)
    return lines


def updated(record: RunRecord, *, settings: dict[str, Any], prompts: Sequence[PromptFile], run: str,
            at: float) -> RunRecord:
    """`record` after a run with `settings` and `prompts`: unchanged when nothing differs, else with the new
    settings and prompt files, and one more history entry naming the changes and the settings before."""
    changes = setting_changes(record.settings, settings)
    files = prompt_changes(record.prompts, prompts)
    if not changes and not files:
        return record
    entry: dict[str, Any] = {"at": at, "at_utc": _iso(at), "run": run, "changes": changes, "prompt_files": files}
    if changes:
        entry["previous"] = record.settings
    return replace(record, settings=settings, prompts=tuple(prompts), run=run, history=(*record.history, entry))


def first_record(*, settings: dict[str, Any], prompts: Sequence[PromptFile], run: str, at: float,
                 unknown_records: int = 0) -> RunRecord:
    """The first run.json of an --out; `unknown_records` written before it without one (allowed by
    --allow-settings-change) are noted in the history, since their settings may differ."""
    history: tuple[dict[str, Any], ...] = ()
    if unknown_records:
        history = ({"at": at, "at_utc": _iso(at), "run": run, "prompt_files": [], "previous": None,
                    "changes": [f"{RUN_FILE} was missing: the settings of {unknown_records:,} earlier record(s) "
                                "are unknown"]},)
    return RunRecord(settings, tuple(prompts), at, run, history)


def _iso(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def to_json(record: RunRecord) -> bytes:
    return orjson.dumps({
        "kind": KIND,
        "format": FORMAT,
        "created": record.created,
        "created_utc": _iso(record.created),
        "run": record.run,
        "settings": record.settings,
        "prompts": [{"path": p.path, "sha256": p.sha256, "bytes": p.bytes} for p in record.prompts],
        "history": list(record.history),
        **({"sync": {"s3": record.sync.s3, "deleted_uploaded": record.sync.deleted_uploaded}} if record.sync else {}),
        **({"fleets": list(record.fleets)} if record.fleets else {}),
    }, option=orjson.OPT_INDENT_2) + b"\n"


def from_json(blob: bytes, *, source: str = RUN_FILE) -> RunRecord:
    """Parse run.json; a ValueError names `source` and what is wrong."""
    try:
        obj = orjson.loads(blob)
        if not isinstance(obj, dict) or obj.get("kind") != KIND:
            raise ValueError("not a regen-swarm run file")
        if int(obj.get("format", 0)) > FORMAT:
            raise ValueError(f"format {obj.get('format')} is newer than this client understands ({FORMAT})")
        settings = obj["settings"]
        if not isinstance(settings, dict):
            raise ValueError("settings is not an object")
        prompts = tuple(PromptFile(str(p["path"]), str(p["sha256"]), int(p["bytes"])) for p in obj.get("prompts", []))
        history = tuple(h for h in obj.get("history", []) if isinstance(h, dict))
        sync = obj.get("sync")
        target = SyncTarget(str(sync["s3"]), bool(sync.get("deleted_uploaded", False))) if sync else None
        fleets = tuple(f for f in obj.get("fleets", []) if isinstance(f, dict))
        return RunRecord(settings, prompts, float(obj.get("created", 0.0)), str(obj.get("run", "")), history, target,
                         fleets)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{source}: unreadable run settings: {exc}") from exc


def read_run_file(out_dir: Path) -> RunRecord | None:
    """OUT/run.json, or None when there is none. An unreadable one is a ConfigError: the settings are unknown."""
    path = out_dir / RUN_FILE
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        return from_json(blob, source=str(path))
    except ValueError as exc:
        raise ConfigError(f"{exc}. Fix it or restore it from a copy (with --s3, PREFIX/run.json), then start "
                          "again. Do not remove it: without it the settings of the records already written are "
                          "unknown, and a resume is refused.") from exc


def write_run_file(out_dir: Path, record: RunRecord) -> None:
    """Replace OUT/run.json whole (a temporary file, fsync, rename)."""
    path = out_dir / RUN_FILE
    temporary = path.with_suffix(".json.tmp")
    try:
        with temporary.open("wb") as handle:
            handle.write(to_json(record))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        raise map_write_error(exc, f"cannot write {path}: {exc.strerror or exc}") from exc


def hash_prompt_file(path: Path) -> PromptFile:
    """sha256 and size of one prompt file, streamed in blocks (files can be many GB)."""
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as handle:
            while block := handle.read(_HASH_BLOCK):
                digest.update(block)
                size += len(block)
    except OSError as exc:
        raise ConfigError(f"--prompts {path}: cannot read: {exc.strerror or exc}") from exc
    return PromptFile(str(path), digest.hexdigest(), size)
