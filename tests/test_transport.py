"""The hot-path HTTP/1.1 transport: framing (table-driven, split at every awkward point) and real-socket
behaviour against a local aiohttp server (keep-alive, error bodies, stalls, stale connections)."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from client.core.errors import ConnectFailed, ProtocolError, StreamDropped, StreamStalled, UnsupportedEncoding
from client.wire.http1 import Connection
from client.wire.transport import StreamingTransport


class FakeTransport:
    def __init__(self) -> None:
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


GZ = gzip.compress(b"data: a\n\ndata: b\n\n", mtime=0)
DEFLATED = zlib.compress(b"data: a\n\ndata: b\n\n")
HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

FRAMING = [
    ("chunked", HEAD_CHUNKED + chunked(b"data: a\n\n", b"data: b\n\n"), 200, b"data: a\n\ndata: b\n\n", True),
    ("chunk extension and trailer", HEAD_CHUNKED + b"5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", 200, b"hello", True),
    ("content-length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 200, b"hello", True),
    ("connection close", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 200, b"ok", False),
    ("error body", b"HTTP/1.1 429 Too Many\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nslow", 429, b"", True),
    ("empty body", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, b"", True),
    ("100 continue first", b"HTTP/1.1 100 Continue\r\n\r\n" + HEAD_CHUNKED + chunked(b"data: a\n\n"), 200,
     b"data: a\n\n", True),
    ("gzip, chunked", HEAD_CHUNKED.replace(b"\r\n\r\n", b"\r\nContent-Encoding: gzip\r\n\r\n")
     + chunked(GZ[:10], GZ[10:]), 200, b"data: a\n\ndata: b\n\n", True),
    ("deflate, content-length", b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n"
     % len(DEFLATED) + DEFLATED, 200, b"data: a\n\ndata: b\n\n", True),
]


@pytest.mark.parametrize(("name", "wire", "status", "body", "reusable"), FRAMING, ids=[f[0] for f in FRAMING])
async def test_framing_at_every_split(name: str, wire: bytes, status: int, body: bytes, reusable: bool) -> None:
    loop = asyncio.get_running_loop()
    for cut in range(1, len(wire)):
        for pieces in ([wire[:cut], wire[cut:]], [wire[i:i + 3] for i in range(0, len(wire), 3)]):
            received: list[bytes] = []
            connection = Connection(loop)
            connection.connection_made(FakeTransport())  # type: ignore[arg-type]
            connection.start(b"GET / HTTP/1.1\r\n\r\n", received.append, idle_timeout=30)
            for piece in pieces:
                connection.data_received(piece)
            head = connection.head.result()
            await connection.done
            assert head.status == status
            assert b"".join(received) == body
            assert connection.reusable is reusable
            if status != 200:
                assert b"".join(connection.error_body) == b"slow"
                assert head.headers["retry-after"] == "3"


async def test_bad_status_line_is_a_dropped_stream() -> None:
    connection = Connection(asyncio.get_running_loop())
    connection.connection_made(FakeTransport())  # type: ignore[arg-type]
    connection.start(b"x", lambda _: None, idle_timeout=30)
    connection.data_received(b"SSH-2.0-OpenSSH\r\n\r\n")
    with pytest.raises(StreamDropped, match="malformed HTTP"):
        await connection.head


def started(expect_type: str | None = None) -> tuple[Connection, list[bytes]]:
    received: list[bytes] = []
    connection = Connection(asyncio.get_running_loop(), "http://test")
    connection.connection_made(FakeTransport())  # type: ignore[arg-type]
    connection.start(b"x", received.append, idle_timeout=30, expect_type=expect_type)
    return connection, received


async def test_http10_body_ends_at_close() -> None:
    connection, received = started()
    connection.data_received(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: a\n\n")
    connection.data_received(b"data: b\n\n")
    assert not connection.done.done()
    connection.connection_lost(None)
    await connection.done
    assert b"".join(received) == b"data: a\n\ndata: b\n\n"
    assert not connection.reusable


async def test_chunk_without_its_crlf_is_a_framing_error() -> None:
    connection, received = started()
    connection.data_received(HEAD_CHUNKED + b"5\r\nhelloXY0\r\n\r\n")
    await connection.head
    with pytest.raises(ProtocolError, match=r"malformed HTTP response from http://test: .*"):
        await connection.done
    assert received == [b"hello"]


async def test_unknown_encoding_is_named() -> None:
    connection, _ = started()
    connection.data_received(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc")
    with pytest.raises(UnsupportedEncoding, match="Content-Encoding 'br'"):
        await connection.head


async def test_unexpected_content_type_is_kept_apart() -> None:
    connection, received = started(expect_type="text/event-stream")
    connection.data_received(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n\r\n<html>")
    await connection.done
    assert (connection.wrong_type, received, connection.error_body) == ("text/html", [], [b"<html>"])


async def test_repeated_headers_are_kept() -> None:
    connection, _ = started()
    connection.data_received(b"HTTP/1.1 204 No Content\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n")
    head = await connection.head
    assert head.headers.get_all("set-cookie") == ["a=1", "b=2"]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    state: dict[str, Any] = {"connections": set(), "requests": 0, "dropped": 0}

    async def stream(request: web.Request) -> web.StreamResponse:
        state["requests"] += 1
        state["connections"].add(request.transport)
        mode = request.query.get("mode", "ok")
        if mode == "error":
            return web.json_response({"error": "bad"}, status=400)
        if mode == "drop_once" and not state["dropped"]:
            state["dropped"] += 1  # as if it had closed the connection just before this request came
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if mode == "late_drop":
            await asyncio.sleep(0.3)  # generating, with nothing sent yet: then the server fails
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: {\"n\": 1}\n\n")
        if mode == "stall":
            await asyncio.sleep(30)
        if mode == "drop":
            assert request.transport is not None
            request.transport.abort()
            return response
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", state
    await runner.cleanup()


async def test_keep_alive_reuses_one_connection(server: tuple[str, dict[str, Any]]) -> None:
    url, state = server
    transport = StreamingTransport(url, headers={"content-type": "application/json"})
    for _ in range(5):
        received: list[bytes] = []
        response = await transport.post("/v1/chat/completions", b"{}", received.append, idle_timeout=5)
        assert response.status == 200
        assert b"".join(received) == b"data: {\"n\": 1}\n\ndata: [DONE]\n\n"
    assert state["requests"] == 5
    assert len(state["connections"]) == 1
    transport.close()


async def test_error_status_keeps_its_body(server: tuple[str, dict[str, Any]]) -> None:
    url, _ = server
    transport = StreamingTransport(url, headers={})
    response = await transport.post("/v1/chat/completions?mode=error", b"{}", lambda _: None, idle_timeout=5)
    assert response.status == 400
    assert b"bad" in response.error_body
    transport.close()


async def test_stall_and_drop_and_refused(server: tuple[str, dict[str, Any]]) -> None:
    url, _ = server
    transport = StreamingTransport(url, headers={})
    with pytest.raises(StreamStalled):
        await transport.post("/v1/chat/completions?mode=stall", b"{}", lambda _: None, idle_timeout=0.5)
    with pytest.raises(StreamDropped):
        await transport.post("/v1/chat/completions?mode=drop", b"{}", lambda _: None, idle_timeout=5)
    dead = StreamingTransport("http://127.0.0.1:9", headers={})
    with pytest.raises(ConnectFailed):
        await dead.post("/v1/chat/completions", b"{}", lambda _: None, idle_timeout=5)
    transport.close()


async def test_a_late_drop_on_a_reused_connection_is_not_resent(server: tuple[str, dict[str, Any]]) -> None:
    url, state = server
    transport = StreamingTransport(url, headers={}, stale_window_s=0.1)
    await transport.post("/v1/chat/completions", b"{}", lambda _: None, idle_timeout=5)
    with pytest.raises(StreamDropped):
        await transport.post("/v1/chat/completions?mode=late_drop", b"{}", lambda _: None, idle_timeout=5)
    assert state["requests"] == 2  # sent once: the retry policy, not the transport, decides on another try
    transport.close()


def close_seen(connection: Connection) -> asyncio.Event:
    """Set when `connection` learns that its peer closed it (its protocol's connection_lost)."""
    seen = asyncio.Event()
    lost = connection.connection_lost

    def connection_lost(exc: Exception | None) -> None:
        lost(exc)
        seen.set()

    connection.connection_lost = connection_lost  # type: ignore[method-assign]
    return seen


async def test_an_idle_connection_the_server_closed_is_not_reused(server: tuple[str, dict[str, Any]]) -> None:
    url, state = server
    # No resend window: were the closed connection reused, its failure would reach the caller.
    transport = StreamingTransport(url, headers={}, stale_window_s=0.0)
    await transport.post("/v1/chat/completions", b"{}", lambda _: None, idle_timeout=5)
    [idle] = transport._idle
    seen = close_seen(idle)
    for peer in state["connections"]:
        peer.close()  # the server drops the idle keep-alive connection
    async with asyncio.timeout(10):
        await seen.wait()
    assert idle.closed
    response = await transport.post("/v1/chat/completions", b"{}", lambda _: None, idle_timeout=5)
    assert response.status == 200
    assert (state["requests"], len(state["connections"])) == (2, 2)
    transport.close()


async def test_a_reused_connection_dropped_at_once_is_resent_on_a_fresh_one(
        server: tuple[str, dict[str, Any]]) -> None:
    url, state = server
    # The close has not reached the client when it reuses the connection: the server drops the request
    # before answering anything, well inside the window, and the transport sends it again on a new one.
    transport = StreamingTransport(url, headers={}, stale_window_s=30.0)
    await transport.post("/v1/chat/completions", b"{}", lambda _: None, idle_timeout=5)
    response = await transport.post("/v1/chat/completions?mode=drop_once", b"{}", lambda _: None, idle_timeout=5)
    assert response.status == 200
    assert state["dropped"] == 1
    assert (state["requests"], len(state["connections"])) == (3, 2)
    transport.close()
