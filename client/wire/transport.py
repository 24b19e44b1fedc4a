"""The one HTTP stack of the client: HTTP/1.1 to one server over a keep-alive pool, streamed POSTs (the
hot path) and whole-body GETs (the control plane: /health, /v1/models, load documents).

Why not a general HTTP client here: with one SSE event per network read (how a GPU server streams to a
thousand clients), aiohttp costs ~24 us of client CPU per event before any parsing, and httpx over it
~38 us with our parser (docs/benchmarks.md). So each connection is an asyncio Protocol
(`client.wire.http1.Connection`, HTTP parsed by httptools) that hands body bytes straight to the SSE
parser. Connections are opened by `client.wire.connect` (TLS, proxies); requests go to the server's root
plus the server path (`client.wire.urls`).

The control plane rides the same pool, TLS context and proxy decision as the streams (a poll about once a
second reuses a kept-alive connection instead of reconnecting), so the two can never disagree. A GET is
bounded (`get`): a connect timeout, an idle timer and a deadline for the whole answer; its body is kept up
to `GET_BODY_LIMIT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from client.core.errors import ConfigError, OversizedResponse, StreamDropped, StreamStalled
from client.wire.connect import NetworkOptions, Route, open_connection, route_for
from client.wire.errors_map import not_event_stream, proxy_refused
from client.wire.http1 import Connection, Feed, Headers, ResponseHead
from client.wire.urls import ServerURL

# A keep-alive connection the server closed while it sat idle fails at once when reused; a drop later
# than this is not taken for one.
STALE_WINDOW_S = 1.0
# The largest control-plane body kept (a /metrics page of a big DP server is a few hundred KiB).
GET_BODY_LIMIT = 32 * 1024 * 1024

__all__ = ["Connection", "Headers", "Response", "ResponseHead", "StreamResponse", "StreamingTransport"]


@dataclass(frozen=True, slots=True)
class StreamResponse:
    """A finished response: a 200 body went to the feed; any other status keeps its body here."""

    status: int
    headers: Headers = field(default_factory=lambda: Headers([]))
    error_body: bytes = b""


@dataclass(frozen=True, slots=True)
class Response:
    """A whole response to a GET: its status, headers and body (of a non-200, the first 16 KiB)."""

    status: int
    headers: Headers
    body: bytes


class StreamingTransport:
    """Keep-alive connections to one server: `post` for streamed responses, `get` for whole documents.

    `headers` go with every request; `post_headers` only with the POSTs (e.g. the streams' Accept)."""

    def __init__(self, url: str | ServerURL, *, headers: dict[str, str], connect_timeout: float = 10.0,
                 network: NetworkOptions | None = None, route: Route | None = None,
                 stale_window_s: float = STALE_WINDOW_S, post_headers: dict[str, str] | None = None) -> None:
        if isinstance(url, str):
            try:
                url = ServerURL.parse(url)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        self.server = url
        self.route = route if route is not None else route_for(url, network or NetworkOptions())
        self.connect_timeout = connect_timeout
        self.stale_window_s = stale_window_s
        self.where = url.display
        fixed = {"host": url.authority, "accept-encoding": "identity", **headers}
        forward = self.route.proxy is not None and url.scheme == "http"
        # A forward proxy takes absolute-form requests and its credentials with each of them.
        self._target = url.absolute if forward else url.path
        proxy_header = self.route.proxy_header if forward else ""
        self._get_headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()) + proxy_header
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in {**fixed, **(post_headers or {})}.items()) \
            + proxy_header
        self._idle: list[Connection] = []

    async def _connect(self, limit_s: float) -> Connection:
        loop = asyncio.get_running_loop()
        return await open_connection(lambda: Connection(loop, self.where), self.server, self.route, limit_s)

    def _request_bytes(self, path: str, body: bytes) -> bytes:
        return (f"POST {self._target(path)} HTTP/1.1\r\n{self._fixed_headers}"
                f"content-length: {len(body)}\r\n\r\n").encode("latin-1") + body

    async def post(self, path: str, body: bytes, feed: Feed, *, idle_timeout: float,
                   expect_type: str | None = None) -> StreamResponse:
        """Send one POST to the server path `path`; a 200 body streams into `feed` as it arrives, until the
        response is complete. `feed` returns False for a piece that carried no progress: `idle_timeout`
        counts from the last piece that did (client.wire.http1). With `expect_type` (e.g.
        "text/event-stream"), a 200 of another declared Content-Type raises NotEventStream naming the type
        and the first bytes of the body."""
        request = self._request_bytes(path, body)
        head, connection = await self._exchange(request, feed, idle_timeout, expect_type, self.connect_timeout,
                                                f"POST {self._target(path)}")
        error_body = b"".join(connection.error_body)
        if connection.wrong_type is not None:
            raise not_event_stream(self.where, connection.wrong_type, error_body)
        return StreamResponse(head.status, head.headers, error_body)

    async def get(self, path: str, limit_s: float) -> Response:
        """GET the server path `path`: connected within the connect timeout (at most `limit_s`; else
        ConnectFailed), then no pause over `limit_s` and the whole answer by the connect limit plus `limit_s`
        (else StreamStalled); every other failure is the AttemptError a POST would get (ProxyFailed,
        TLSCertificateError, ProtocolError, ...)."""
        request = f"GET {self._target(path)} HTTP/1.1\r\n{self._get_headers}\r\n".encode("latin-1")
        pieces: list[bytes] = []
        size = 0

        def keep(data: bytes) -> None:
            nonlocal size
            size += len(data)
            if size > GET_BODY_LIMIT:
                raise OversizedResponse(f"{self.where}{path} sent a body over {GET_BODY_LIMIT >> 20} MiB, the "
                                        "client's cap on a control-plane document")
            pieces.append(data)

        # The connection's own limit ends first (ConnectFailed: nothing there), then the idle timer (no byte
        # for `limit_s`: StreamStalled, a mute or slow server); the deadline ends a server that dribbles.
        connect_limit_s = min(self.connect_timeout, limit_s)
        try:
            async with asyncio.timeout(connect_limit_s + limit_s):
                head, connection = await self._exchange(request, keep, limit_s, None, connect_limit_s,
                                                        f"GET {path}")
        except TimeoutError:
            raise StreamStalled(f"no whole answer from {self.where}{path} within {limit_s:.0f}s") from None
        body = b"".join(pieces) if head.status == 200 else b"".join(connection.error_body)
        return Response(head.status, head.headers, body)

    async def _exchange(self, request: bytes, feed: Feed, idle_timeout: float, expect_type: str | None,
                        connect_limit_s: float, what: str) -> tuple[ResponseHead, Connection]:
        """One request on a kept-alive connection (or a new one) until its response is complete."""
        while True:
            while self._idle and self._idle[-1].closed:
                self._idle.pop()  # the server closed it while it sat idle
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect(connect_limit_s)
            sent_at = time.monotonic()
            connection.start(request, feed, idle_timeout, expect_type)
            try:
                head = await connection.head
            except StreamDropped as exc:
                if reused and not connection.received_any and time.monotonic() - sent_at < self.stale_window_s:
                    # The server had closed this idle connection: a fresh one is safe. A drop that comes
                    # later may be a server that failed while generating (a stream still queued sends
                    # nothing before then): that goes to the retry policy.
                    continue
                if self.route.proxy is not None and not connection.received_any:
                    raise proxy_refused(self.route.proxy.display, what, None) from exc
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
        return head, connection

    def close(self) -> None:
        for connection in self._idle:
            with contextlib.suppress(Exception):
                connection.abort()
        self._idle.clear()
