"""One server, as the client sees it: streaming chat completions (the hot path), its model list, health and
load documents (the control plane), and its wire counters.

Every request goes over one client.wire.transport.StreamingTransport: one keep-alive pool, one `Route`
(TLS context and proxy decision, client.wire.connect) and one path rule (client.wire.urls:
`root + /v1/...`, `root + /health`); `url` is the base URL without credentials; `dialect` is how its kind's
replies carry ids and figures (client.wire.dialect). `/v1/models` is parsed
once (client.wire.models) and kept: the start-up checks read it from here instead of asking again.

Every POST has a total deadline besides the idle timer, which a server trickling bytes would restart for
ever, and a cap on the bytes it may answer (client.wire.bounds): the prompt count must be whole within
its limit, a stream within its idle timeout plus a second per token it may generate.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from client.core.errors import (
    AttemptError,
    ConfigError,
    OversizedResponse,
    ProtocolError,
    RunawayStream,
    StreamDropped,
    StreamStalled,
    error_for_status,
)
from client.core.options import DEFAULT_IDLE_TIMEOUT_S
from client.core.records import Completion
from client.loops.repetition import STREAM_RULE, RepetitionDetector, stop_floor
from client.wire.bounds import Bounds, mib
from client.wire.connect import NetworkOptions, route_for
from client.wire.dialect import PLAIN, ReplyDialect
from client.wire.errors_map import DOCUMENT, Step, mapped
from client.wire.models import ModelCatalog, parse_models
from client.wire.native import GENERATE_PATH, Generated, GenerateStream, parse_generated
from client.wire.sse import StreamParser
from client.wire.transport import GET_BODY_LIMIT, StreamingTransport, StreamResponse
from client.wire.urls import ServerURL

CHAT_PATH = "/v1/chat/completions"
# The finish_reason of a reply the client ended because its tail repeats (the loop stop).
LOOP_FINISH_REASON = "repetition"
# How far past max_tokens a stream may run before it is cut off as a RunawayStream: max(64, 10%) leaves
# room for a count that is only a lower bound rising unevenly (one per chunk until usage corrects it), for
# servers that count a stop token or an MTP step's extra drafts past the limit, and still ends a server
# that ignores max_tokens after a tenth more tokens than asked for.
RUNAWAY_MARGIN_MIN = 64
RUNAWAY_MARGIN_FRACTION = 0.10


@dataclass
class WireCounters:
    """What this endpoint's streams delivered; written only by the endpoint, read by the fleet's live view."""

    streamed_tokens: int = 0  # completion tokens as they stream, failed attempts included
    chunks: int = 0  # SSE events received, for the client-cost benchmark and debugging
    reads: int = 0  # transport reads that delivered them


def token_limit(max_tokens: int) -> int:
    """The completion token count past which a stream asked for `max_tokens` is a RunawayStream."""
    return max_tokens + max(RUNAWAY_MARGIN_MIN, int(max_tokens * RUNAWAY_MARGIN_FRACTION))




class Endpoint:
    """The client side of one inference server. Create inside a running event loop; `aclose()` at the end."""

    def __init__(
        self,
        url: str,
        *,
        index: int = 0,
        max_in_flight: int,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        network: NetworkOptions | None = None,
        transport: StreamingTransport | None = None,
        bounds: Bounds | None = None,
        dialect: ReplyDialect = PLAIN,
    ) -> None:
        try:
            self.server = ServerURL.parse(url)
        except ValueError as exc:
            raise ConfigError(f"endpoint {exc}") from exc
        self.url = self.server.display  # never with credentials: this is what records and the console show
        self.index = index  # its place in the fleet, which stats and the dispatcher key on
        self.wire = WireCounters()
        self.max_in_flight = max_in_flight
        self.idle_timeout = idle_timeout
        self.bounds = bounds or Bounds()
        self.last_error: AttemptError | None = None  # why the last health check got no answer
        self.catalog: ModelCatalog | None = None  # the last /v1/models that answered (model_catalog)
        # How its kind's replies carry ids and MTP figures: standard fields only until the run knows its kind
        # (client.engine.fields sets it from the kind's profile before the preflight).
        self.dialect = dialect
        headers = {"user-agent": "regen-swarm", "accept-encoding": "identity"}
        token = api_key or self.server.token
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.route = route_for(self.server, network or NetworkOptions())
        # `transport`: another object with StreamingTransport's post / get / close, for tests that script a
        # server's answers without a socket (as httpx's MockTransport).
        self._http = transport or StreamingTransport(self.server, headers=headers, connect_timeout=connect_timeout,
                                                     route=self.route,
                                                     post_headers={"content-type": "application/json",
                                                                   "accept": "text/event-stream"})

    def count_from_here(self) -> None:
        """Start the wire counters again from zero (what came before, e.g. the preflight, is not the run's)."""
        self.wire = WireCounters()

    async def aclose(self) -> None:
        self._http.close()

    async def get_bytes(self, path: str, limit_s: float = 5.0) -> bytes:
        """GET the server path `path` (e.g. "/v1/loads"); AttemptError when the server cannot be reached or
        answers non-200."""
        response = await self._http.get(path, limit_s)
        if response.status != 200:
            raise error_for_status(response.status, response.body)
        return response.body

    async def get_json(self, path: str, limit_s: float = 5.0) -> Any:
        """GET a JSON document; NotJSON (an AttemptError) when the body is not JSON."""
        response = await self._http.get(path, limit_s)
        if response.status != 200:
            raise error_for_status(response.status, response.body)
        with mapped(Step(DOCUMENT, self.url + path, data=response.body,
                         content_type=response.headers.get("content-type"))):
            return orjson.loads(response.body)

    async def health(self, limit_s: float = 5.0) -> int | None:
        """The /health status code, or None when nothing answers (`last_error` then says why)."""
        try:
            response = await self._http.get("/health", limit_s)
        except AttemptError as exc:
            self.last_error = exc
            return None
        self.last_error = None
        return response.status

    async def model_catalog(self, limit_s: float = 5.0, *, fresh: bool = False) -> ModelCatalog:
        """The served models: the catalog kept from an earlier answer, or (none yet, or `fresh`) asked now."""
        if self.catalog is None or fresh:
            self.catalog = parse_models(await self.get_json("/v1/models", limit_s))
        return self.catalog

    async def models(self) -> list[str]:
        """Served model ids."""
        return (await self.model_catalog()).ids

    async def post_document(self, path: str, body: bytes, limit_s: float = 60.0) -> Any:
        """POST a JSON request whose answer is one JSON document, read whole within `limit_s` (else
        StreamStalled) and within the client's cap on a document's body. AttemptError as for any request;
        NotJSON when the answer is not JSON."""
        pieces: list[bytes] = []
        size = 0

        def keep(data: bytes) -> bool:
            nonlocal size
            size += len(data)
            if size > GET_BODY_LIMIT:
                raise OversizedResponse(f"{self.url}{path} answered over {mib(GET_BODY_LIMIT)}, the client's cap "
                                        "on a document's body")
            pieces.append(data)
            return True

        response = await self._post(path, body, keep, idle_timeout=limit_s, deadline_s=limit_s)
        if response.status != 200:
            raise error_for_status(response.status, response.error_body, response.headers.get("retry-after"))
        raw = b"".join(pieces)
        with mapped(Step(DOCUMENT, self.url + path, data=raw, content_type=response.headers.get("content-type"))):
            return orjson.loads(raw)

    async def count_prompt(self, path: str, body: bytes, limit_s: float = 60.0) -> int:
        """POST a tokenize request (SGLang `/v1/tokenize`, vLLM `/tokenize`: the chat request's messages, tools
        and chat_template_kwargs) and return its `count`: the prompt's exact token count as this server
        renders it. AttemptError as for any request; NotJSON, or ProtocolError without a count. The whole
        answer must come within `limit_s` (else StreamStalled), however the server paces its bytes."""
        document = await self.post_document(path, body, limit_s)
        count = document.get("count") if isinstance(document, dict) else None
        if type(count) is not int:
            raise ProtocolError(f"{self.url}{path} answered without a token count: {str(document)[:200]!r}")
        if count < 1:
            # A rendered chat prompt has tokens; a count below one would make the window's room a lie.
            raise ProtocolError(f"{self.url}{path} answered an impossible token count, {count}")
        return count

    async def generate(self, body: bytes, max_new_tokens: int) -> Generated:
        """POST one SGLang `/generate` (client.wire.native) and return its answer. It is bounded as a stream
        of `max_new_tokens` is: a total deadline and the stream's byte cap. AttemptError for every failure."""
        pieces: list[bytes] = []
        size = 0
        cap = self.bounds.stream_bytes

        def keep(data: bytes) -> bool:
            nonlocal size
            size += len(data)
            if size > cap:
                raise OversizedResponse(f"{self.url}{GENERATE_PATH} answered over {mib(cap)}, the client's cap")
            pieces.append(data)
            return False  # nothing streams before the whole answer: the idle timer is the deadline's

        deadline_s = self.bounds.stream_deadline(token_limit(max_new_tokens), self.idle_timeout) or self.idle_timeout
        response = await self._post(GENERATE_PATH, body, keep, idle_timeout=deadline_s, deadline_s=deadline_s)
        if response.status != 200:
            raise error_for_status(response.status, response.error_body, response.headers.get("retry-after"))
        generated = parse_generated(b"".join(pieces), self.url)
        self.wire.streamed_tokens += generated.completion_tokens
        return generated

    async def stream_generate(self, body: bytes, max_new_tokens: int,
                              on_ids: Callable[[list[int]], None]) -> GenerateStream:
        """POST one streamed SGLang `/generate` (client.wire.native.GenerateStream): every id is handed to
        `on_ids` as it arrives, so those of a stream that breaks are the caller's. Bounded as a chat stream is:
        the idle timer, a total deadline for `max_new_tokens`, the byte caps. AttemptError for every failure;
        a stream that ends without its finish is a StreamDropped."""
        stream = GenerateStream(on_ids, self.url, event_bytes=self.bounds.event_bytes,
                                stream_bytes=self.bounds.stream_bytes)
        counted = 0

        def feed(data: bytes) -> bool:
            nonlocal counted
            progress = stream.feed(data)
            if stream.received > token_limit(max_new_tokens):
                raise RunawayStream(f"{self.url}{GENERATE_PATH} streamed {stream.received} ids past max_new_tokens "
                                    f"{max_new_tokens}")
            self.wire.streamed_tokens += stream.received - counted
            counted = stream.received
            return progress

        deadline_s = self.bounds.stream_deadline(token_limit(max_new_tokens), self.idle_timeout)
        response = await self._post(GENERATE_PATH, body, feed, idle_timeout=self.idle_timeout, deadline_s=deadline_s,
                                    expect_type="text/event-stream")
        if response.status != 200:
            raise error_for_status(response.status, response.error_body, response.headers.get("retry-after"))
        if stream.final is None:
            raise StreamDropped(f"{self.url}{GENERATE_PATH} ended after {stream.received} id(s) without finishing")
        return stream

    async def tokenize(self, path: str, body: bytes, limit_s: float = 60.0) -> list[int]:
        """The prompt's ids as this server renders it (SGLang `/v1/tokenize` with the chat request's messages,
        tools and chat_template_kwargs); ProtocolError without them."""
        document = await self.post_document(path, body, limit_s)
        tokens = document.get("tokens") if isinstance(document, dict) else None
        if not isinstance(tokens, list) or not tokens or not all(type(i) is int for i in tokens):
            raise ProtocolError(f"{self.url}{path} answered without the prompt's token ids: {str(document)[:200]!r}")
        return tokens

    async def stream_chat(self, body: bytes, max_tokens: int | None = None, *,
                          stop_loops: bool = False) -> tuple[Completion, float | None]:
        """POST one streaming chat completion; returns it whole with its time to first token.

        `max_tokens` is the one in `body` (None when it asks for none): a stream that runs past
        `token_limit(max_tokens)` tokens is cut off as a RunawayStream. Raises an AttemptError subclass for
        every failure, so the retry policy sees one error tree.
        """
        return await self._stream_chat(body, max_tokens, stop_loops)

    async def _stream_chat(self, body: bytes, max_tokens: int | None,
                           stop_loops: bool) -> tuple[Completion, float | None]:
        bounds = self.bounds
        # The loop stop watches only a request with a budget, and looks only once the reply has used most of
        # it (client.loops.repetition_rule.stop_floor): a reply that could have been asked for is never cut.
        watch = RepetitionDetector(STREAM_RULE, armed=False) if stop_loops and max_tokens is not None else None
        arm_at = stop_floor(max_tokens) if watch is not None and max_tokens is not None else sys.maxsize
        parser = StreamParser(watch, dialect=self.dialect, event_bytes=bounds.event_bytes,
                              stream_bytes=bounds.stream_bytes)
        # Without max_tokens the server's own context length bounds the reply; only the idle timeout applies.
        limit = token_limit(max_tokens) if max_tokens is not None else sys.maxsize
        deadline_s = bounds.stream_deadline(token_limit(max_tokens) if max_tokens is not None else None,
                                            self.idle_timeout)
        counters = self.wire
        started = time.monotonic()
        first_output: list[float] = []
        reads = 0
        counted = 0  # of parser.live_tokens, already added to counters.streamed_tokens

        def feed(data: bytes) -> bool:
            nonlocal reads, counted
            reads += 1
            parser.feed(data)
            if parser.live_tokens == counted:
                # No new token (comments, keep-alive events, role, finish and usage chunks): not progress
                # for the idle timer, so a server that sends only `: ping` cannot hold the stream for ever.
                return False
            if parser.live_tokens >= arm_at and watch is not None:
                watch.armed = True  # per read, not per chunk: armed at most one read late
            if parser.loop is not None and parser.finish_reason is None:
                # A reply whose finish_reason has arrived ended by itself: never a loop to stop.
                # Closing the connection is how SGLang and vLLM learn to abort the request and free its slot.
                raise StreamDropped(f"{self.url}: the reply repeats itself; stopped by the client (loop stop)")
            if parser.live_tokens > limit:
                raise RunawayStream(f"{self.url} streamed {parser.live_tokens} completion tokens without finishing, "
                                    f"past max_tokens {max_tokens} (cut off at {limit}): the server ignores "
                                    "max_tokens; the prompt is retried, on another server where there is one")
            counters.streamed_tokens += parser.live_tokens - counted
            counted = parser.live_tokens
            if not first_output and parser.saw_output:
                first_output.append(time.monotonic() - started)
            return True

        try:
            try:
                response = await self._post(CHAT_PATH, body, feed, idle_timeout=self.idle_timeout,
                                            deadline_s=deadline_s, expect_type="text/event-stream")
            except AttemptError:
                if parser.loop is not None and parser.finish_reason is None:
                    return parser.stopped(LOOP_FINISH_REASON), _first(first_output)
                if not parser.whole:
                    raise
                completion = parser.completion(ended_cleanly=False)
            else:
                if response.status != 200:
                    raise error_for_status(response.status, response.error_body, response.headers.get("retry-after"))
                completion = parser.completion(ended_cleanly=True)
            return completion, _first(first_output)
        finally:
            counters.chunks += parser.events
            counters.reads += reads
            # The final usage corrects a count taken from chunks; tokens of a failed attempt stay counted,
            # since the server did generate them.
            counters.streamed_tokens += max(0, parser.live_tokens - counted)


    async def _post(self, path: str, body: bytes, feed: Callable[[bytes], bool], *, idle_timeout: float,
                    deadline_s: float | None, expect_type: str | None = None) -> StreamResponse:
        """The transport's POST within `deadline_s` in all (None: the idle timer alone); past it, StreamStalled
        naming the deadline, and the connection is dropped."""
        try:
            async with asyncio.timeout(deadline_s):
                return await self._http.post(path, body, feed, idle_timeout=idle_timeout, expect_type=expect_type)
        except TimeoutError:
            raise StreamStalled(f"no whole answer from {self.url}{path} within {deadline_s:.0f}s (the request's "
                                "total deadline; the server sends, but too slowly to finish)") from None


def _first(values: list[float]) -> float | None:
    return values[0] if values else None
