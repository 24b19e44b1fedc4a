"""SGLang's native `/generate`: token ids in, token ids out, streamed or whole, in SGLang 0.5.23's shapes.

Shapes, from the SGLang 0.5.23 sources (`srt/entrypoints/http_server.py` `generate_request`,
`srt/managers/tokenizer_manager.py`, `srt/sampling/sampling_params.py`) and held to a real server by
tests/test_sim_generate_fidelity.py:
- the body: `input_ids` (or `text`), `sampling_params` {`max_new_tokens` (default 128), `temperature`,
  `top_p`, `top_k`, `min_p`, `stop_token_ids`, `sampling_seed`, ...}, `stream`;
- the answer: `{"text", "output_ids", "meta_info": {"id", "finish_reason", "prompt_tokens",
  "completion_tokens", "cached_tokens", ...}}`; `finish_reason` is `{"type": "stop", "matched": ID}` or
  `{"type": "length", "length": N}`, null while a stream runs;
- streaming: one `data: {...}` event per step with the text and ids so far (SGLang's default), or, with
  `--incremental-streaming-output`, only the step's new text and ids (`meta_info` still counts them all);
  then `data: [DONE]`.

What the sim generates is a function of the ids alone, so that a reply continued from a prefix of its own
ids goes on as the uninterrupted reply did (what a greedy or seeded engine does):
- a reply this server already gave for the same prompt ids (a chat completion with a tokenizer, or an earlier
  `/generate`) is in its reply book; input ids that are such a prompt plus the start of its reply get the
  rest of that reply. The book is the server's memory, like a model's weights it is not shared between
  processes: a continuation on another simulated server falls to the next rule;
  A chat reply cut by max_tokens is booked as the model would have written it whole: its cut ids, then the
  ids of the whole reply's text after the cut. A real engine's cut reply is the start of its uncut one id for
  id; the simulator tokenizes the text it cut, so at the cut its ids may split a word as the whole reply's do
  not, and the continuation keeps the cut reply's ids as they are;
- any other context gets a Markov reply: each next id is drawn from a hash of the seed and the last
  `_ORDER` ids, so it too continues from any prefix of itself.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from simulator.engine import Engine
from simulator.faults import NO_FAULT, Fault, FaultKind
from simulator.replies import json_response
from simulator.text import WORDS
from simulator.tokens import SimTokenizer

DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams.max_new_tokens
_ORDER = 8  # the Markov reply's context: its last this many ids
_BOOK_SIZE = 20_000  # replies kept, oldest forgotten first
DONE = b"data: [DONE]\n\n"


def _key(ids: Sequence[int]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for i in ids:
        h.update(i.to_bytes(4, "little", signed=True))
    return h.digest()


def _prefix_keys(ids: Sequence[int]) -> list[bytes]:
    """`_key` of every prefix of `ids`: entry n is the key of ids[:n + 1]."""
    h = hashlib.blake2b(digest_size=16)
    keys: list[bytes] = []
    for i in ids:
        h.update(i.to_bytes(4, "little", signed=True))
        keys.append(h.copy().digest())
    return keys


@dataclass(frozen=True)
class Reply:
    """A whole reply to one prompt: its ids, and whether it ended by itself (its last id the stop id)."""

    ids: tuple[int, ...]
    stopped: bool


class ReplyBook:
    """The replies this server gave, by their prompt ids; bounded, oldest forgotten first."""

    def __init__(self, size: int = _BOOK_SIZE) -> None:
        self._replies: OrderedDict[bytes, Reply] = OrderedDict()
        self._size = size

    def add(self, prompt_ids: Sequence[int], ids: Sequence[int], stopped: bool) -> None:
        key = _key(prompt_ids)
        old = self._replies.get(key)
        # A reply cut shorter by max_tokens is a prefix of the whole one: keep the longest known.
        if old is None or len(ids) > len(old.ids) or stopped:
            self._replies[key] = Reply(tuple(ids), stopped)
        self._replies.move_to_end(key)
        while len(self._replies) > self._size:
            self._replies.popitem(last=False)

    def rest(self, input_ids: Sequence[int]) -> Reply | None:
        """The rest of a booked reply whose prompt plus start are `input_ids`, longest prompt first."""
        if not self._replies:
            return None
        keys = _prefix_keys(input_ids)
        for split in range(len(input_ids), 0, -1):
            reply = self._replies.get(keys[split - 1])
            if reply is None:
                continue
            done = len(input_ids) - split
            if tuple(input_ids[split:]) == reply.ids[:done] and done <= len(reply.ids):
                return Reply(reply.ids[done:], reply.stopped)
        return None


class PromptBook:
    """The chat prompts this server rendered for `/v1/tokenize` (their ids -> the request body), so that a
    `/generate` of such ids gets the reply a chat completion of that body gets: a client that renders a
    prompt with the server's tokenize route and generates on `/generate` sees the model it would see on
    chat. Bounded, oldest forgotten first; a process's own, as the reply book is."""

    def __init__(self, size: int = _BOOK_SIZE) -> None:
        self._bodies: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._size = size

    def add(self, prompt_ids: Sequence[int], body: dict[str, Any]) -> None:
        self._bodies[_key(prompt_ids)] = body
        while len(self._bodies) > self._size:
            self._bodies.popitem(last=False)

    def find(self, input_ids: Sequence[int]) -> tuple[list[int], dict[str, Any]] | None:
        """(the prompt's ids, its body) of a rendered prompt that `input_ids` begin with, longest first."""
        if not self._bodies:
            return None
        keys = _prefix_keys(input_ids)
        for split in range(len(input_ids), 0, -1):
            body = self._bodies.get(keys[split - 1])
            if body is not None:
                return list(input_ids[:split]), body
        return None


