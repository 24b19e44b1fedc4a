"""The project's error tree (the map of every class, below) and the mapping of HTTP statuses onto it.

    RegenError
    ├── ConfigError            bad options, unreachable fleet, unknown model, unwritable --out   (exit 2)
    │   ├── S3AccessError      the bucket is missing, access is denied, or there are no credentials
    │   ├── ManifestConflict   a live writer owns this host and shard, or has another shard count
    │   ├── OutLocked          another client holds this --out (client.local.lock)
    │   ├── ShardEnvError      the environment does not say which shard this is (client.core.shard_env)
    │   ├── PlanError          a sampling plan that cannot be used (client.core.plan_file)
    │   └── LoadFormatError    a server's load document has the wrong shape (client.wire.loads)
    ├── InputError             a prompt file or record is bad and --strict is on                  (exit 3)
    │   └── RenderError        a chat template cannot render one conversation: that one row or prompt
    │                          fails, named; never the whole run (client.local.chat_template)
    ├── SinkError              results or a report cannot be written (disk full, read-only)        (exit 4)
    ├── S3Error                an S3 call failed (uploads retry it; at start-up it is exit 2)
    │   ├── S3Unavailable      unreachable, timed out, 5xx or SlowDown: try again later
    │   ├── S3Conflict         a conditional write (If-Match / If-None-Match) did not hold
    │   └── SegmentTooLarge    over one PUT, on a store without multipart (client.s3.segment_upload)
    └── AttemptError           one request attempt failed; decides whether to retry
        ├── RetryableError
        │   ├── ConnectFailed      the endpoint could not be reached
        │   │   ├── TLSCertificateError  its certificate is not trusted (also a ConfigError)
        │   │   └── ProxyFailed          the proxy in the way failed, not the server (also a ConfigError)
        │   ├── ServerError        HTTP 5xx
        │   ├── RateLimited        HTTP 429 (carries Retry-After)
        │   ├── StreamDropped      the connection ended before the stream was whole
        │   │   └── ProtocolError  the response broke HTTP/1.1 framing, or its gzip body is corrupt
        │   │       ├── RunawayStream  the stream ran well past max_tokens without finishing
        │   │       └── OversizedResponse  an event or a body, decoded, passed the client's byte cap
        │   ├── StreamStalled      no tokens within the idle timeout (comments and keep-alives do not count),
        │   │                      or no whole answer within the request's total deadline
        │   ├── StreamErrorEvent   a `data: {"error": ...}` event mid-stream
        │   └── MissingTokenIds    a whole reply without the token ids --token-ids on asked for
        └── PermanentError
            ├── RequestRejected    HTTP 4xx other than 429: sending it again cannot help
            │   └── TooLong        the prompt and max_tokens overflow the context (kind `too_long`)
            │       └── FillsWindow  the prompt alone fills --train-window (kind `fills_window`)
            ├── NotEventStream     a 200 whose Content-Type is not text/event-stream (e.g. a login page)
            ├── NotJSON            a control-plane 200 (/v1/models, /v1/loads) whose body is not JSON
            └── UnsupportedEncoding  a body in a Content-Encoding other than identity, gzip or deflate

Every tool's exit code is a function of this tree (client.core.exit_codes.code_for, applied once at each
tool's entry by client.core.entry); an OSError that no code mapped is 4 when it says "no room"
(`no_room`), else 2. The classes marked with a module live beside the code that raises them.

The tree is this module's; a library's exceptions are mapped onto it beside the code that uses the
library, each in one table: client.wire.errors_map (ssl, OSError, httptools, zlib, orjson) and
client.s3.errors_map (botocore). Here is only what needs no library: the status mapping
(`error_for_status`) and the no-room test of a write (`map_write_error`). TLSCertificateError and
ProxyFailed are ConfigErrors too: mid-run they are retried like any failed connection, at start-up they
stop the run with their own message instead of "cannot reach".

An attempt's `kind` (the class name; `too_long` for TooLong) is the `error_class` of its failure record.
`blames_server` marks the classes that count against the endpoint's health: ConnectFailed, ServerError,
StreamDropped and StreamStalled, with their subclasses.
"""

from __future__ import annotations

import errno
import re

from client.core import redact


class RegenError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(RegenError):
    """The run cannot start as configured; the message says what to change."""


class S3AccessError(ConfigError):
    """The bucket cannot be used as configured (missing, access denied, no credentials)."""


class ManifestConflict(ConfigError):
    """Another writer with the same host and shard is writing this manifest."""


