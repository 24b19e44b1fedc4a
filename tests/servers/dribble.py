"""A server that answers slowly or hugely, to hold the client's total deadlines and byte caps
(client.wire.bounds): one mode, one behaviour, on every POST.

    python -m tests.servers.dribble --mode MODE [--interval S] [--count N] [--mib M] [--log FILE] [--port 0]

Modes:
    tokenize     a `/v1/tokenize` answer (Content-Length), its JSON led by N spaces sent one byte every S
                 seconds: each byte restarts an idle timer, and the answer is whole only after N x S seconds
    slow_tokens  a chat stream of N content tokens, one every S seconds, then its finish, usage and [DONE]
    gzip_event   a gzip chat stream: one reasoning chunk, then one event M MiB long (decoded) that never
                 ends, sent as a few KiB of gzip, then the connection closes
    gzip_padding a gzip chat stream: one reasoning chunk, M MiB of SSE comment lines (each event small),
                 then its finish, usage and [DONE]

Prints `PORT <n>` as stdout line 1 once listening. Every loop is bounded by its N or M.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import zlib

from tests.servers.httpwire import (
    LAST_CHUNK,
    BadRequest,
    RequestLog,
    add_serve_args,
    chunk,
    read_body,
    read_head,
    request_record,
    response_head,
    send,
    serve,
)

MODES = ("tokenize", "slow_tokens", "gzip_event", "gzip_padding")
MODEL = "dribble-model"
MIB = 1 << 20


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    return _event({"id": "chatcmpl-dribble", "object": "chat.completion.chunk", "model": MODEL,
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _ending(tokens: int) -> bytes:
    usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5}
    return (_chunk({}, "stop") + _event({"id": "chatcmpl-dribble", "object": "chat.completion.chunk",
                                         "model": MODEL, "choices": [], "usage": usage}) + b"data: [DONE]\n\n")


class Dribble:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.interval: float = args.interval
        self.count: int = args.count
        self.size = int(args.mib * MIB)
        self.log = RequestLog(args.log)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            req = await read_head(reader)
            if req is None:
                return
            req.body = await read_body(reader, req.headers)
            self.log.write(request_record(req, server="dribble"))
            if req.method != "POST":
                raise BadRequest("only POST is served")
            try:
                await getattr(self, self.mode)(writer)
            except (ConnectionError, OSError):
                return  # the client left: what this server is for
            if self.mode == "gzip_event":
                return

    async def tokenize(self, writer: asyncio.StreamWriter) -> None:
        body = b" " * self.count + json.dumps({"tokens": [1, 2, 3], "count": 3, "max_model_len": 4096}).encode()
        await send(writer, response_head(200, [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))]))
        for i in range(self.count):
            await send(writer, body[i:i + 1])
            await asyncio.sleep(self.interval)
        await send(writer, body[self.count:])

    def _stream_head(self, gzipped: bool) -> bytes:
        headers = [("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked")]
        return response_head(200, [*headers, ("Content-Encoding", "gzip")] if gzipped else headers)

    async def slow_tokens(self, writer: asyncio.StreamWriter) -> None:
        await send(writer, self._stream_head(False) + chunk(_chunk({"role": "assistant", "content": ""})))
        for _ in range(self.count):
            await asyncio.sleep(self.interval)
            await send(writer, chunk(_chunk({"content": " word"})))
        await send(writer, chunk(_ending(self.count)) + LAST_CHUNK)

    async def _gzip_stream(self, writer: asyncio.StreamWriter, start: bytes, middle: bytes, ending: bytes) -> None:
        """A reasoning chunk, `start`, `middle` repeated up to the size, `ending`: compressed as it goes."""
        gz = zlib.compressobj(wbits=31)
        first = _chunk({"reasoning_content": "Thinking."}) + start
        await send(writer, self._stream_head(True) + chunk(gz.compress(first) + gz.flush(zlib.Z_SYNC_FLUSH)))
        for _ in range(self.size // len(middle)):
            data = gz.compress(middle)
            if data:
                await send(writer, chunk(data))
        tail = gz.compress(ending) + gz.flush()
        await send(writer, chunk(tail) + LAST_CHUNK)

    async def gzip_event(self, writer: asyncio.StreamWriter) -> None:
        # One event that opens and never closes: `data: {"pad": "xxxx...` without its blank line.
        await self._gzip_stream(writer, b'data: {"pad": "', b"x" * 65536, b"")
        writer.transport.abort()

    async def gzip_padding(self, writer: asyncio.StreamWriter) -> None:
        await self._gzip_stream(writer, b"", b": " + b"p" * 1021 + b"\n\n", _ending(1))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.dribble", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between bytes or tokens")
    parser.add_argument("--count", type=int, default=100, help="bytes (tokenize) or tokens (slow_tokens)")
    parser.add_argument("--mib", type=float, default=4.0, help="decoded MiB of the gzip modes")
    add_serve_args(parser)
    args = parser.parse_args(argv)
    serve(Dribble(args).handle, args)


if __name__ == "__main__":
    main()