class Markov:
    """Ids drawn from a hash of the seed and the last `_ORDER` ids of the context; ends with the stop id
    about once in `mean` ids."""

    def __init__(self, tokenizer: SimTokenizer, seed: int, mean: int) -> None:
        pieces = {i for w in WORDS for i in tokenizer.encode(" " + w)}
        self.vocab = sorted(pieces)
        self.stop_id = tokenizer.eos_id
        self.seed = seed.to_bytes(8, "little", signed=True)
        self.mean = max(2, mean)

    def reply(self, context: Sequence[int], limit: int, ignore_eos: bool = False) -> Reply:
        window = list(context[-_ORDER:])
        out: list[int] = []
        while len(out) < limit:
            h = hashlib.blake2b(self.seed + b"".join(i.to_bytes(4, "little", signed=True) for i in window),
                                digest_size=8).digest()
            draw = int.from_bytes(h, "little")
            if self.stop_id is not None and draw % self.mean == 0 and not ignore_eos:
                out.append(self.stop_id)
                return Reply(tuple(out), True)
            nxt = self.vocab[(draw >> 16) % len(self.vocab)]
            out.append(nxt)
            window = [*window[1:], nxt] if len(window) >= _ORDER else [*window, nxt]
        return Reply(tuple(out), False)


@dataclass(frozen=True)
class GenerateRequest:
    input_ids: list[int]
    max_new_tokens: int
    stop_token_ids: frozenset[int]
    seed: int
    stream: bool
    ignore_eos: bool = False


class GenerateError(Exception):
    """A body SGLang's `/generate` contract refuses: HTTP 400 `{"error": message}`."""


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
        raise GenerateError(f"{name} must be a list of integers")
    return value


