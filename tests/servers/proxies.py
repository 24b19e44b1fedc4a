"""Two small HTTP proxies for wire tests, each logging every request it carries as one JSON line to `--log`.

- `reverse`: requests to `/PREFIX/...` go to `--upstream http://127.0.0.1:PORT` with the prefix stripped;
  anything else gets 404 from the proxy itself. `--count-as N` makes it lie: a tokenize answer (a POST
  whose path ends in `/tokenize`) comes back with its `count` replaced by N (a server whose count route
  disagrees with its chat route).
- `forward`: absolute-form requests (`GET http://host:port/path HTTP/1.1`) are forwarded; `CONNECT host:port`
  opens a tunnel (for https). Only loopback targets are allowed (403 otherwise). `--refuse` accepts each
  connection and closes it at once (a dead proxy); `--auth USER:PASS` demands Proxy-Authorization (407).

Each carried request opens its own upstream connection (sent with `Connection: close`); the response is
relayed as it arrives, chunk by chunk, keeping its framing, and the client connection stays open when the
framing allows. Log records are `httpwire.request_record` plus `server`, `kind` (reverse, forward, connect,
refused, rejected), `upstream` ("host:port" or null) and `conn`/`n_on_conn`.

    python -m tests.servers.proxies reverse --prefix /api/x --upstream http://127.0.0.1:PORT [--log F]
    python -m tests.servers.proxies forward [--refuse] [--auth USER:PASS] [--log F]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
from urllib.parse import urlsplit

from tests.servers.httpwire import (
    BadRequest,
    Request,
    RequestLog,
    add_serve_args,
    content_length,
    is_chunked,
    parse_headers,
    read_body,
    read_chunked,
    read_head,
    request_record,
    response_head,
    send,
    serve,
)

_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "transfer-encoding",
        "upgrade", "content-length"}
_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def is_loopback(host: str) -> bool:
    return host.lower() in _LOOPBACK or host.startswith("127.")


async def simple(writer: asyncio.StreamWriter, status: int, text: str, *, keep: bool,
                 extra: tuple[tuple[str, str], ...] = ()) -> bool:
    body = json.dumps({"detail": text}).encode()
    h = [("Content-Type", "application/json"), ("Content-Length", str(len(body))), *extra]
    if not keep:
        h.append(("Connection", "close"))
    await send(writer, response_head(status, h) + body)
    return keep


async def relay_response(up: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str,
                         keep: bool) -> bool:
    """Copy one response from `up` to `writer` as it arrives; True when the client connection may stay open."""
    while True:
        raw = await up.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")[:-2]
        version, status_text = lines[0].split(" ", 2)[:2]
        status = int(status_text)
        if not 100 <= status < 200:
            break
        await send(writer, raw)  # 1xx: pass on, then read the real head
    headers = parse_headers(lines[1:])
    no_body = method == "HEAD" or status in (204, 304)
    length = None if no_body else content_length(headers)
    chunked = not no_body and is_chunked(headers)
    until_close = not (no_body or chunked or length is not None)
    keep = keep and not until_close
    kept = [(k, v) for k, v in headers if k.lower() not in {"connection", "keep-alive", "proxy-connection"}]
    if not keep:
        kept.append(("Connection", "close"))
    await send(writer, response_head(status, kept, version))

    async def out(data: bytes) -> None:
        await send(writer, data)

    if chunked:
        await read_chunked(up, out)
    elif length:
        left = length
        while left:
            data = await up.read(min(left, 65536))
            if not data:
                raise ConnectionError("upstream closed inside a Content-Length body")
            left -= len(data)
            await out(data)
    elif until_close:
        while data := await up.read(65536):
            await out(data)
    return keep


async def forward_request(req: Request, host: str, port: int, target: str, writer: asyncio.StreamWriter,
                          *, host_header: str | None = None) -> bool:
    """Send `req` to host:port as `target` (origin-form) and relay the answer; False closes the client."""
    try:
        up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError as exc:
        return await simple(writer, 502, f"upstream {host}:{port} unreachable: {exc}", keep=req.keep_alive)
    try:
        headers = [(k, v) for k, v in req.headers if k.lower() not in _HOP]
        if host_header is not None:
            headers = [(k, host_header if k.lower() == "host" else v) for k, v in headers]
        if req.body or req.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(req.body))))
        headers.append(("Connection", "close"))
        lines = [f"{req.method} {target} HTTP/1.1", *(f"{k}: {v}" for k, v in headers)]
        await send(up_writer, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + req.body)
        try:
            return await relay_response(up_reader, writer, req.method, req.keep_alive)
        except (BadRequest, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            writer.transport.abort()  # the upstream broke its framing: so does the proxy, visibly
            return False
    finally:
        up_writer.close()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            await send(writer, data)
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass


class Proxy:
    """Reads requests off each client connection and hands them to `carry`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.log = RequestLog(args.log)
        self._conns = itertools.count(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = next(self._conns)
        if getattr(self.args, "refuse", False):
            self.log.write({"server": self.args.command, "kind": "refused", "conn": conn})
            return  # the guard closes the connection
        for n in itertools.count(1):
            try:
                req = await read_head(reader)
                if req is None:
                    return
                req.body = await read_body(reader, req.headers)
            except BadRequest as exc:
                await simple(writer, 400, str(exc), keep=False)
                return
            if not await self.carry(req, reader, writer, {"server": self.args.command, "conn": conn,
                                                          "n_on_conn": n}):
                return

    async def carry(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    tags: dict[str, object]) -> bool:
        raise NotImplementedError


class ReverseProxy(Proxy):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.prefix = "/" + args.prefix.strip("/")
        up = urlsplit(args.upstream)
        if up.scheme != "http" or not up.hostname or not up.port:
            raise SystemExit("--upstream must look like http://127.0.0.1:PORT")
        self.host, self.port = up.hostname, up.port

    async def carry(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    tags: dict[str, object]) -> bool:
        if req.path != self.prefix and not req.path.startswith(self.prefix + "/"):
            self.log.write(request_record(req, kind="rejected", upstream=None, **tags))
            return await simple(writer, 404, f"no route: the proxy serves {self.prefix}/...", keep=req.keep_alive)
        target = req.target[len(self.prefix):]
        if not target.startswith("/"):
            target = "/" + target
        self.log.write(request_record(req, kind="reverse", upstream=f"{self.host}:{self.port}",
                                      forwarded_target=target, **tags))
        if self.args.count_as is not None and req.method == "POST" and target.endswith("/tokenize"):
            return await self.lying_count(req, target, writer)
        return await forward_request(req, self.host, self.port, target, writer,
                                     host_header=f"{self.host}:{self.port}")

    async def lying_count(self, req: Request, target: str, writer: asyncio.StreamWriter) -> bool:
        """The upstream's tokenize answer, read whole (Content-Length), with `count` replaced."""
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        try:
            head = (f"POST {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json"
                    f"\r\nContent-Length: {len(req.body)}\r\nConnection: close\r\n\r\n")
            await send(up_writer, head.encode("latin-1") + req.body)
            raw = await up_reader.read()
        finally:
            up_writer.close()
        status_line, _, rest = raw.partition(b"\r\n")
        body = rest.partition(b"\r\n\r\n")[2]
        status = int(status_line.split()[1])
        if status == 200:
            answer = json.loads(body)
            answer["count"] = self.args.count_as
            body = json.dumps(answer).encode()
        head_out = response_head(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        await send(writer, head_out + body)
        return req.keep_alive


class ForwardProxy(Proxy):
    def _authorized(self, req: Request) -> bool:
        if not self.args.auth:
            return True
        expected = "Basic " + base64.b64encode(self.args.auth.encode()).decode()
        return req.header("proxy-authorization") == expected

    async def carry(self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    tags: dict[str, object]) -> bool:
        connect = req.method == "CONNECT"
        if connect:
            host, _, port_text = req.target.rpartition(":")
            target = ""
        else:
            parts = urlsplit(req.target)
            host, port_text = parts.hostname or "", str(parts.port or (80 if parts.scheme == "http" else ""))
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            if parts.scheme != "http" or not host:
                self.log.write(request_record(req, kind="rejected", upstream=None, **tags))
                return await simple(writer, 400, "a forward proxy needs an absolute http:// target",
                                    keep=req.keep_alive)
        host = host.strip("[]")
        upstream = f"{host}:{port_text}"
        if not port_text.isdigit() or not is_loopback(host):
            self.log.write(request_record(req, kind="rejected", upstream=upstream, **tags))
            return await simple(writer, 403, f"only loopback targets are allowed, not {upstream}",
                                keep=req.keep_alive)
        if not self._authorized(req):
            self.log.write(request_record(req, kind="rejected", upstream=upstream, **tags))
            return await simple(writer, 407, "proxy authentication required", keep=req.keep_alive,
                                extra=(("Proxy-Authenticate", 'Basic realm="test"'),))
        self.log.write(request_record(req, kind="connect" if connect else "forward", upstream=upstream, **tags))
        if not connect:
            return await forward_request(req, host, int(port_text), target, writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port_text))
        except OSError as exc:
            return await simple(writer, 502, f"cannot reach {upstream}: {exc}", keep=False)
        await send(writer, b"HTTP/1.1 200 Connection established\r\n\r\n")
        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            with contextlib.suppress(Exception):
                up_writer.close()
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.proxies", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rev = sub.add_parser("reverse", help="path-prefix reverse proxy")
    rev.add_argument("--prefix", required=True, help="e.g. /api/x")
    rev.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT")
    rev.add_argument("--count-as", type=int, default=None, metavar="N",
                     help="answer every tokenize request with count N (a lying count route)")
    add_serve_args(rev)
    fwd = sub.add_parser("forward", help="forward proxy (absolute-form and CONNECT)")
    fwd.add_argument("--refuse", action="store_true", help="accept and close every connection at once")
    fwd.add_argument("--auth", default=None, help="USER:PASS required in Proxy-Authorization (Basic)")
    add_serve_args(fwd)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    proxy: Proxy = ReverseProxy(args) if args.command == "reverse" else ForwardProxy(args)
    serve(proxy.handle, args)


if __name__ == "__main__":
    main()
