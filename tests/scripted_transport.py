"""A transport that answers from a script instead of a socket, for direct tests of the run's logic (retries,
the swarm, the exit codes): it has StreamingTransport's `post`, `get` and `close`, so an Endpoint takes it as
it is (`Endpoint(url, transport=...)`), the way httpx's MockTransport stands in for a network."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from client.core.errors import AttemptError
from client.wire.http1 import Headers
from client.wire.transport import Response, StreamResponse


def sse_reply(text: str, *, prompt_tokens: int = 5, finish: str = "stop") -> bytes:
    """A whole streamed chat completion: one content chunk a word, the finish, the usage."""
    words = text.split(" ")
    chunks = [{"choices": [{"index": 0, "delta": {"content": (" " if i else "") + word}}],
               "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": i + 1}}
              for i, word in enumerate(words)]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(words)}})
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


# One answer to a POST: a reply's SSE bytes (status 200), (status, body, headers) for an error answer, or
# an AttemptError the transport raises (a refused connection, a dropped stream).
Answer = bytes | tuple[int, bytes, dict[str, str]] | AttemptError


@dataclass
class ScriptedTransport:
    """POSTs take the next scripted answer (then `default`); GETs answer 200 {} for /health and 404 else."""

    answers: deque[Answer] = field(default_factory=deque)
    default: Answer = field(default_factory=lambda: sse_reply("Hello there"))
    posts: list[bytes] = field(default_factory=list)
    on_post: Callable[[bytes], None] | None = None
    closed: bool = False

    async def post(self, path: str, body: bytes, feed: Callable[[bytes], bool | None], *, idle_timeout: float,
                   expect_type: str | None = None) -> StreamResponse:
        self.posts.append(body)
        if self.on_post is not None:
            self.on_post(body)
        answer = self.answers.popleft() if self.answers else self.default
        if isinstance(answer, AttemptError):
            raise answer
        if isinstance(answer, tuple):
            status, error_body, headers = answer
            return StreamResponse(status, Headers(list(headers.items())), error_body)
        feed(answer)
        return StreamResponse(200, Headers([("content-type", "text/event-stream")]))

    async def get(self, path: str, limit_s: float) -> Response:
        if path == "/health":
            return Response(200, Headers([]), b"{}")
        return Response(404, Headers([]), b'{"detail": "Not Found"}')

    def close(self) -> None:
        self.closed = True
