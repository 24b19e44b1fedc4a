"""The hot path's transport: streaming HTTP/1.1 POSTs over an asyncio Protocol, with keep-alive.

Why not a general HTTP client here: with one SSE event per network read (how a GPU server streams to a
thousand clients), aiohttp costs ~24 us of client CPU per event before any parsing, and httpx over it
~38 us with our parser (docs/benchmarks.md). A Protocol gets the bytes in a callback, undoes the chunked
framing in place and hands the payload straight to the SSE parser: no task switch, no future, no async
generator per chunk. Control-plane requests (health, loads, models) stay on httpx.

Stalls are found by one timer per stream that re-arms itself lazily at the last read plus the idle
timeout, not by a timer per chunk.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from client.core.errors import AttemptError, ConnectFailed, StreamDropped, StreamStalled

_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _LENGTH, _UNTIL_CLOSE, _DONE = range(7)


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class StreamResponse:
    """A finished response: a 200 body went to the feed; any other status keeps its body here."""

    status: int
    headers: dict[str, str]
    error_body: bytes = b""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = False
        self.received_any = False
        self._feed: Callable[[bytes], None] = _discard
        self._head: asyncio.Future[ResponseHead] | None = None
        self._done: asyncio.Future[None] | None = None
        self._state = _DONE
        self._buffer = b""
        self._remaining = 0
        self._last_read = 0.0
        self._idle_timeout = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.error_body: list[bytes] = []

    # -- asyncio.Protocol ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass, but it has the same interface.
        self.transport = cast("asyncio.Transport", transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        if self._state == _UNTIL_CLOSE:
            self._finish()
            return
        detail = f": {exc}" if exc else ""
        if self._head is not None and not self._head.done():
            self._fail(StreamDropped(f"connection closed before the response{detail}"))
        elif self._state != _DONE:
            self._fail(StreamDropped(f"connection lost mid-stream{detail}"))

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self.received_any = True
        try:
            self._consume(data)
        except AttemptError as exc:  # the SSE parser saw an error event or a malformed one
            self._fail(exc)
        except ValueError as exc:
            self._fail(StreamDropped(f"malformed HTTP response: {exc}"))

    # -- one request -----------------------------------------------------------------------------------

    def start(self, request: bytes, feed: Callable[[bytes], None], idle_timeout: float) -> None:
        assert self.transport is not None
        self._feed = feed
        self._head = self.loop.create_future()
        self._done = self.loop.create_future()
        self._state = _HEAD
        self._buffer = b""
        self.error_body = []
        self.reusable = False
        self.received_any = False
        self._idle_timeout = idle_timeout
        self._last_read = self.loop.time()
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
        self.reusable = False
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    def _check_idle(self) -> None:
        idle_for = self.loop.time() - self._last_read
        if idle_for >= self._idle_timeout:
            self._timer = None
            self._fail(StreamStalled(f"no bytes for {idle_for:.0f}s (idle timeout)"))
            self.abort()
        else:
            self._timer = self.loop.call_at(self._last_read + self._idle_timeout, self._check_idle)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fail(self, exc: AttemptError) -> None:
        self._state = _DONE
        self._cancel_timer()
        self.reusable = False
        for future in (self._head, self._done):
            if future is not None and not future.done():
                future.set_exception(exc)
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def _finish(self) -> None:
        self._state = _DONE
        self._cancel_timer()
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # -- framing ---------------------------------------------------------------------------------------

    def _consume(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        position = 0
        end = len(buffer)
        while position < end:
            state = self._state
            if state == _CHUNK_SIZE:
                line_end = buffer.find(b"\r\n", position)
                if line_end < 0:
                    break
                size = int(buffer[position:line_end].split(b";", 1)[0], 16)
                position = line_end + 2
                if size == 0:
                    self._state = _TRAILER
                    continue
                self._remaining = size
                self._state = _CHUNK_DATA
            elif state == _CHUNK_DATA:
                available = end - position
                if available < self._remaining + 2:
                    # Feed what is here (minus a possible partial CRLF) and wait for the rest.
                    take = min(available, self._remaining)
                    if take:
                        self._feed(buffer[position:position + take])
                        self._remaining -= take
                        position += take
                    break
                stop = position + self._remaining
                self._feed(buffer[position:stop])
                position = stop + 2
                self._state = _CHUNK_SIZE
            elif state == _HEAD:
                head_end = buffer.find(b"\r\n\r\n", position)
                if head_end < 0:
                    if end - position > 65536:
                        raise ValueError("response head larger than 64 KiB")
                    break
                self._start_body(buffer[position:head_end])
                position = head_end + 4
            elif state == _TRAILER:
                line_end = buffer.find(b"\r\n", position)
                if line_end < 0:
                    break
                if line_end == position:
                    position += 2
                    self._finish()
                    break
                position = line_end + 2
            elif state == _LENGTH:
                take = min(end - position, self._remaining)
                self._feed(buffer[position:position + take])
                self._remaining -= take
                position += take
                if self._remaining == 0:
                    self._finish()
                break
            elif state == _UNTIL_CLOSE:
                self._feed(buffer[position:])
                position = end
            else:  # _DONE: bytes after a complete response mean the connection cannot be trusted
                self.reusable = False
                position = end
        self._buffer = buffer[position:] if position < end else b""

    def _start_body(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        keep_alive = headers.get("connection", "").lower() != "close" and parts[0] == "HTTP/1.1"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            self._remaining = int(headers["content-length"])
            self._state = _LENGTH
            if self._remaining == 0:
                self._finish()
        else:
            self._state = _UNTIL_CLOSE
            keep_alive = False
        self.reusable = keep_alive
        if status != 200:
            self._feed = self.error_body.append  # an error's body is a message for us, not SSE
        assert self._head is not None
        if not self._head.done():
            self._head.set_result(ResponseHead(status, headers))


def _discard(_: bytes) -> None:
    return None


class StreamingTransport:
    """Keep-alive connections to one server, and `post` for streamed responses."""

    def __init__(self, url: str, *, headers: dict[str, str], connect_timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.base_path = parts.path.rstrip("/")
        self.connect_timeout = connect_timeout
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in {"host": host_header, **headers}.items())
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await loop.create_connection(lambda: _Connection(loop), self.host, self.port,
                                                           ssl=self.ssl)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc or type(exc).__name__}") from exc
        return protocol

    def _request_bytes(self, path: str, body: bytes) -> bytes:
        return (f"POST {self.base_path}{path} HTTP/1.1\r\n{self._fixed_headers}"
                f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body

    async def post(self, path: str, body: bytes, feed: Callable[[bytes], None], *,
                   idle_timeout: float) -> StreamResponse:
        """Send one POST; a 200 body streams into `feed` as it arrives, until the response is complete."""
        request = self._request_bytes(path, body)
        while True:
            while self._idle and self._idle[-1].closed:
                self._idle.pop()  # the server closed it while it sat idle
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect()
            connection.start(request, feed, idle_timeout)
            try:
                head = await connection.head
            except StreamDropped:
                if reused and not connection.received_any:
                    continue  # the server had closed this idle connection; a fresh one is safe
                raise
            except BaseException:
                connection.abort()
                raise
            break
        try:
            await connection.done
        except BaseException:
            connection.abort()
            raise
        if connection.reusable and not connection.closed:
            self._idle.append(connection)
        else:
            connection.abort()
        return StreamResponse(head.status, head.headers, b"".join(connection.error_body))

    def close(self) -> None:
        for connection in self._idle:
            with contextlib.suppress(Exception):
                connection.abort()
        self._idle.clear()
