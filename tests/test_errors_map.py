"""The wire's one table from library exceptions onto the error tree (client.wire.errors_map), row by row:
each library error, raised for real by its library, at each step it can end, becomes the class and the
message that names its cause. The servers that raise them over sockets are in test_wire_conformance."""

from __future__ import annotations

import re
import ssl
import zlib
from collections.abc import Callable

import httptools
import orjson
import pytest

from client.core.errors import (
    ConfigError,
    ConnectFailed,
    NotJSON,
    ProtocolError,
    ProxyFailed,
    RegenError,
    StreamDropped,
    StreamErrorEvent,
    TLSCertificateError,
)
from client.wire.errors_map import (
    BODY,
    CA_BUNDLE,
    CONNECT,
    DECODE,
    DOCUMENT,
    EVENT,
    HEAD,
    PROXY,
    Step,
    connection_lost,
    mapped,
    translate,
)


def raised(make: Callable[[], object]) -> BaseException:
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


class _Callbacks:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def on_headers_complete(self) -> None:
        if self.error is not None:
            raise self.error


def parse(data: bytes, error: Exception | None = None) -> None:
    httptools.HttpResponseParser(_Callbacks(error)).feed_data(data)


def untrusted() -> BaseException:
    exc = ssl.SSLCertVerificationError(1, "certificate verify failed")
    exc.verify_message = "self-signed certificate"
    try:
        try:
            raise exc
        except ssl.SSLError as inner:
            raise ConnectionError("wrapped") from inner
    except ConnectionError as outer:
        return outer


HEAD_OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"

ROWS: list[tuple[str, Callable[[], BaseException], Step, type[RegenError], str]] = [
    ("certificate, wrapped", untrusted, Step(CONNECT, "h:443"), TLSCertificateError,
     r"TLS certificate of h:443 not trusted: self-signed certificate; pass --ca-bundle"),
    ("handshake", lambda: ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number"), Step(CONNECT, "h:443"),
     ConnectFailed, r"TLS handshake with h:443 failed: .*wrong version number"),
    ("refused", lambda: ConnectionRefusedError(111, "Connection refused"), Step(CONNECT, "h:1"), ConnectFailed,
     r"cannot connect to h:1: .*Connection refused"),
    ("timeout", lambda: TimeoutError(), Step(CONNECT, "h:1"), ConnectFailed, r"cannot connect to h:1: timed out"),
    ("proxy refused", lambda: ConnectionRefusedError(111, "Connection refused"),
     Step(PROXY, "h:1", proxy="http://p:3128"), ProxyFailed, r"cannot connect to proxy http://p:3128 \(for h:1\)"),
    ("reset before the head", lambda: ConnectionResetError(104, "reset"), Step(HEAD, "http://h"), StreamDropped,
     r"http://h closed the connection before the response"),
    ("reset mid-body", lambda: ConnectionResetError(104, "reset"), Step(BODY, "http://h"), StreamDropped,
     r"connection to http://h lost mid-stream"),
    ("not HTTP", lambda: raised(lambda: parse(b"SSH-2.0-OpenSSH\r\n\r\n")), Step(BODY, "http://h"),
     ProtocolError, r"malformed HTTP response from http://h: Expected HTTP/"),
    ("bad status", lambda: raised(lambda: parse(b"HTTP/1.1 abc OK\r\n\r\n")), Step(BODY, "http://h"),
     ProtocolError, r"malformed HTTP response from http://h: not an HTTP/1.x status line"),
    ("bad chunk", lambda: raised(lambda: parse(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")),
     Step(BODY, "http://h"), ProtocolError, r"malformed HTTP response from http://h: "),
    ("ours from a callback", lambda: raised(lambda: parse(HEAD_OK, StreamErrorEvent("error event: boom"))),
     Step(BODY, "http://h"), StreamErrorEvent, r"^error event: boom$"),
    ("corrupt gzip", lambda: raised(lambda: zlib.decompressobj(wbits=47).decompress(b"not gzip at all")),
     Step(DECODE, "http://h", encoding="gzip"), ProtocolError, r"corrupt gzip body from http://h"),
    ("event not JSON", lambda: raised(lambda: orjson.loads(b"{oops")), Step(EVENT, "the server", data=b"{oops"),
     StreamDropped, r"malformed event \(.*\): b'\{oops'"),
    ("document not JSON", lambda: raised(lambda: orjson.loads(b"<html>")),
     Step(DOCUMENT, "http://h/v1/models", data=b"<html>", content_type="text/html"), NotJSON,
     r"http://h/v1/models answered 200 with Content-Type text/html and a body that is not JSON .*'<html>'"),
    ("CA file missing", lambda: raised(lambda: ssl.create_default_context(cafile="/nonexistent/ca.pem")),
     Step(CA_BUNDLE, "/nonexistent/ca.pem"), ConfigError,
     r"--ca-bundle /nonexistent/ca\.pem: cannot load CA certificates: No such file"),
]


@pytest.mark.parametrize(("make", "step", "kind", "pattern"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_each_row_of_the_table(make: Callable[[], BaseException], step: Step, kind: type[RegenError],
                               pattern: str) -> None:
    error = translate(make(), step)
    assert type(error) is kind
    assert re.search(pattern, str(error)), str(error)


def test_mapped_raises_the_translation_and_lets_ours_through() -> None:
    with pytest.raises(ConnectFailed, match="cannot connect to h:1") as caught, mapped(Step(CONNECT, "h:1")):
        raise ConnectionRefusedError(111, "Connection refused")
    assert isinstance(caught.value.__cause__, ConnectionRefusedError)
    with pytest.raises(StreamErrorEvent), mapped(Step(BODY, "http://h")):
        raise StreamErrorEvent("ours")


def test_a_clean_close_names_where_it_happened() -> None:
    assert str(connection_lost(None, "http://h", before_response=True)) == \
        "http://h closed the connection before the response"
    assert str(connection_lost(None, "http://h", before_response=False)) == "connection to http://h lost mid-stream"
