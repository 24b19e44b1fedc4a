"""`--continue-replies` across runs: the replies in flight appended to OUT/partials (client.local.partials) every
half second and when the run stops, and restored by the next run, which continues each from its ids. A kill
-9 loses at most what each reply received since the last save; those tokens are generated again.

A saved reply is continued only when its prompt's content and sampling are what they were (`key`); else it
is dropped and the prompt generated anew. Attempts keep counting across runs, so a record's `continued`
says which attempt, of which run, made which tokens. Its file goes once its record (or failure) is written.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable

import orjson

from client.core.records import Prompt, prompt_sha256
from client.engine.native_reply import ReplyInProgress
from client.local.partials import Append, PartialStore, SavedReply

SAVE_EVERY_S = 0.5


def reply_key(prompt: Prompt, sampling: dict[str, object]) -> str:
    """What a saved reply must match to be continued: the prompt's content and the sampling it is drawn."""
    digest = hashlib.sha256(orjson.dumps(sampling, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return f"{prompt_sha256(prompt.messages, prompt.tools, prompt.meta)}:{digest}"


def _chunks(reply: ReplyInProgress, start: int) -> list[tuple[int, list[int]]]:
    """The ids from `start` on, cut where an attempt's share ends, each with its attempt."""
    chunks: list[tuple[int, list[int]]] = []
    offset = 0
    for share in reply.shares():
        end = offset + share["tokens"]
        if end > start:
            chunks.append((share["attempt"], reply.ids[max(start, offset):end]))
        offset = end
    return chunks


class PartialKeeper:
    def __init__(self, store: PartialStore, saved: dict[str, SavedReply], key_of: Callable[[Prompt], str],
                 every_s: float = SAVE_EVERY_S) -> None:
        self.store = store
        self.saved = saved
        self.key_of = key_of
        self.every_s = every_s
        self.in_flight: dict[str, tuple[str, ReplyInProgress]] = {}
        self.restored = 0  # replies continued from an earlier run's ids
        self.dropped = 0  # saved replies of prompts edited or drawn otherwise since
        self._saved: dict[str, tuple[int, str | None]] = {}  # ids and finish in the file, of replies that have one
        self._remove: list[str] = []
        self._writing = asyncio.Lock()  # one save at a time: a file's lines go in the order of its ids

    def begin(self, prompt: Prompt) -> ReplyInProgress:
        key = self.key_of(prompt)
        saved = self.saved.pop(prompt.id, None)
        reply = ReplyInProgress()
        if saved is not None and saved.key == key:
            reply = ReplyInProgress(prompt_ids=list(saved.prompt_ids), ids=list(saved.ids), parts=list(saved.parts),
                                    finish=saved.finish,
                                    attempt_offset=max((p["attempt"] for p in saved.parts), default=0))
            self._saved[prompt.id] = (len(saved.ids), saved.finish)
            self.restored += 1
        elif saved is not None:
            self.dropped += 1
            self._remove.append(prompt.id)
        self.in_flight[prompt.id] = (key, reply)
        return reply

    def end(self, prompt_id: str) -> None:
        """Its record or failure is written: the reply is no longer in flight, and its file goes."""
        self.in_flight.pop(prompt_id, None)
        if self._saved.pop(prompt_id, None) is not None:
            self._remove.append(prompt_id)

    def _pending(self) -> tuple[list[Append], list[str]]:
        appends = []
        for prompt_id, (key, reply) in self.in_flight.items():
            known = self._saved.get(prompt_id)
            count, finish = known if known is not None else (0, None)
            if reply.prompt_ids is None or (len(reply.ids) <= count and reply.finish == finish):
                continue
            header = None if known is not None else {"id": prompt_id, "key": key, "prompt_ids": reply.prompt_ids}
            appends.append(Append(prompt_id, header, _chunks(reply, count),
                                  reply.finish if reply.finish != finish else None))
            self._saved[prompt_id] = (len(reply.ids), reply.finish)
        removals, self._remove = self._remove, []
        return appends, removals

    async def flush(self) -> None:
        async with self._writing:
            appends, removals = self._pending()
            if appends:
                await asyncio.to_thread(self.store.append, appends)
            if removals:
                await asyncio.to_thread(self.store.remove, removals)

    async def keep(self) -> None:
        """The companion loop: what grew since the last pass is appended, what ended is removed."""
        while True:
            await asyncio.sleep(self.every_s)
            await self.flush()
