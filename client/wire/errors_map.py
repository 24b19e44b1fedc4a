"""How the wire's failures become the project's errors (client.core.errors): one table from the libraries
the wire uses (ssl, OSError and timeouts, httptools, zlib, orjson) onto the tree, and the wire's own
verdicts (a proxy's refusal, a 200 that is not an event stream, an encoding it cannot decode).

Every library exception the wire catches goes through `translate` (or the `mapped` context manager on the
cold paths: connecting, loading CA files, parsing a control-plane document), told the `Step` that failed;
the first row of `TABLE` whose type matches builds the error. A certificate failure is looked for in the
whole chain of causes first, since it may arrive wrapped. The hot path (a read, an SSE event) calls
`translate` only in its `except` clause, so a healthy stream pays nothing for this.
"""

from __future__ import annotations

import contextlib
import ssl
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httptools
import orjson

from client.core.errors import (
    AttemptError,
    ConfigError,
    ConnectFailed,
    NotEventStream,
    NotJSON,
    ProtocolError,
    ProxyFailed,
    RegenError,
    StreamDropped,
    TLSCertificateError,
    UnsupportedEncoding,
)

# What the wire was doing: reaching the server, reaching the proxy, loading --ca-bundle, waiting for the
# response head, reading the body, decoding it (gzip, deflate), parsing an SSE event, parsing a document.
CONNECT, PROXY, CA_BUNDLE, HEAD, BODY, DECODE, EVENT, DOCUMENT = (
    "connect", "proxy", "ca_bundle", "head", "body", "decode", "event", "document")


@dataclass(frozen=True, slots=True)
class Step:
    """The step that failed. `where` names the peer as shown (host:port when connecting, the server's URL
    otherwise, the file for CA_BUNDLE); `proxy` is the proxy's display URL; `encoding` the body's
    Content-Encoding (DECODE); `data` the event's data (EVENT) or the document (DOCUMENT) with its
    `content_type`."""

    action: str
    where: str
    proxy: str | None = None
    encoding: str = ""
    data: bytes = b""
    content_type: str | None = None


