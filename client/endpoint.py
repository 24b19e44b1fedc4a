"""One server: its HTTP pool (httpx API over an aiohttp transport), model list, health, and streaming.

httpx's default transport parses HTTP in pure Python (~90 us of client CPU per streamed chunk here); the
aiohttp-backed transport from httpx-aiohttp keeps the httpx API at ~10 us, which is what lets one client
process keep a B200 node busy. Stalls are caught by the transport's per-read timeout, so the hot loop
needs no timer of its own.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport

from client.errors import AttemptError, StreamDropped, error_for_status, map_transport_error
from client.records import Completion
from client.stats import EndpointCounters
from client.stream import StreamParser

CHAT_PATH = "/v1/chat/completions"


class Endpoint:
    """The client side of one inference server. Create inside a running event loop; `aclose()` at the end."""

    def __init__(
        self,
        url: str,
        counters: EndpointCounters,
        *,
        max_in_flight: int,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.counters = counters
        self.max_in_flight = max_in_flight
        counters.max_in_flight = max_in_flight
        self.supports_token_ids = False
        self._streams: set[asyncio.Task[Any]] = set()
        self._aborted: dict[asyncio.Task[Any], str] = {}
        headers = {"content-type": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_in_flight + 8, keepalive_timeout=60),
            auto_decompress=False,
        )
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            transport=AiohttpTransport(client=session),
            timeout=httpx.Timeout(connect=connect_timeout, read=idle_timeout, write=60.0, pool=None),
        )

    @property
    def index(self) -> int:
        return self.counters.index

    async def aclose(self) -> None:
        await self._client.aclose()

    async def get_bytes(self, path: str, limit_s: float = 5.0) -> bytes:
        """GET a document; AttemptError when the server cannot be reached or answers non-200."""
        try:
            response = await self._client.get(path, timeout=limit_s)
            body = await response.aread()
        except (httpx.HTTPError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise map_transport_error(exc, streaming=False) from exc
        if response.status_code != 200:
            raise error_for_status(response.status_code, body)
        return body

    async def get_json(self, path: str, limit_s: float = 5.0) -> Any:
        return orjson.loads(await self.get_bytes(path, limit_s))

    async def health(self, limit_s: float = 5.0) -> int | None:
        """The /health status code, or None when nothing answers."""
        try:
            response = await self._client.get("/health", timeout=limit_s)
            await response.aread()
        except (httpx.HTTPError, aiohttp.ClientError, OSError, TimeoutError):
            return None
        return response.status_code

    async def models(self) -> list[str]:
        """Served model ids. Also learns the engine: vLLM (`owned_by: vllm`) streams exact token ids."""
        document = await self.get_json("/v1/models")
        data = document.get("data") if isinstance(document, dict) else None
        entries = [entry for entry in data or [] if isinstance(entry, dict) and "id" in entry]
        self.supports_token_ids = any(entry.get("owned_by") == "vllm" for entry in entries)
        return [str(entry["id"]) for entry in entries]

    def abort_streams(self, reason: str) -> None:
        """End every stream in flight here; each attempt then fails with StreamDropped and is retried."""
        for task in self._streams:
            if task not in self._aborted:
                self._aborted[task] = reason
                task.cancel()

    async def stream_chat(self, body: bytes) -> tuple[Completion, float | None]:
        """POST one streaming chat completion; returns it whole with its time to first token.

        Raises an AttemptError subclass for every failure, so the retry policy sees one error tree.
        """
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            return await self._stream_chat(body)
        except asyncio.CancelledError:
            reason = self._aborted.pop(task, None)
            # Only our own abort becomes a retryable error; a shutdown's cancel still propagates.
            if reason is None or task.uncancel() > 0:
                raise
            raise StreamDropped(reason) from None
        finally:
            self._streams.discard(task)
            self._aborted.pop(task, None)

    async def _stream_chat(self, body: bytes) -> tuple[Completion, float | None]:
        parser = StreamParser()
        started = time.monotonic()
        ttft: float | None = None
        streaming = False
        reads = 0
        try:
            async with self._client.stream("POST", CHAT_PATH, content=body) as response:
                if response.status_code != 200:
                    detail = await response.aread()
                    raise error_for_status(response.status_code, detail, response.headers.get("retry-after"))
                streaming = True
                # The transport's byte stream itself: aiter_raw() would add httpx's re-chunking and a
                # context manager per chunk, a measurable share of the per-chunk budget at 1,000 streams.
                stream = response.stream
                assert isinstance(stream, httpx.AsyncByteStream)
                feed = parser.feed
                async for chunk in stream:
                    reads += 1
                    feed(chunk)
                    if ttft is None and parser.saw_output:
                        ttft = time.monotonic() - started
        except AttemptError:
            if parser.whole:
                return parser.completion(ended_cleanly=False), ttft
            raise
        except (httpx.HTTPError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            if parser.whole:
                return parser.completion(ended_cleanly=False), ttft
            raise map_transport_error(exc, streaming=streaming) from exc
        finally:
            self.counters.chunks += parser.events
            self.counters.reads += reads
        return parser.completion(ended_cleanly=True), ttft
