"""The project's error tree, and the one place that maps transport exceptions onto it.

    RegenError
    ├── ConfigError            bad options, unreachable fleet, unknown model, unwritable --out   (exit 2)
    │   ├── S3AccessError      the bucket is missing, access is denied, or there are no credentials
    │   └── ManifestConflict   another writer with this host and shard owns the manifest
    ├── InputError             a prompt file or record is bad and --strict is on                  (exit 3)
    ├── SinkError              results cannot be written (disk full, read-only)                    (exit 4)
    ├── S3Error                an S3 call failed (uploads retry it; at start-up it is exit 2)
    │   ├── S3Unavailable      unreachable, timed out, 5xx or SlowDown: try again later
    │   └── S3Conflict         a conditional write (If-Match / If-None-Match) did not hold
    └── AttemptError           one request attempt failed; decides whether to retry
        ├── RetryableError
        │   ├── ConnectFailed      the endpoint could not be reached
        │   ├── ServerError        HTTP 5xx
        │   ├── RateLimited        HTTP 429 (carries Retry-After)
        │   ├── StreamDropped      the connection ended before the stream was whole
        │   ├── StreamStalled      no bytes within the idle timeout
        │   └── StreamErrorEvent   a `data: {"error": ...}` event mid-stream
        └── PermanentError
            └── RequestRejected    HTTP 4xx other than 429: sending it again cannot help
"""

from __future__ import annotations

import httpx


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
    """One attempt at one request failed."""

    retryable = False

    @property
    def kind(self) -> str:
        return type(self).__name__


class RetryableError(AttemptError):
    retryable = True


class ConnectFailed(RetryableError):
    pass


class ServerError(RetryableError):
    pass


class RateLimited(RetryableError):
    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StreamDropped(RetryableError):
    pass


class StreamStalled(RetryableError):
    pass


class StreamErrorEvent(RetryableError):
    pass


class PermanentError(AttemptError):
    pass


class RequestRejected(PermanentError):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header; HTTP-date forms are rare from inference servers and ignored."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_for_status(status: int, body: bytes, retry_after: str | None = None) -> AttemptError:
    text = body[:500].decode("utf-8", "replace").strip()
    message = f"HTTP {status}: {text}" if text else f"HTTP {status}"
    if status == 429:
        return RateLimited(message, parse_retry_after(retry_after))
    if status >= 500:
        return ServerError(message)
    return RequestRejected(message, status)


def map_transport_error(exc: BaseException, *, streaming: bool) -> AttemptError:
    """Map an httpx exception (the control plane's requests) to our tree.

    The phase decides: once a body has begun, a timeout is a stall and any other failure a dropped
    stream; before it, a failure to get an answer means the endpoint cannot be reached.
    """
    detail = str(exc) or type(exc).__name__
    if streaming:
        if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout):
            return StreamStalled(f"no bytes within the idle timeout ({type(exc).__name__})")
        return StreamDropped(f"connection lost mid-stream: {detail}")
    if isinstance(exc, httpx.ReadTimeout):
        return StreamStalled(f"no response headers within the idle timeout: {detail}")
    return ConnectFailed(f"cannot reach the endpoint: {detail}")