def _detail(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _untrusted(exc: BaseException, step: Step) -> RegenError:
    assert isinstance(exc, ssl.SSLCertVerificationError)
    reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or _detail(exc)
    return TLSCertificateError(f"TLS certificate of {step.where} not trusted: {reason}; pass --ca-bundle FILE or "
                               "set SSL_CERT_FILE (or --insecure to skip verification)")


def _ours_or_malformed(exc: BaseException, step: Step) -> RegenError:
    # An AttemptError raised by our own parser callback (an SSE error event, a runaway stream) rides in the
    # context of httptools' callback error and is the answer as it is.
    if isinstance(exc.__context__, AttemptError):
        return exc.__context__
    return _malformed(exc, step)


def _not_http(exc: BaseException, step: Step) -> RegenError:
    return ProtocolError(f"malformed HTTP response from {step.where}: not an HTTP/1.x status line ({_detail(exc)})")


def _malformed(exc: BaseException, step: Step) -> RegenError:
    return ProtocolError(f"malformed HTTP response from {step.where}: {_detail(exc)}")


def _corrupt(exc: BaseException, step: Step) -> RegenError:
    return ProtocolError(f"corrupt {step.encoding} body from {step.where}: {_detail(exc)}")


def _not_json(exc: BaseException, step: Step) -> RegenError:
    if step.action == EVENT:
        return StreamDropped(f"malformed event ({exc}): {step.data[:200]!r}")
    first = step.data[:120].decode("utf-8", "replace")
    return NotJSON(f"{step.where} answered 200 with Content-Type {step.content_type or '(none)'} and a body that is "
                   f"not JSON ({exc}); the body starts: {first!r}")


def _os_error(exc: BaseException, step: Step) -> RegenError:
    """OSError, ssl.SSLError and TimeoutError, by the step they ended."""
    detail = "timed out" if isinstance(exc, TimeoutError) else _detail(exc)
    if step.action == CA_BUNDLE:
        strerror = exc.strerror if isinstance(exc, OSError) else None
        return ConfigError(f"--ca-bundle {step.where}: cannot load CA certificates: {strerror or detail}")
    if step.action == PROXY:
        return ProxyFailed(f"cannot connect to proxy {step.proxy} (for {step.where}): {detail}; check --proxy or "
                           "HTTP_PROXY/HTTPS_PROXY, or exempt the host with NO_PROXY")
    if step.action == HEAD:
        return StreamDropped(f"{step.where} closed the connection before the response: {detail}")
    if step.action in (BODY, DECODE, EVENT):
        return StreamDropped(f"connection to {step.where} lost mid-stream: {detail}")
    if isinstance(exc, ssl.SSLError):
        # `reason` is set by OpenSSL's errors only (absent on an SSLError made in Python).
        return ConnectFailed(f"TLS handshake with {step.where} failed: {getattr(exc, 'reason', None) or detail}")
    return ConnectFailed(f"cannot connect to {step.where}: {detail}")


Builder = Callable[[BaseException, Step], RegenError]

# First match wins: the subclasses above their bases (ssl.SSLError and TimeoutError are OSErrors).
TABLE: tuple[tuple[type[BaseException], Builder], ...] = (
    (ssl.SSLCertVerificationError, _untrusted),
    (httptools.HttpParserCallbackError, _ours_or_malformed),
    (httptools.HttpParserInvalidStatusError, _not_http),
    (httptools.HttpParserError, _malformed),
    (zlib.error, _corrupt),
    (orjson.JSONDecodeError, _not_json),
    (OSError, _os_error),
)
LIBRARY_ERRORS: tuple[type[BaseException], ...] = tuple(kind for kind, _ in TABLE)


def _certificate_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """`exc` or the certificate failure in its chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def translate(exc: BaseException, step: Step) -> RegenError:
    """The project's error for the library exception `exc` raised at `step`."""
    certificate = _certificate_failure(exc)
    if certificate is not None:
        return _untrusted(certificate, step)
    for kind, build in TABLE:
        if isinstance(exc, kind):
            return build(exc, step)
    return ConnectFailed(f"{step.where}: {_detail(exc)}")  # not a library error of the table: named as it is


def translate_attempt(exc: BaseException, step: Step) -> AttemptError:
    """`translate` for a step of a request (not CA_BUNDLE), whose errors are all AttemptErrors."""
    error = translate(exc, step)
    assert isinstance(error, AttemptError), error
    return error


@contextlib.contextmanager
def mapped(step: Step) -> Iterator[None]:
    """Raise the project's error for a library exception of the block (ours pass through unchanged)."""
    try:
        yield
    except RegenError:
        raise
    except LIBRARY_ERRORS as exc:
        raise translate(exc, step) from exc


def connection_lost(exc: BaseException | None, where: str, *, before_response: bool) -> AttemptError:
    """The connection closed (`exc` None: cleanly) before the response was complete."""
    if exc is not None:
        return translate_attempt(exc, Step(HEAD if before_response else BODY, where))
    if before_response:
        return StreamDropped(f"{where} closed the connection before the response")
    return StreamDropped(f"connection to {where} lost mid-stream")


# -- the wire's own verdicts ----------------------------------------------------------------------------------


def proxy_refused(proxy: str, request: str, status: int | None, reason: str = "") -> ProxyFailed:
    """The proxy answered `request` (e.g. "CONNECT host:443") with a non-2xx status, or (status None) closed
    the connection or sent `reason` instead of an answer."""
    if status is not None:
        answer = f"answered {status} {reason}".rstrip()
    else:
        answer = f"sent {reason}" if reason else "closed the connection without an answer"
    return ProxyFailed(f"proxy {proxy} {answer} to {request}; check --proxy or HTTP_PROXY/HTTPS_PROXY")


def not_event_stream(where: str, content_type: str, body: bytes) -> NotEventStream:
    first = body[:120].decode("utf-8", "replace")
    return NotEventStream(f"{where} answered 200 with Content-Type {content_type}, not text/event-stream "
                          f"(a proxy, gateway or login page in the way?); the body starts: {first!r}")


def unsupported_encoding(where: str, encoding: str) -> UnsupportedEncoding:
    return UnsupportedEncoding(f"{where} sent a body with Content-Encoding {encoding!r}, which the client cannot "
                               "decode (it asks for identity and decodes gzip and deflate)")
