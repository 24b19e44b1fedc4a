"""One HTTP/1.1 client connection as an asyncio Protocol, its bytes parsed by httptools (llhttp).

The Protocol is why the client costs a few microseconds per streamed chunk (docs/benchmarks.md): bytes
arrive in `data_received`, go straight into llhttp, and each body piece comes back in `on_body`, which
hands it to the SSE parser: no task switch, future or async generator per chunk. llhttp owns the framing:
chunked bodies (a chunk without its CRLF is an error), Content-Length bodies, bodies that end at close
(HTTP/1.0), interim 1xx responses (skipped: `100 Continue` is not the answer), trailers. Bodies in gzip or
deflate are decoded incrementally (zlib), in pieces of at most `DECODE_PIECE` bytes, so a small compressed
read cannot turn into gigabytes at once before the feed's byte cap sees it (client.wire.bounds); other
encodings are refused with an error naming them.

A non-200 body, and a 200 body whose Content-Type is not the one expected (an HTML login page from a
misrouted proxy instead of text/event-stream), is kept (its first 16 KiB) for the error message instead
of going to the feed.

Stalls are found by one timer per stream that re-arms itself lazily at the last progress plus the idle
timeout, not by a timer per chunk. Progress is the response head, then each body piece whose feed does not
return False: the SSE feed returns False for bytes that carried no new token (`: ping` comments, keep-alive
events), so a server that only sends those cannot hold a stream open for ever; an error body counts while
it fills the 16 KiB kept of it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import cast

import httptools

from client.core.errors import AttemptError, StreamStalled
from client.wire.errors_map import BODY, DECODE, Step, connection_lost, translate_attempt, unsupported_encoding

ERROR_BODY_LIMIT = 16384
# The most bytes one zlib call may decode: gzip expands up to ~1000x, so a 64 KiB read could be 64 MiB.
DECODE_PIECE = 256 * 1024
# Takes each body piece; returns False when the piece carried no progress (the idle timer is not reset).
Feed = Callable[[bytes], "bool | None"]
_DECODABLE = frozenset({"gzip", "x-gzip", "deflate"})


class Headers:
    """Response headers in order, names lower-cased; a repeated header keeps every value."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of `name` (lower-case), or `default`."""
        for key, value in self.pairs:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        return [value for key, value in self.pairs if key == name]

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self.pairs)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def __repr__(self) -> str:
        return f"Headers({self.pairs!r})"


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    headers: Headers


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


class Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time. `where` names the server in errors."""

    def __init__(self, loop: asyncio.AbstractEventLoop, where: str = "the server") -> None:
        self.loop = loop
        self.where = where
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self.received_any = False
        self.wrong_type: str | None = None
        self.error_body: list[bytes] = []
        self._parser = httptools.HttpResponseParser(self)
        self._feed: Feed = _discard
        self._sink: Feed = _discard
        self._head: asyncio.Future[ResponseHead] | None = None
        self._done: asyncio.Future[None] | None = None
        self._active = False
        self._informational = False
        self._until_close = False
        self._expect_type: str | None = None
        self._pairs: list[tuple[str, str]] = []
        self._decoder: zlib._Decompress | None = None
        self._encoding = ""
        self._error_room = 0
        self._last_read = 0.0
        self._last_progress = 0.0
        self._idle_timeout = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, but it has the same interface.
        self.transport = cast("asyncio.Transport", transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if not self._active:
            return
        head_done = self._head is not None and self._head.done()
        if head_done and self._until_close:
            try:
                self._flush_decoder()
            except AttemptError as error:
                self._fail(error)
                return
            self._finish()
            return
        self._fail(connection_lost(exc, self.where, before_response=not head_done))

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self.received_any = True
        if not self._active:
            self.reusable = False  # bytes outside a response: the connection cannot be trusted
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(translate_attempt(exc, Step(BODY, self.where)))

    # -- httptools callbacks ---------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._pairs = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._pairs.append((name.decode("latin-1").lower(), value.decode("latin-1").strip()))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            self._informational = True  # 100 Continue, 103 Early Hints: the real response follows
            return
        headers = Headers(self._pairs)
        encoding = (headers.get("content-encoding") or "identity").strip().lower()
        self._sink = self._feed
        if status != 200:
            self._sink = self._keep_error  # an error's body is a message for us, not SSE
        elif self._expect_type is not None:
            content_type = headers.get("content-type")
            if content_type is not None and media_type(content_type) != self._expect_type:
                self.wrong_type = content_type
                self._sink = self._keep_error
        if encoding != "identity":
            if encoding not in _DECODABLE:
                raise unsupported_encoding(self.where, encoding)
            self._decoder = zlib.decompressobj(wbits=47)  # gzip or zlib-wrapped deflate, told by the header
            self._encoding = encoding
        chunked = "chunked" in ",".join(headers.get_all("transfer-encoding")).lower()
        self._until_close = not chunked and "content-length" not in headers and status not in (204, 304)
        self._last_progress = self._last_read
        assert self._head is not None
        if not self._head.done():
            self._head.set_result(ResponseHead(status, headers))

    def on_body(self, body: bytes) -> None:
        if self._decoder is None:
            if self._sink(body) is not False:
                self._last_progress = self._last_read
            return
        decoder = self._decoder
        while body:
            try:
                data = decoder.decompress(body, DECODE_PIECE)
            except zlib.error as exc:
                raise translate_attempt(exc, Step(DECODE, self.where, encoding=self._encoding)) from exc
            if data and self._sink(data) is not False:
                self._last_progress = self._last_read
            body = decoder.unconsumed_tail

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        self._flush_decoder()
        self.reusable = self._parser.should_keep_alive()
        self._finish()

    # -- one request -----------------------------------------------------------------------------------

    def start(self, request: bytes, feed: Feed, idle_timeout: float,
              expect_type: str | None = None) -> None:
        assert self.transport is not None
        self._feed = feed
        self._sink = _discard
        self._head = self.loop.create_future()
        self._done = self.loop.create_future()
        self._active = True
        self._informational = False
        self._until_close = False
        self._expect_type = expect_type
        self._decoder = None
        self.wrong_type = None
        self.error_body = []
        self._error_room = ERROR_BODY_LIMIT
        self.reusable = False
        self.received_any = False
        self._idle_timeout = idle_timeout
        self._last_read = self._last_progress = self.loop.time()
        self._timer = self.loop.call_at(self._last_read + idle_timeout, self._check_idle)
        self.transport.write(request)

    @property
    def head(self) -> asyncio.Future[ResponseHead]:
        assert self._head is not None
        return self._head

    @property
    def done(self) -> asyncio.Future[None]:
        assert self._done is not None
        return self._done

    def abort(self) -> None:
        """Drop the connection; whoever called it no longer awaits this request's futures."""
        self.reusable = False
        self._active = False
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()
        # A failure may already sit in `done` (the body failed in the same read that completed the head)
        # while the caller was cancelled at `head`, e.g. by its endpoint going out of rotation: take it, so
        # asyncio does not report it as never retrieved.
        for future in (self._head, self._done):
            if future is None:
                continue
            if future.done():
                if not future.cancelled():
                    future.exception()
            else:
                future.cancel()

    def _keep_error(self, data: bytes) -> bool:
        if self._error_room <= 0:
            return False  # past what is kept: an endless error body is no progress
        self.error_body.append(data[:self._error_room])
        self._error_room -= len(data)
        return True

    def _flush_decoder(self) -> None:
        if self._decoder is not None:
            try:
                tail = self._decoder.flush()
            except zlib.error as exc:
                raise translate_attempt(exc, Step(DECODE, self.where, encoding=self._encoding)) from exc
            self._decoder = None
            if tail:
                self._sink(tail)

    def _check_idle(self) -> None:
        idle_for = self.loop.time() - self._last_progress
        if idle_for >= self._idle_timeout:
            self._timer = None
            what = "bytes" if self._last_read == self._last_progress else "tokens (only comments or keep-alives)"
            self._fail(StreamStalled(f"no {what} from {self.where} for {idle_for:.0f}s (idle timeout)"))
        else:
            self._timer = self.loop.call_at(self._last_progress + self._idle_timeout, self._check_idle)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, exc: AttemptError) -> None:
        self._active = False
        self._cancel_timer()
        self.reusable = False
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc)
            if self._done is not None:
                self._done.cancel()  # nobody awaits `done` once the head failed
        elif self._done is not None and not self._done.done():
            self._done.set_exception(exc)
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def _finish(self) -> None:
        self._active = False
        self._cancel_timer()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


def _discard(_: bytes) -> None:
    return None
