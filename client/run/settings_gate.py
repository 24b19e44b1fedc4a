"""The run's side of `run.json`: refuse a resume whose settings differ (before the preflight request, so
before anything is sent to a server), then record the settings and the prompt files' hashes before the
first prompt, in `OUT/run.json` and, with --s3, in `PREFIX/run.json`.

Where the run syncs is recorded too (`sync`): an --out whose uploaded segments were deleted
(--delete-uploaded) has its done ids only in S3, so `check_sync_target` refuses a resume without that
--s3 before anything is read or sent.

An --out that holds records but no run.json (removed, lost) is refused too: the settings those records
were made with are unknown, so any resume could mix settings silently. --allow-settings-change continues
and notes the unknown settings in the history.

The format and the comparison are client.local.run_settings'. With --s3 the prefix's copy is the
reference (it is shared by every host writing there); it is written with a conditional PUT, so two hosts
starting at once record one set of settings, and the loser compares against the winner's.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from client.core.errors import ConfigError
from client.local.run_settings import (
    RUN_FILE,
    RunRecord,
    first_record,
    from_json,
    hash_prompt_file,
    next_fleets,
    next_sync,
    prompt_changes,
    read_run_file,
    setting_changes,
    sync_refusal,
    to_json,
    updated,
    write_run_file,
)
from client.run.console import say
from client.s3.store import S3Conflict, S3Error, S3Store

_S3_ATTEMPTS = 3


def unknown_settings(out: Path, records: int) -> str:
    """The message of a refused resume of records whose run.json is gone."""
    return (f"--out {out} holds {records:,} record(s) but no {RUN_FILE}: the settings they were made with are "
            "unknown, so this run's could differ and be mixed into one data set. Restore run.json from a copy "
            "(with --s3, PREFIX/run.json) and run again, give a new --out, or pass --allow-settings-change to "
            "continue anyway (this run's settings are recorded; `python -m client.audit` tells whether the "
            "records are mixed).")


def refusal(where: str, changes: Sequence[str]) -> str:
    """The message of a refused resume: every difference, one per line."""
    lines = "".join(f"\n  {line}" for line in changes)
    return (f"this run's settings differ from those recorded in {where}:{lines}\n"
            "Results made with other settings would be mixed into one data set. Run with the recorded "
            "settings, give a new --out, or pass --allow-settings-change to continue anyway (the change is "
            "appended to run.json's history and the audit reports the run as mixed).")


def check_sync_target(out: Path, s3: str | None) -> None:
    """ConfigError (exit 2) when `out`'s done ids live only in an S3 prefix this run does not sync to; a
    note when it syncs elsewhere but this run keeps its results local."""
    recorded = read_run_file(out)
    sync = recorded.sync if recorded is not None else None
    problem = sync_refusal(out, sync, s3)
    if problem is not None:
        raise ConfigError(problem)
    if sync is not None and not s3:
        say(f"note: --out {out} syncs to {sync.s3}; this run has no --s3, so its results stay local until a "
            "run with that --s3 uploads them")


class SettingsGate:
    """Compares this run's settings with the recorded ones (`check`), then records them (`record`)."""

    def __init__(self, out: Path, *, run_id: str, allow_change: bool, store: S3Store | None = None,
                 existing_records: int = 0, s3: str | None = None, delete_uploaded: bool = False) -> None:
        self.out = out
        self.s3, self.delete_uploaded = s3, delete_uploaded
        self.existing_records = existing_records
        self.run_id = run_id
        self.allow_change = allow_change
        self.store = store
        self._settings: dict[str, Any] | None = None
        self._fleet: dict[str, Any] | None = None
        self.changed_prompt_files: list[Path] = []  # added or changed since the recorded run (after `record`)
        self._local: RunRecord | None = None
        self._remote: RunRecord | None = None
        self._remote_etag: str | None = None

    def _where(self) -> str:
        return f"{self.store.url}{RUN_FILE}" if self.store is not None and self._remote else str(self.out / RUN_FILE)

    async def _read_remote(self) -> None:
        if self.store is None:
            return
        try:
            got = await self.store.get(RUN_FILE)
        except S3Error as exc:
            raise ConfigError(f"cannot read {self.store.url}{RUN_FILE}: {exc}. Nothing was sent; start again "
                              "once S3 answers.") from exc
        if got is None:
            self._remote, self._remote_etag = None, None
            return
        try:
            self._remote = from_json(got[0], source=f"{self.store.url}{RUN_FILE}")
        except ValueError as exc:
            raise ConfigError(f"{exc}. Fix or remove that object, then start again.") from exc
        self._remote_etag = got[1]

    def _compare(self, settings: dict[str, Any]) -> None:
        reference = self._remote or self._local
        if reference is None:
            if self.existing_records and not self.allow_change:
                raise ConfigError(unknown_settings(self.out, self.existing_records))
            if self.existing_records:
                say(f"no {RUN_FILE} for the {self.existing_records:,} record(s) already written "
                    "(--allow-settings-change): their settings are unknown; recording this run's")
            return
        changes = setting_changes(reference.settings, settings)
        if changes and not self.allow_change:
            raise ConfigError(refusal(self._where(), changes))
        if changes:
            say(f"settings changed since the last run (--allow-settings-change): {'; '.join(changes)}. "
                f"The change is appended to {RUN_FILE}'s history")

    async def check(self, settings: dict[str, Any]) -> None:
        """Raise ConfigError (exit 2) when `settings` differ from the recorded ones and no change is allowed."""
        self._settings = settings
        self._local = await asyncio.to_thread(read_run_file, self.out)
        await self._read_remote()
        self._compare(settings)

    async def record(self, prompt_paths: Sequence[Path], fleet: dict[str, Any] | None = None) -> None:
        """Hash the prompt files (in threads), report what changed in them, write run.json (local and S3) with
        the fleet this run runs on (`fleets`)."""
        self._fleet = fleet
        if self._settings is None:
            raise RuntimeError("SettingsGate.record before check")
        files = await asyncio.gather(*(asyncio.to_thread(hash_prompt_file, path) for path in prompt_paths))
        reference = self._remote or self._local
        if reference is not None:
            for line in prompt_changes(reference.prompts, files):
                say(f"prompt files changed since the last run (allowed): {line}")
            before = {p.path: p.sha256 for p in reference.prompts}
            self.changed_prompt_files = [Path(f.path) for f in files if before.get(f.path) != f.sha256]
        record = self._next(reference, files)
        if record != self._local:
            await asyncio.to_thread(write_run_file, self.out, record)
        if self.store is not None:
            await self._record_remote(record, files)

    def _next(self, reference: RunRecord | None, files: Sequence[Any]) -> RunRecord:
        assert self._settings is not None
        now = time.time()
        if reference is None:
            record = first_record(settings=self._settings, prompts=files, run=self.run_id, at=now,
                                  unknown_records=self.existing_records)
        else:
            record = updated(reference, settings=self._settings, prompts=files, run=self.run_id, at=now)
        return replace(record, sync=next_sync(record.sync, self.s3, self.delete_uploaded),
                       fleets=next_fleets(record.fleets, self._fleet, run=self.run_id, at=now))

    async def _record_remote(self, record: RunRecord, files: Sequence[Any]) -> None:
        """Store `record` as PREFIX/run.json unless it holds it already; on a race, compare with the winner's."""
        assert self.store is not None
        conditional = True
        for _ in range(_S3_ATTEMPTS):
            if record == self._remote:
                return
            body = to_json(record)
            try:
                await self.store.put(RUN_FILE, body, hashlib.md5(body).digest(), content_type="application/json",
                                     if_match=self._remote_etag if conditional and self._remote else None,
                                     if_none_match=conditional and self._remote is None)
                return
            except S3Conflict:
                # Another host recorded its settings first: they are the reference now.
                await self._read_remote()
                assert self._settings is not None
                self._compare(self._settings)
                record = self._next(self._remote, files)
                if record != self._local:
                    await asyncio.to_thread(write_run_file, self.out, record)
            except S3Error as exc:
                if exc.code == "NotImplemented" and conditional:
                    conditional = False  # a store without conditional writes
                    continue
                raise ConfigError(f"cannot write {self.store.url}{RUN_FILE}: {exc}. Nothing was sent; start "
                                  "again once S3 answers.") from exc
        raise ConfigError(f"{self.store.url}{RUN_FILE} kept changing while this run recorded its settings; "
                          "start again")
