"""Standard-library HTTP/1.1 and SSE checking for tests of the test servers: build a request, exchange it over
a raw socket until the server closes, split the raw response, strictly decode chunked framing, and parse SSE
events per the spec. Nothing here tolerates what it is meant to detect (e.g. a chunk missing its CRLF).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


def request_bytes(method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
                  *, close: bool = True) -> bytes:
    payload = b"" if body is None else json.dumps(body).encode()
    h = {"Host": "127.0.0.1", "Accept-Encoding": "identity", **(headers or {})}
    if body is not None:
        h |= {"Content-Type": "application/json", "Content-Length": str(len(payload))}
    if close:
        h["Connection"] = "close"
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + payload


def exchange(port: int, data: bytes, *, timeout: float = 3.0) -> bytes:
    """Send `data`, read until the server closes (a timeout fails the test: the server kept it open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        try:
            while chunk := sock.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass  # drop_mid aborts; what arrived before is what counts
        return out


@dataclass
class Raw:
    status_line: str
    headers: list[tuple[str, str]]
    body: bytes

    def header_all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def header(self, name: str) -> str | None:
        values = self.header_all(name)
        return values[-1] if values else None

    @property
    def status(self) -> int:
        return int(self.status_line.split()[1])


def parse_raw(raw: bytes) -> Raw:
    head, sep, body = raw.partition(b"\r\n\r\n")
    assert sep, f"no complete head in {raw[:200]!r}"
    lines = head.decode("latin-1").split("\r\n")
    headers = [(k, v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    return Raw(lines[0], headers, body)


def dechunk(body: bytes) -> tuple[bytes, bool]:
    """Strictly decode a chunked body: (data, saw the terminating zero chunk). Raises on bad framing."""
    out, pos = b"", 0
    while pos < len(body):
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end], 16)
        pos = end + 2
        if size == 0:
            return out, True
        if body[pos + size: pos + size + 2] != b"\r\n":
            raise ValueError(f"chunk at {pos} not followed by CRLF")
        out += body[pos: pos + size]
        pos += size + 2
    return out, False


def sse_data(body: bytes) -> list[str]:
    """The data of each dispatched SSE event, per the spec (comments and other fields ignored)."""
    text = body.decode().replace("\r\n", "\n").replace("\r", "\n")
    events: list[str] = []
    data: list[str] = []
    for line in text.split("\n"):
        if not line:
            if data:
                events.append("\n".join(data))
            data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    return events
