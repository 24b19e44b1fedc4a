"""HTTP/1.x framing, the JSON-lines request log and the serve loop shared by the test servers.

Owns: parsing a request head and body (Content-Length or chunked) from an asyncio stream, building response
heads and chunks, relaying a response body while keeping its framing, writing one JSON line per request to
`--log`, and running a handler on 127.0.0.1 (port 0 by default, optional TLS) that announces its port as
`PORT <n>` on stdout line 1 and in `--ready-file`, and stops on SIGTERM or, with `--parent-pipe`, when
stdin reaches end of file (the parent died or closed the pipe).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

HOST = "127.0.0.1"
LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
RawSink = Callable[[bytes], Awaitable[None]]


class BadRequest(Exception):
    """The peer sent bytes that are not a well-formed HTTP/1.x message."""


@dataclass
class Request:
    """One parsed request; `headers` keeps order, case and repeats as received."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        values = self.header_all(name)
        return values[-1] if values else None

    def header_all(self, name: str) -> list[str]:
        low = name.lower()
        return [v for k, v in self.headers if k.lower() == low]

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def parse_headers(lines: list[str]) -> list[tuple[str, str]]:
    headers = []
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"bad header line {line!r}")
        headers.append((name, value.strip()))
    return headers


async def read_head(reader: asyncio.StreamReader) -> Request | None:
    """The next request head, or None when the peer closed cleanly between requests."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadRequest("connection closed inside a request head") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadRequest("request head too large") from exc
    lines = raw.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line {lines[0]!r}")
    return Request(parts[0], parts[1], parts[2], parse_headers(lines[1:]))


def is_chunked(headers: list[tuple[str, str]]) -> bool:
    return any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers)


def content_length(headers: list[tuple[str, str]]) -> int | None:
    values = [v for k, v in headers if k.lower() == "content-length"]
    if not values:
        return None
    try:
        return int(values[-1])
    except ValueError as exc:
        raise BadRequest(f"bad Content-Length {values[-1]!r}") from exc


async def read_chunked(reader: asyncio.StreamReader, raw: RawSink | None = None) -> bytes:
    """Decode a chunked body; `raw` (if given) receives each chunk's framing bytes as they arrive."""
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise BadRequest(f"bad chunk size line {line!r}") from exc
        if size == 0:
            trailer = line
            while True:
                t = await reader.readuntil(b"\r\n")
                trailer += t
                if t == b"\r\n":
                    break
            if raw is not None:
                await raw(trailer)
            return bytes(body)
        data = await reader.readexactly(size + 2)
        if data[-2:] != b"\r\n":
            raise BadRequest("chunk data not followed by CRLF")
        body += data[:-2]
        if raw is not None:
            await raw(line + data)


async def read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]]) -> bytes:
    if is_chunked(headers):
        return await read_chunked(reader)
    length = content_length(headers)
    return await reader.readexactly(length) if length else b""


def response_head(status: int, headers: list[tuple[str, str]], version: str = "HTTP/1.1") -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"{version} {status} {reason}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def http_date() -> str:
    return formatdate(usegmt=True)


def chunk(data: bytes, *, crlf: bool = True) -> bytes:
    """One chunk of a chunked body; `crlf=False` leaves out the CRLF that must follow the data."""
    return b"%x\r\n" % len(data) + data + (b"\r\n" if crlf else b"")


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


def header_pairs(headers: list[tuple[str, str]]) -> list[list[str]]:
    return [[k, v] for k, v in headers]


def request_record(req: Request, **extra: Any) -> dict[str, Any]:
    """What the request log keeps of one request (headers as [name, value] pairs, in order)."""
    return {
        "time": time.time(),
        "method": req.method,
        "target": req.target,
        "path": req.path,
        "version": req.version,
        "headers": header_pairs(req.headers),
        "body": req.body.decode("utf-8", "replace"),
        "json": req.json(),
        **extra,
    }


class RequestLog:
    """Appends one JSON object per line to a file (written and flushed before the reply goes out)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=0, help="0 (default) lets the OS choose")
    parser.add_argument("--log", default=None, help="append one JSON line per request to this file")
    parser.add_argument("--ready-file", default=None, help="write the port here once listening")
    parser.add_argument("--parent-pipe", action="store_true", help="exit when stdin reaches end of file")
    parser.add_argument("--tls-cert", default=None, help="serve https with this certificate chain (PEM)")
    parser.add_argument("--tls-key", default=None, help="the private key of --tls-cert (PEM)")


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
    with contextlib.suppress(OSError, ValueError):
        while sys.stdin.buffer.read(4096):
            pass
    with contextlib.suppress(RuntimeError):  # the loop may already be closed
        loop.call_soon_threadsafe(stop.set)


def _announce(port: int, ready_file: str | None) -> None:
    if ready_file:
        tmp = f"{ready_file}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(f"{port}\n")
        os.replace(tmp, ready_file)
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()


def _guard(handler: Handler) -> Handler:
    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, BadRequest):
            pass
        except asyncio.CancelledError:
            pass  # shutdown; a cancelled connection task would make Python 3.11 print a traceback
        except Exception:  # pragma: no cover - shows up in the server's stderr for debugging
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    return run


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if not cert:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


async def _serve(handler: Handler, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.parent_pipe:
        threading.Thread(target=_watch_stdin, args=(loop, stop), daemon=True).start()
    server = await asyncio.start_server(_guard(handler), HOST, args.port,
                                        ssl=tls_context(args.tls_cert, args.tls_key))
    _announce(int(server.sockets[0].getsockname()[1]), args.ready_file)
    await stop.wait()
    server.close()  # open connections are cancelled when asyncio.run returns


def serve(handler: Handler, args: argparse.Namespace) -> None:
    asyncio.run(_serve(handler, args))
