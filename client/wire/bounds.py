"""The bounds a server cannot defeat: how many decoded bytes one SSE event and one response may hold, and
how long a whole request may take, whatever the server trickles.

The idle timer (client.wire.http1) restarts at each piece of progress, so a server that sends one byte
every few seconds would keep a request open for ever; every request therefore has a total deadline too.
A non-streaming request (the prompt count, `/v1/tokenize`) gets a plain one; a stream runs legitimately
long, so its deadline grows with what it may generate: the idle timeout (time to wait in the server's
queue) plus a second per token up to the runaway cut-off (client.wire.endpoint.token_limit), a rate no
loaded server falls below. A stream without max_tokens has only the idle timer and the byte caps.

The byte caps count bytes after decompression, so a small gzip body cannot grow without end in memory:
one event (the unterminated tail the SSE parser holds) and one stream or response body. The largest
legitimate event is an id chunk of a prompt at a 262,144-token context, about 2 MB of JSON; a 32,768-token
stream with ids and usage on every chunk is about 15 MB. Passing a cap is an OversizedResponse.
"""

from __future__ import annotations

from dataclasses import dataclass

# One SSE event, decoded: eight times the largest id chunk.
EVENT_BYTES = 16 << 20
# One stream, decoded: over ten times a long stream's bytes.
STREAM_BYTES = 256 << 20
# The total deadline of a stream, per token it may generate (a floor of one token a second).
SECONDS_PER_TOKEN = 1.0


@dataclass(frozen=True, slots=True)
class Bounds:
    """The caps of one endpoint's requests (tests set small ones)."""

    event_bytes: int = EVENT_BYTES
    stream_bytes: int = STREAM_BYTES
    seconds_per_token: float = SECONDS_PER_TOKEN

    def stream_deadline(self, token_limit: int | None, idle_timeout: float) -> float | None:
        """Seconds a stream that may run to `token_limit` tokens gets in all; None without a limit."""
        if token_limit is None:
            return None
        return idle_timeout + token_limit * self.seconds_per_token


def mib(size: int) -> str:
    """A cap as people read it: "16 MiB", "1.5 MiB", "512 KiB"."""
    if size >= 1 << 20:
        return f"{size / (1 << 20):g} MiB"
    return f"{size / 1024:g} KiB"
