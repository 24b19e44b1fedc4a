"""An OpenAI-compatible chat server that misbehaves on purpose, one named mode at a time (or several).

Routes (all under `--prefix` when given): GET /health, GET /v1/models, GET /v1/loads, GET /metrics and
POST /v1/chat/completions (SSE when `"stream": true`, else one chat.completion). The answer is the fixed one
of `chatwire`. Every request is logged as one JSON line to `--log` before it is answered.

    python -m tests.servers.oddserver --mode MODE[,MODE...] [--prefix /api/x] [--log FILE] [--port 0]
        [--ready-file F] [--tls-cert F --tls-key F] [--health-delay S] [--chunk-delay S] [--api-key K]

Prints `PORT <n>` as stdout line 1 once listening. `MODES` describes each mode.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import zlib
from collections.abc import Callable
from typing import Any

from tests.servers import chatwire
from tests.servers.httpwire import (
    CONTINUE,
    LAST_CHUNK,
    BadRequest,
    Request,
    RequestLog,
    add_serve_args,
    chunk,
    http_date,
    read_body,
    read_head,
    request_record,
    response_head,
    send,
    serve,
)

MODES: dict[str, str] = {
    "normal": "HTTP/1.1, chunked SSE, keep-alive",
    "http10_close": "HTTP/1.0 responses with Connection: close; every body ends at close",
    "content_length": "the whole SSE body sent with a Content-Length, no chunking",
    "crlf": "SSE lines end with \\r\\n and events with \\r\\n\\r\\n",
    "comments_events": "': keep-alive' comment blocks, ': ping' and 'event: message' lines in each event",
    "multiline_data": "each JSON event split over several data: lines (they join with \\n)",
    "no_done": "no data: [DONE]; the stream just ends",
    "usage_on_finish": "usage rides on the finish_reason chunk (always); no separate usage chunk",
    "gzip": "every body Content-Encoding: gzip, whatever Accept-Encoding said",
    "html200": "chat answers 200 text/html with a login page",
    "html200_all": "every route answers 200 text/html with a login page",
    "continue100": "chat sends an unsolicited HTTP/1.1 100 Continue before the real response",
    "bad_chunk_crlf": "the third chunk of a stream lacks its trailing CRLF; the connection closes after",
    "repeated_headers": "every response repeats Set-Cookie and X-Test",
    "health404": "/health answers 404",
    "health_slow": "/health answers only after --health-delay seconds",
    "health_hang": "/health never answers (until the client leaves); every other route answers",
    "mute": "accepts connections and reads requests, but never answers anything",
    "loads_dribble": "/v1/loads answers 200 with a Content-Length, then sends its body one byte every 50 ms, "
                     "without end until the client leaves",
    "strict400": "chat refuses non-standard fields with 400 {'detail': 'Unexpected fields ...'}",
    "strict422": "chat refuses non-standard fields with 422 in FastAPI validation shape",
    "bad_event": "after the first reasoning chunk, an event whose data is not JSON (`data: {not json`), then "
                 "one that is JSON but not an object (`data: [1, 2]`), then the rest of the stream",
    "mid_error": "a data: {'error': {...}} event after the first content chunk, then [DONE]; "
                 "non-streaming chat answers 500",
    "stall": "the stream goes silent after the first reasoning chunk until the client leaves",
    "drop_mid": "the connection is aborted after the first content chunk (no chunked terminator)",
    "runaway": "after the first reasoning chunk, content chunks without end, past any max_tokens, until the "
               "client leaves",
    "ping_only": "after the first reasoning chunk, only ': ping' comments (every --chunk-delay, at least 50 ms) "
                 "until the client leaves",
    "echo_auth": "every 401 (a wrong --api-key) and every chat request (a 500) quotes the request's "
                 "Authorization header in its body, as some proxies and debug builds do",
    "retry_after_once": "the first chat request for more than one token (so not the client's preflight) answers "
                        "429 with Retry-After: --retry-after (default 100000 s); later ones answer normally",
    "ids_once": "SGLang's sglext ids chunk (on return_output_ids_in_sglext) in the first stream only: a server "
                "that gives ids at the preflight and none afterwards",
    "text_ids": "a kind the client does not ship (name it with --owned-by): on `x_text_ids: true`, a chunk with "
                "no choices after the finish chunk carries `x_text_ids: {prompt, completion, accept}`, the ids as "
                "space-separated text (prompt 100.., completion 1000..) and an MTP accept length of 2.5",
}
_EXCLUSIVE = ({"http10_close", "content_length", "bad_chunk_crlf"}, {"strict400", "strict422"},
              {"health404", "health_slow", "health_hang"}, {"html200", "html200_all"},
              {"stall", "drop_mid", "mid_error", "runaway", "ping_only"})
_REPEATED = [("Set-Cookie", "a=1; Path=/"), ("Set-Cookie", "b=2; Path=/"), ("X-Test", "one"), ("X-Test", "two")]
_HTML = "text/html; charset=utf-8"
_MARKERS = ("stall", "drop", "runaway", "ping")
# The endless modes stop after this many events even if the client never leaves: every loop is bounded.
_ENDLESS_LIMIT = 1_000_000


def parse_modes(values: list[str]) -> frozenset[str]:
    modes = frozenset(m.strip() for v in values for m in v.split(",") if m.strip()) or frozenset({"normal"})
    unknown = sorted(modes - set(MODES))
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; known: {sorted(MODES)}")
    for group in _EXCLUSIVE:
        if len(modes & group) > 1:
            raise SystemExit(f"modes {sorted(modes & group)} cannot be combined")
    return modes


class Reply:
    """Writes one response in the server's framing (chunked, Content-Length or close-delimited, maybe gzip)."""

    def __init__(self, srv: OddServer, req: Request | None, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.srv = srv
        self.reader = reader
        self.writer = writer
        self.http10 = srv.has("http10_close")
        self.gzip = srv.has("gzip")
        self.keep = req is not None and req.keep_alive and not self.http10

    def _headers(self, content_type: str, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
        h = [("Server", "oddserver"), ("Date", http_date()), ("Content-Type", content_type), *extra]
        if self.gzip:
            h.append(("Content-Encoding", "gzip"))
        if self.srv.has("repeated_headers"):
            h += _REPEATED
        if not self.keep:
            h.append(("Connection", "close"))
        return h

    async def fixed(self, status: int, content_type: str, body: bytes,
                    extra: list[tuple[str, str]] | None = None) -> bool:
        """A whole body at once; True when the connection stays open."""
        if self.gzip:
            body = gzip.compress(body, mtime=0)
        h = self._headers(content_type, extra or [])
        if self.http10:
            await send(self.writer, response_head(status, h, "HTTP/1.0") + body)
            return False
        h.append(("Content-Length", str(len(body))))
        await send(self.writer, response_head(status, h) + body)
        return self.keep

    async def json(self, status: int, obj: Any) -> bool:
        return await self.fixed(status, "application/json", json.dumps(obj).encode())

    async def _pause(self) -> None:
        if self.srv.chunk_delay > 0:
            await asyncio.sleep(self.srv.chunk_delay)

    async def _marker(self, marker: str, frame: Callable[[bytes], bytes]) -> bool:
        if marker == "drop":
            self.writer.transport.abort()
        elif marker == "stall":  # silent until the client closes its side
            while await self.reader.read(65536):
                pass
        else:  # runaway or ping: events until the client leaves (the write then fails)
            event = (self.srv.dialect.event(chatwire.runaway_chunk()) if marker == "runaway"
                     else b": ping\n\n")
            delay = self.srv.chunk_delay if marker == "runaway" else max(self.srv.chunk_delay, 0.05)
            try:
                for _ in range(_ENDLESS_LIMIT):
                    await send(self.writer, frame(event))
                    await asyncio.sleep(delay)  # 0 still yields, so the client's leaving is seen
            except (ConnectionError, OSError):
                pass
        return False

    async def stream(self, events: list[bytes | str]) -> bool:
        """SSE events (bytes) with optional "stall"/"drop" markers; True when the connection stays open."""
        h = self._headers("text/event-stream", [("Cache-Control", "no-cache")])
        gz = zlib.compressobj(wbits=31) if self.gzip else None

        def encode(data: bytes) -> bytes:
            return gz.compress(data) + gz.flush(zlib.Z_SYNC_FLUSH) if gz is not None else data

        if self.srv.has("content_length"):
            return await self._stream_sized(h, events)
        if self.http10:
            await send(self.writer, response_head(200, h, "HTTP/1.0"))
            for ev in events:
                if isinstance(ev, str):
                    return await self._marker(ev, encode)
                await send(self.writer, encode(ev))
                await self._pause()
            if gz is not None:
                await send(self.writer, gz.flush())
            return False
        bad = self.srv.has("bad_chunk_crlf")
        await send(self.writer, response_head(200, [*h, ("Transfer-Encoding", "chunked")]))
        for i, ev in enumerate(events):
            if isinstance(ev, str):
                return await self._marker(ev, lambda data: chunk(encode(data)))
            await send(self.writer, chunk(encode(ev), crlf=not (bad and i == 2)))
            await self._pause()
        tail = gz.flush() if gz is not None else b""
        await send(self.writer, (chunk(tail) if tail else b"") + LAST_CHUNK)
        return self.keep and not bad

    async def _stream_sized(self, h: list[tuple[str, str]], events: list[bytes | str]) -> bool:
        full = b"".join(e for e in events if isinstance(e, bytes))
        data = gzip.compress(full, mtime=0) if self.gzip else full
        head = response_head(200, [*h, ("Content-Length", str(len(data)))])
        marks = [i for i, e in enumerate(events) if isinstance(e, str)]
        if not marks:
            await send(self.writer, head + data)
            return self.keep
        before = b"".join(e for e in events[: marks[0]] if isinstance(e, bytes))
        await send(self.writer, head + data[: len(data) // 2 if self.gzip else len(before)])
        return await self._marker(str(events[marks[0]]), lambda data: data)


class OddServer:
    """Routes and per-server counters (requests in flight, tokens generated)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.modes = parse_modes(args.mode)
        self.prefix = (args.prefix or "").rstrip("/")
        self.log = RequestLog(args.log)
        self.model = args.model
        self.owner = args.owned_by
        self.max_model_len = args.max_model_len
        self.health_delay = args.health_delay
        self.health_status = args.health_status
        self.chunk_delay = args.chunk_delay
        self.api_key = args.api_key
        self.dialect = chatwire.Dialect(crlf=self.has("crlf"), comments=self.has("comments_events"),
                                        multiline=self.has("multiline_data"))
        self._conns = itertools.count(1)
        self._ids = itertools.count(1)
        self.running = 0
        self.generated = 0
        self.ids_given = False
        self.retry_after = args.retry_after
        self.limited_once = False

    def has(self, mode: str) -> bool:
        return mode in self.modes

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._conns)
        if self.has("mute"):
            while await reader.read(65536):
                pass
            return
        for n in itertools.count(1):
            try:
                req = await read_head(reader)
                if req is None:
                    return
                if (req.header("expect") or "").lower() == "100-continue":
                    await send(writer, CONTINUE)
                req.body = await read_body(reader, req.headers)
            except BadRequest as exc:
                await Reply(self, None, reader, writer).json(400, {"detail": str(exc)})
                return
            self.log.write(request_record(req, server="oddserver", conn=conn, n_on_conn=n))
            if not await self.route(req, Reply(self, req, reader, writer)):
                return

    async def route(self, req: Request, reply: Reply) -> bool:
        path = req.path
        if self.prefix:
            if path != self.prefix and not path.startswith(self.prefix + "/"):
                return await reply.json(404, {"detail": "Not Found"})
            path = path[len(self.prefix):] or "/"
        if self.has("html200_all"):
            return await reply.fixed(200, _HTML, chatwire.LOGIN_PAGE)
        routes = {"/health": ("GET", self.health), "/v1/models": ("GET", self.models),
                  "/v1/loads": ("GET", self.loads), "/metrics": ("GET", self.metrics),
                  "/v1/chat/completions": ("POST", self.chat)}
        if path not in routes:
            return await reply.json(404, {"detail": "Not Found"})
        method, handler = routes[path]
        if req.method != method:
            return await reply.json(405, {"detail": "Method Not Allowed"})
        if self.api_key and path != "/health" and req.header("authorization") != f"Bearer {self.api_key}":
            return await reply.json(401, {"error": {"message": f"Invalid API key{self._echo(req)}",
                                                    "type": "invalid_request_error", "param": None,
                                                    "code": "invalid_api_key"}})
        return await handler(req, reply)

    def _echo(self, req: Request) -> str:
        return f" (got Authorization: {req.header('authorization')})" if self.has("echo_auth") else ""

    async def health(self, req: Request, reply: Reply) -> bool:
        if self.has("health404"):
            return await reply.json(404, {"detail": "Not Found"})
        if self.has("health_slow"):
            await asyncio.sleep(self.health_delay)
        if self.has("health_hang"):
            return await reply._marker("stall", lambda data: data)
        return await reply.fixed(self.health_status, "text/plain; charset=utf-8", b"")

    async def models(self, req: Request, reply: Reply) -> bool:
        return await reply.json(200, chatwire.models(self.model, self.owner, self.max_model_len))

    async def loads(self, req: Request, reply: Reply) -> bool:
        if self.has("loads_dribble"):
            head = reply._headers("application/json", [("Content-Length", str(_ENDLESS_LIMIT))])
            try:
                await send(reply.writer, response_head(200, head))
                for _ in range(_ENDLESS_LIMIT):
                    await send(reply.writer, b" ")
                    await asyncio.sleep(0.05)
            except (ConnectionError, OSError):
                pass
            return False
        return await reply.json(200, chatwire.loads(self.running))

    async def metrics(self, req: Request, reply: Reply) -> bool:
        return await reply.fixed(200, "text/plain; version=0.0.4", chatwire.metrics(self.running, self.generated))

    async def chat(self, req: Request, reply: Reply) -> bool:
        if self.has("continue100"):
            await send(reply.writer, CONTINUE)
        if self.has("html200"):
            return await reply.fixed(200, _HTML, chatwire.LOGIN_PAGE)
        if self.has("echo_auth"):
            return await reply.json(500, {"object": "error", "type": "InternalServerError", "code": 500,
                                          "message": f"upstream failed{self._echo(req)}"})
        body = req.json()
        if self.has("retry_after_once") and not self.limited_once and isinstance(body, dict) \
                and body.get("max_tokens") != 1:
            self.limited_once = True
            return await reply.fixed(429, "application/json", b'{"error": {"message": "rate limited"}}',
                                     [("Retry-After", self.retry_after)])
        strict = 400 if self.has("strict400") else 422 if self.has("strict422") else None
        refusal = chatwire.strict_refusal(strict, body) if strict else None
        if strict and refusal is not None:
            return await reply.json(strict, refusal)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return await reply.json(400, {"object": "error", "message": "Messages cannot be empty.",
                                          "type": "BadRequestError", "param": None, "code": 400})
        asked = chatwire.prompt_tokens(body["messages"]) + int(body.get("max_tokens") or 0)
        if asked > self.max_model_len:
            # vLLM 0.32's wording (serving_engine.py), HTTP 400.
            return await reply.json(400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                                          "message": f"This model's maximum context length is {self.max_model_len} "
                                                     f"tokens. However, you requested {asked} tokens. Please reduce "
                                                     "the length of the messages or completion."})
        answer = chatwire.answer_for(body)
        rid = f"chatcmpl-odd-{next(self._ids)}"
        self.running += 1
        try:
            if not body.get("stream"):
                if self.has("mid_error"):
                    return await reply.json(500, chatwire.MID_ERROR)
                self.generated += answer.completion_tokens
                return await reply.json(200, chatwire.completion(rid, answer))
            opts = body.get("stream_options")
            objs = chatwire.stream_objects(
                rid, answer, include_usage=isinstance(opts, dict) and bool(opts.get("include_usage")),
                usage_on_finish=self.has("usage_on_finish"), mid_error=self.has("mid_error"))
            if self.has("ids_once") and body.get("return_output_ids_in_sglext") and not self.ids_given:
                self.ids_given = True
                # As SGLang places it: a chunk with no choices after the finish chunk, before the usage chunk.
                objs.insert(len(objs) - 1 if objs[-1].get("usage") else len(objs), {
                    "id": rid, "object": "chat.completion.chunk", "created": chatwire.CREATED, "model": answer.model,
                    "choices": [], "usage": None,
                    "sglext": {"input_ids": [1, 2, 3], "output_ids": [list(range(answer.completion_tokens))]}})
            if self.has("text_ids") and body.get("x_text_ids") is True:
                objs.insert(len(objs) - 1 if objs[-1].get("usage") else len(objs), {
                    "id": rid, "object": "chat.completion.chunk", "model": answer.model, "choices": [],
                    "x_text_ids": {"prompt": " ".join(str(100 + i) for i in range(answer.prompt_tokens)),
                                   "completion": " ".join(str(1000 + i) for i in range(answer.completion_tokens)),
                                   "accept": 2.5}})
            events: list[bytes | str] = [self.dialect.event(o) for o in objs]
            if not self.has("no_done"):
                events.append(self.dialect.event(None))
            reasoning = sum(1 for phase, _ in answer.pieces if phase == "reasoning")
            if self.has("stall"):
                events.insert(2, "stall")
            elif self.has("runaway"):
                events.insert(2, "runaway")
            elif self.has("ping_only"):
                events.insert(2, "ping")
            elif self.has("drop_mid"):
                events.insert(reasoning + 2, "drop")
            if self.has("bad_event"):
                events[2:2] = [b"data: {not json\n\n", b"data: [1, 2]\n\n"]
            self.generated += answer.completion_tokens
            return await reply.stream(events)
        finally:
            self.running -= 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.oddserver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", action="append", default=[],
                        help="one of: " + ", ".join(MODES) + " (repeat or comma-separate to combine)")
    parser.add_argument("--prefix", default="", help="serve every route under this path prefix")
    parser.add_argument("--model", default=chatwire.MODEL)
    parser.add_argument("--owned-by", default=chatwire.OWNER)
    parser.add_argument("--max-model-len", type=int, default=chatwire.MAX_MODEL_LEN)
    parser.add_argument("--health-delay", type=float, default=2.0, help="seconds, for health_slow")
    parser.add_argument("--health-status", type=int, default=200, help="what /health answers when it answers")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between stream events")
    parser.add_argument("--retry-after", default="100000", help="the Retry-After value of retry_after_once")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' (not on /health)")
    add_serve_args(parser)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    server = OddServer(args)
    serve(server.handle, args)


if __name__ == "__main__":
    main()