class OutLocked(ConfigError):
    """Another live client holds the lock on this --out."""


class ShardEnvError(ConfigError, ValueError):
    """The environment does not say which shard this is; the message says what to give."""


class PlanError(ConfigError, ValueError):
    """A sampling plan that cannot be used: the message names the source, the key and the problem."""


class LoadFormatError(ConfigError, ValueError):
    """A server's load document does not have the expected shape."""


class S3Error(RegenError):
    """An S3 call failed. `code` is S3's error code when it answered, else ''."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class S3Unavailable(S3Error):
    """The store could not be reached, timed out, or answered 5xx / SlowDown: try again later."""


class S3Conflict(S3Error):
    """A conditional write (If-Match / If-None-Match) did not hold."""


class SegmentTooLarge(S3Error):
    """The segment's body is over what one PUT takes, and the store refuses multipart uploads."""


class InputError(RegenError):
    """A prompt file or record is invalid (raised only under --strict; otherwise reported and skipped)."""


class RenderError(InputError, ValueError):
    """This conversation cannot be rendered with this chat template (the export's re-render and template
    check, the `--tokenizer` prompt count); the message says why. It fails one row or one prompt, never a
    run: the caller counts it and names the record."""


class SinkError(RegenError):
    """Results cannot be written; dispatch must stop so nothing done is lost."""


class AttemptError(RegenError):
    """One attempt at one request failed. Its message is redacted here, once for every kind: it may quote a
    server's or proxy's text (an error body, an error event), which may echo the Authorization header, and it
    goes to the failures file, the live view and the logs."""

    retryable = False
    # The failure says something about the server rather than about the request: the dispatcher counts it
    # toward taking the endpoint out of rotation (a connection that cannot be made does at once).
    blames_server = False

    def __init__(self, message: str, *args: object) -> None:
        super().__init__(redact.text(message), *args)

    @property
    def kind(self) -> str:
        return type(self).__name__


class RetryableError(AttemptError):
    retryable = True


class ConnectFailed(RetryableError):
    blames_server = True


class TLSCertificateError(ConnectFailed, ConfigError):
    """The server's certificate failed verification; the message names the host, the reason and the fix."""


class ProxyFailed(ConnectFailed, ConfigError):
    """The proxy could not be reached or refused to carry the request; the message names the proxy."""


class ServerError(RetryableError):
    blames_server = True


class RateLimited(RetryableError):
    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StreamDropped(RetryableError):
    blames_server = True


class ProtocolError(StreamDropped):
    """The response is not valid HTTP/1.1 (e.g. a chunk without its CRLF), or its compressed body is corrupt."""


class RunawayStream(ProtocolError):
    """The server streamed well past the request's max_tokens (client.wire.endpoint.token_limit) and had not
    finished: it ignores the limit, so the attempt is cut off instead of streaming for ever."""


class OversizedResponse(ProtocolError):
    """One SSE event, a whole stream or a response body held more bytes, decoded, than the client keeps
    (client.wire.bounds): a gzip body cannot grow without end in memory. The message names the cap."""


class StreamStalled(RetryableError):
    """No progress within the idle timeout, or no whole answer within the request's total deadline."""

    blames_server = True


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


class FillsWindow(TooLong):
    """The prompt alone holds --train-window tokens or more: the trainer would keep none of the reply, so it
    is not sent, and (like too_long) not sent again by later runs unless --retry-too-long. Found by the
    client (no HTTP status)."""

    def __init__(self, message: str, window: int) -> None:
        super().__init__(message, 0)
        self.window = window  # the --train-window it filled: a later, wider window may take it

    @property
    def kind(self) -> str:
        return "fills_window"


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


# Errors that say "no room" (a full disk, a quota, a file-size limit): the directory is right and the remedy is
# space, then the same command; advice to choose another directory would start the run over.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def no_room(exc: OSError) -> bool:
    """The OSError says there is no room (a full disk, a quota, a file size limit). pyarrow raises its IO
    errors as OSError with the C library's text but no errno, so the text counts too."""
    return exc.errno in NO_SPACE or any(text in str(exc) for text in ("No space left", "File too large",
                                                                       "Disk quota exceeded"))


def map_write_error(exc: OSError, message: str, advice: str = "") -> ConfigError | SinkError:
    """An OSError writing under --out (at start-up too): a SinkError (exit 4, "free space and run the same
    command again") when there is no room, else a ConfigError of `message` and `advice` (what to change)."""
    if no_room(exc):
        return SinkError(message)
    return ConfigError(f"{message}{advice}")
