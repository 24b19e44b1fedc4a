"""The project's error tree, and the one place that maps library exceptions onto it.

    RegenError
    ├── ConfigError            bad options, unreachable fleet, unknown model, unwritable --out   (exit 2)
    │   ├── S3AccessError      the bucket is missing, access is denied, or there are no credentials
    │   └── ManifestConflict   a live writer owns this host and shard, or has another shard count
    ├── InputError             a prompt file or record is bad and --strict is on                  (exit 3)
    ├── SinkError              results cannot be written (disk full, read-only)                    (exit 4)
    ├── S3Error                an S3 call failed (uploads retry it; at start-up it is exit 2)
    │   ├── S3Unavailable      unreachable, timed out, 5xx or SlowDown: try again later
    │   └── S3Conflict         a conditional write (If-Match / If-None-Match) did not hold
    └── AttemptError           one request attempt failed; decides whether to retry
        ├── RetryableError
        │   ├── ConnectFailed      the endpoint could not be reached
        │   │   ├── TLSCertificateError  its certificate is not trusted (also a ConfigError)
        │   │   └── ProxyFailed          the proxy in the way failed, not the server (also a ConfigError)
        │   ├── ServerError        HTTP 5xx
        │   ├── RateLimited        HTTP 429 (carries Retry-After)
        │   ├── StreamDropped      the connection ended before the stream was whole
        │   │   └── ProtocolError  the response broke HTTP/1.1 framing, or its gzip body is corrupt
        │   │       └── RunawayStream  the stream ran well past max_tokens without finishing
        │   ├── StreamStalled      no tokens within the idle timeout (comments and keep-alives do not count)
        │   ├── StreamErrorEvent   a `data: {"error": ...}` event mid-stream
        │   └── MissingTokenIds    a whole reply without the token ids --token-ids on asked for
        └── PermanentError
            ├── RequestRejected    HTTP 4xx other than 429: sending it again cannot help
            ├── NotEventStream     a 200 whose Content-Type is not text/event-stream (e.g. a login page)
            ├── NotJSON            a control-plane 200 (/v1/models, /v1/loads) whose body is not JSON
            └── UnsupportedEncoding  a body in a Content-Encoding other than identity, gzip or deflate

Library exceptions (OSError, ssl errors, httptools' parser errors, httpx errors, zlib and orjson decode
errors) become these only through the `map_*` functions at the bottom of this module; the wire layer
calls them and never builds a message from a library exception itself. TLSCertificateError and
ProxyFailed are ConfigErrors too: mid-run they are retried like any failed connection, at start-up they
stop the run with their own message instead of "cannot reach".
"""

from __future__ import annotations

import errno
import re
import ssl
import zlib

import httptools
import httpx

from client.core import redact


class RegenError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(RegenError):
    """The run cannot start as configured; the message says what to change."""


class S3AccessError(ConfigError):
    """The bucket cannot be used as configured (missing, access denied, no credentials)."""


class ManifestConflict(ConfigError):
    """Another writer with the same host and shard is writing this manifest."""


class S3Error(RegenError):
    """An S3 call failed. `code` is S3's error code when it answered, else ''."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class S3Unavailable(S3Error):
    """The store could not be reached, timed out, or answered 5xx / SlowDown: try again later."""


class S3Conflict(S3Error):
    """A conditional write (If-Match / If-None-Match) did not hold."""


class InputError(RegenError):
    """A prompt file or record is invalid (raised only under --strict; otherwise reported and skipped)."""


class SinkError(RegenError):
    """Results cannot be written; dispatch must stop so nothing done is lost."""


class AttemptError(RegenError):
    """One attempt at one request failed. Its message is redacted here, once for every kind: it may quote a
    server's or proxy's text (an error body, an error event), which may echo the Authorization header, and it
    goes to the failures file, the live view and the logs."""

    retryable = False

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(redact.text(message), *args)

    @property
    def kind(self) -> str:
        return type(self).__name__


class RetryableError(AttemptError):
    retryable = True


class ConnectFailed(RetryableError):
    pass


class TLSCertificateError(ConnectFailed, ConfigError):
    """The server's certificate failed verification; the message names the host, the reason and the fix."""


class ProxyFailed(ConnectFailed, ConfigError):
    """The proxy could not be reached or refused to carry the request; the message names the proxy."""


class ServerError(RetryableError):
    pass


class RateLimited(RetryableError):
    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StreamDropped(RetryableError):
    pass


class ProtocolError(StreamDropped):
    """The response is not valid HTTP/1.1 (e.g. a chunk without its CRLF), or its compressed body is corrupt."""


class RunawayStream(ProtocolError):
    """The server streamed well past the request's max_tokens (client.wire.endpoint.token_limit) and had not
    finished: it ignores the limit, so the attempt is cut off instead of streaming for ever."""