def parse_generate(raw: bytes, tokenizer: SimTokenizer, server_seed: int) -> GenerateRequest:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GenerateError(f"invalid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise GenerateError("the request body must be a JSON object")
    if body.get("input_ids") is not None:
        input_ids = _int_list(body["input_ids"], "input_ids")
    elif isinstance(body.get("text"), str):
        input_ids = tokenizer.encode(body["text"])
    else:
        raise GenerateError("Either text, input_ids or input_embeds should be provided.")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise GenerateError("sampling_params must be an object")
    max_new = params.get("max_new_tokens")
    max_new = DEFAULT_MAX_NEW_TOKENS if max_new is None else max_new
    if not isinstance(max_new, int) or max_new < 0:
        raise GenerateError("max_new_tokens must be a non-negative integer")
    stops = params.get("stop_token_ids")
    seed = params.get("sampling_seed")
    # temperature, top_p, top_k and min_p are taken and change nothing: the sim's reply is its greedy one.
    return GenerateRequest(input_ids, max_new, frozenset(_int_list(stops, "stop_token_ids") if stops else []),
                           server_seed if not isinstance(seed, int) else seed, bool(body.get("stream")),
                           params.get("ignore_eos") is True)


@dataclass(frozen=True)
class Planned:
    ids: list[int]
    finish: dict[str, Any]


def plan(req: GenerateRequest, book: ReplyBook, markov: Markov) -> Planned:
    """The ids this request gets and its finish_reason, under max_new_tokens and stop_token_ids."""
    booked = book.rest(req.input_ids)
    if booked is not None and req.ignore_eos:
        booked = Reply(booked.ids, False)  # its end token is one more id; the Markov rule goes on after it
    reply = booked if booked is not None else markov.reply(req.input_ids, req.max_new_tokens, req.ignore_eos)
    ids = list(reply.ids)
    stop_ids = set(req.stop_token_ids)
    if markov.stop_id is not None:
        stop_ids.add(markov.stop_id)
    for n, i in enumerate(ids[: req.max_new_tokens]):
        if i in req.stop_token_ids:
            return Planned(ids[: n + 1], {"type": "stop", "matched": i})
    if len(ids) <= req.max_new_tokens and reply.stopped and ids and ids[-1] in stop_ids and not req.ignore_eos:
        return Planned(ids, {"type": "stop", "matched": ids[-1]})
    if len(ids) < req.max_new_tokens and booked is not None:
        # The book knows the reply only up to the max_tokens it was asked with: the Markov rule goes on.
        more = markov.reply([*req.input_ids, *ids], req.max_new_tokens - len(ids), req.ignore_eos)
        return plan_tail(ids, more, req.max_new_tokens)
    return Planned(ids[: req.max_new_tokens], {"type": "length", "length": req.max_new_tokens})


def plan_tail(ids: list[int], more: Reply, limit: int) -> Planned:
    whole = [*ids, *more.ids]
    if more.stopped:
        return Planned(whole, {"type": "stop", "matched": whole[-1]})
    return Planned(whole[:limit], {"type": "length", "length": limit})


def _meta(rid: str, prompt_tokens: int, completion: int, finish: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": rid, "finish_reason": finish, "prompt_tokens": prompt_tokens, "weight_version": "default",
            "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": completion, "cached_tokens": 0}


def _out(text: str, ids: list[int], meta: dict[str, Any]) -> dict[str, Any]:
    return {"text": text, "output_ids": ids, "meta_info": meta}


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def serve(request: web.Request, tokenizer: SimTokenizer | None, engine: Engine, book: ReplyBook,
                markov: Markov | None, server_seed: int, fault: Fault = NO_FAULT, *,
                prepare: Callable[[list[int]], None] | None = None, incremental: bool = False) -> web.StreamResponse:
    """One `/generate`. Of the injected faults, `--drop-stream` applies (the connection is cut after a share
    of the ids, streamed or not); the caller answers `--fail-500` / `--fail-429` before this. `prepare`: called
    with the input ids before the reply is planned (to book the reply of a rendered chat prompt);
    `incremental`: SGLang's `--incremental-streaming-output`, each event only the new text and ids."""
    if tokenizer is None or markov is None:
        return json_response({"error": "the simulated server serves /generate only with --tokenizer"}, 400)
    try:
        req = parse_generate(await request.read(), tokenizer, server_seed)
    except GenerateError as exc:
        return json_response({"error": str(exc)}, 400)
    if prepare is not None:
        prepare(req.input_ids)
    planned = plan(req, book, markov)
    book.add(req.input_ids, planned.ids, planned.finish["type"] == "stop")
    rid = uuid.uuid4().hex
    ids, n_prompt = planned.ids, len(req.input_ids)

    def text(upto: int) -> str:
        return str(tokenizer.tokenizer.decode(ids[:upto], skip_special_tokens=True))

    strike = fault.trigger_token(len(ids)) if fault.kind is FaultKind.DROP_STREAM and len(ids) > 1 else None
    ereq = engine.submit(len(ids), n_prompt)
    try:
        if not req.stream:
            if strike is not None:
                while ereq.produced < strike and not ereq.finished:
                    await ereq.wait_beyond(ereq.produced)
                _abort(request)
                return web.Response(status=499)
            if ids:
                await ereq.wait_finished()
            return json_response(_out(text(len(ids)), ids, _meta(rid, n_prompt, len(ids), planned.finish)))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        sent = 0
        emitted = ""  # incremental: the text sent so far (a character still incomplete is held back)
        try:
            while sent < len(ids):
                before = sent
                sent = min(await ereq.wait_beyond(sent), len(ids))
                if strike is not None:
                    sent = min(sent, strike)
                if not resp.prepared:
                    await resp.prepare(request)
                last = sent >= len(ids)
                meta = _meta(rid, n_prompt, sent, planned.finish if last else None)
                if incremental:
                    whole = text(sent) if last else text(sent).rstrip("\ufffd")
                    event = _out(whole[len(emitted):], ids[before:sent], meta)
                    emitted = whole
                else:
                    event = _out(text(sent), ids[:sent], meta)
                await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
                if strike is not None and sent >= strike:
                    _abort(request)  # --drop-stream: the client holds the ids of the events before the cut
                    return resp
            if not resp.prepared:
                await resp.prepare(request)
                empty = _out("", [], _meta(rid, n_prompt, 0, planned.finish))
                await resp.write(b"data: " + orjson.dumps(empty) + b"\n\n")
            await resp.write(DONE)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client left; the engine slot is freed below
        return resp
    finally:
        engine.release(ereq)