class StreamStalled(RetryableError):
    pass


class StreamErrorEvent(RetryableError):
    pass


class MissingTokenIds(RetryableError):
    """Under --token-ids on, a reply came whole but without its ids (a server that gave them at the preflight
    and then stopped): a record without ids would be silent damage, so the attempt fails and is retried."""


class PermanentError(AttemptError):
    pass


class RequestRejected(PermanentError):
    """`detail`: the whole error body (up to 8 KiB), where the message shows its start: a strict server's
    refusal may list every field it refused, more than the message holds."""

    def __init__(self, message: str, status: int, detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.detail = redact.text(detail or message)


class TooLong(RequestRejected):
    """The prompt (with max_tokens) does not fit the server's context: no retry and no later run can help,
    so it is counted apart and not sent again unless --retry-too-long."""

    @property
    def kind(self) -> str:
        return "too_long"


class NotEventStream(PermanentError):
    """A streaming request got a 200 that is not an event stream: usually a proxy's or login page."""


class NotJSON(PermanentError):
    """A control-plane document that should be JSON is not (e.g. a login page)."""


class UnsupportedEncoding(PermanentError):
    """The server compressed the body in an encoding the client does not decode."""


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; HTTP-date forms are rare from inference servers and ignored."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


# How engines word "prompt + max_tokens over the context": vLLM ("This model's maximum context length is N
# tokens. However, you requested M tokens"), SGLang ("The input (N tokens) is longer than the model's
# context length", "Requested token count exceeds the model's maximum context length"), OpenAI's
# `context_length_exceeded` code, llama.cpp ("exceeds the available context size").
_CONTEXT_OVERFLOW = re.compile(
    r"maximum context length|longer than the model's context length|context_length_exceeded"
    r"|exceeds the available context size|context window exceed", re.IGNORECASE)


def error_for_status(status: int, body: bytes, retry_after: str | None = None) -> AttemptError:
    text = body[:500].decode("utf-8", "replace").strip()
    message = f"HTTP {status}: {text}" if text else f"HTTP {status}"
    if status == 429:
        return RateLimited(message, parse_retry_after(retry_after))
    if status >= 500:
        return ServerError(message)
    if status in (400, 413, 422) and _CONTEXT_OVERFLOW.search(text):
        return TooLong(message, status)
    return RequestRejected(message, status, body[:8192].decode("utf-8", "replace"))


def not_event_stream(where: str, content_type: str, body: bytes) -> NotEventStream:
    first = body[:120].decode("utf-8", "replace")
    return NotEventStream(f"{where} answered 200 with Content-Type {content_type}, not text/event-stream "
                          f"(a proxy, gateway or login page in the way?); the body starts: {first!r}")


def map_json_error(exc: ValueError, where: str, content_type: str | None, body: bytes) -> NotJSON:
    """orjson's decode error of a control-plane document."""
    first = body[:120].decode("utf-8", "replace")
    return NotJSON(f"{where} answered 200 with Content-Type {content_type or '(none)'} and a body that is not "
                   f"JSON ({exc}); the body starts: {first!r}")


def unsupported_encoding(where: str, encoding: str) -> UnsupportedEncoding:
    return UnsupportedEncoding(f"{where} sent a body with Content-Encoding {encoding!r}, which the client cannot "
                               "decode (it asks for identity and decodes gzip and deflate)")


# -- the mapping of library exceptions -----------------------------------------------------------------------


def _detail(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first exception of `kind` in its chain of causes (httpx wraps the ssl error twice)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _certificate_error(exc: BaseException, host_port: str) -> TLSCertificateError | None:
    found = _find(exc, ssl.SSLCertVerificationError)
    if not isinstance(found, ssl.SSLCertVerificationError):
        return None
    reason = found.verify_message or found.reason or _detail(found)
    return TLSCertificateError(f"TLS certificate of {host_port} not trusted: {reason}; pass --ca-bundle FILE or "
                               "set SSL_CERT_FILE (or --insecure to skip verification)")


def map_connect_error(exc: BaseException, *, host: str, port: int, proxy: str | None = None) -> ConnectFailed:
    """An OSError, ssl error or timeout while opening a connection to host:port.

    `proxy` is the proxy's display URL when the failing step was reaching the proxy itself.
    """
    where = f"{host}:{port}"
    certificate = _certificate_error(exc, where)
    if certificate is not None:
        return certificate
    detail = "timed out" if isinstance(exc, TimeoutError) else _detail(exc)
    if proxy is not None:
        return ProxyFailed(f"cannot connect to proxy {proxy} (for {where}): {detail}; check --proxy or "
                           "HTTP_PROXY/HTTPS_PROXY, or exempt the host with NO_PROXY")
    if isinstance(exc, ssl.SSLError):
        return ConnectFailed(f"TLS handshake with {where} failed: {exc.reason or detail}")
    return ConnectFailed(f"cannot connect to {where}: {detail}")


def proxy_refused(proxy: str, request: str, status: int | None, reason: str = "") -> ProxyFailed:
    """The proxy answered `request` (e.g. "CONNECT host:443") with a non-2xx status, or (status None) closed
    the connection or sent `reason` instead of an answer."""
    if status is not None:
        answer = f"answered {status} {reason}".rstrip()
    else:
        answer = f"sent {reason}" if reason else "closed the connection without an answer"
    return ProxyFailed(f"proxy {proxy} {answer} to {request}; check --proxy or HTTP_PROXY/HTTPS_PROXY")


def map_parse_error(exc: Exception, where: str) -> AttemptError:
    """An httptools (llhttp) parser error. An AttemptError raised by our own callback (e.g. an SSE error
    event) rides in its context and is returned as it is."""
    if isinstance(exc, httptools.HttpParserCallbackError) and isinstance(exc.__context__, AttemptError):
        return exc.__context__
    if isinstance(exc, httptools.HttpParserInvalidStatusError):
        return ProtocolError(f"malformed HTTP response from {where}: not an HTTP/1.x status line ({_detail(exc)})")
    return ProtocolError(f"malformed HTTP response from {where}: {_detail(exc)}")


def map_decode_error(exc: zlib.error, where: str, encoding: str) -> ProtocolError:
    return ProtocolError(f"corrupt {encoding} body from {where}: {_detail(exc)}")


def map_event_error(payload: bytes, exc: ValueError) -> StreamDropped:
    """An SSE event whose data is not JSON (orjson's decode error)."""
    return StreamDropped(f"malformed event ({exc}): {payload[:200]!r}")


def map_connection_lost(exc: BaseException | None, where: str, *, before_response: bool) -> StreamDropped:
    detail = f": {exc}" if exc else ""
    if before_response:
        return StreamDropped(f"{where} closed the connection before the response{detail}")
    return StreamDropped(f"connection to {where} lost mid-stream{detail}")


def map_httpx_error(exc: BaseException, *, where: str, host_port: str, proxy: str | None) -> AttemptError:
    """An httpx exception of a control-plane request (health, models, loads), which wait for a whole body.

    A read timeout means no answer in time; a failure to connect while a proxy is configured is the proxy's
    (the proxy is the only host httpx dials then); a certificate failure is always named as one.
    """
    certificate = _certificate_error(exc, host_port)
    if certificate is not None:
        return certificate
    detail = _detail(exc)
    if isinstance(exc, httpx.ProxyError):
        return ProxyFailed(f"proxy {proxy} refused to carry the request to {where}: {detail}")
    if proxy is not None and isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return ProxyFailed(f"cannot connect to proxy {proxy} (for {host_port}): {detail}; check --proxy or "
                           "HTTP_PROXY/HTTPS_PROXY, or exempt the host with NO_PROXY")
    silent = isinstance(exc, httpx.RemoteProtocolError) and "without sending a response" in detail
    if proxy is not None and (silent or isinstance(exc, httpx.NetworkError)):
        # The proxy is the only peer httpx talks to then: a connection it drops or resets is its failure.
        return ProxyFailed(f"proxy {proxy} dropped the connection carrying GET {where} ({detail}); check "
                           "--proxy or HTTP_PROXY/HTTPS_PROXY")
    if silent:
        return StreamDropped(f"{where} closed the connection before the response")
    if isinstance(exc, httpx.ReadTimeout):
        return StreamStalled(f"no answer from {where} within the time limit")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.DecodingError):
        return ProtocolError(f"malformed HTTP response from {where}: {detail}")
    return ConnectFailed(f"cannot reach {where}: {detail}")


def map_ca_bundle_error(exc: OSError | ssl.SSLError, path: str) -> ConfigError:
    return ConfigError(f"--ca-bundle {path}: cannot load CA certificates: {exc.strerror or _detail(exc)}")


# Errors that say "no room" (a full disk, a quota, a file-size limit): the directory is right and the remedy is
# space, then the same command; advice to choose another directory would start the run over.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def map_write_error(exc: OSError, message: str, advice: str = "") -> ConfigError | SinkError:
    """An OSError writing under --out (at start-up too): a SinkError (exit 4, "free space and run the same
    command again") when there is no room, else a ConfigError of `message` and `advice` (what to change)."""
    if exc.errno in NO_SPACE:
        return SinkError(message)
    return ConfigError(f"{message}{advice}")
