"""A chat server that echoes the request's bearer token in what it generates, as a debug build, a
prompt-injected model or a careless proxy might: in the reasoning, in the answer and in a tool call's
arguments, streamed over several chunks (so the token is split across deltas) or in one chat.completion.

    python -m tests.servers.echokey [--log FILE] [--port 0]

Routes: GET /health, /v1/models (owned by "echokey", so the client treats it as a plain OpenAI-compatible
server), /v1/loads, /metrics and POST /v1/chat/completions. Every request is logged as one JSON line to
`--log` before it is answered. Prints `PORT <n>` as stdout line 1 once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from tests.servers import chatwire
from tests.servers.httpwire import (
    LAST_CHUNK,
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

OWNER = "echokey"
TOKENS = 12


def texts(token: str) -> dict[str, str]:
    """What the model 'generates' for a request carrying `token`."""
    return {"reasoning": f"The header says Bearer {token}, so I will repeat it.",
            "content": f"Your key is {token}.",
            "arguments": json.dumps({"key": token, "note": f"sent with {token}"})}


def _halves(text: str) -> list[str]:
    middle = len(text) // 2  # the token straddles the cut: the client must mask the joined text
    return [text[:middle], text[middle:]]


def stream_objects(model: str, token: str) -> list[dict[str, Any]]:
    said = texts(token)

    def obj(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": chatwire.CREATED,
                "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    out = [obj({"role": "assistant", "content": ""})]
    out += [obj({"reasoning_content": part}) for part in _halves(said["reasoning"])]
    out += [obj({"content": part}) for part in _halves(said["content"])]
    first, second = _halves(said["arguments"])
    out.append(obj({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                                    "function": {"name": "remember", "arguments": first}}]}))
    out.append(obj({"tool_calls": [{"index": 0, "function": {"arguments": second}}]}))
    out.append(obj({}, "tool_calls"))
    out.append({"id": "chatcmpl-echo", "object": "chat.completion.chunk", "created": chatwire.CREATED,
                "model": model, "choices": [], "usage": _usage()})
    return out


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 10, "completion_tokens": TOKENS, "total_tokens": 10 + TOKENS}


def completion(model: str, token: str) -> dict[str, Any]:
    said = texts(token)
    call = {"id": "call_0", "type": "function", "function": {"name": "remember", "arguments": said["arguments"]}}
    message = {"role": "assistant", "content": said["content"], "reasoning_content": said["reasoning"],
               "tool_calls": [call]}
    return {"id": "chatcmpl-echo", "object": "chat.completion", "created": chatwire.CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}], "usage": _usage()}


async def _json(writer: asyncio.StreamWriter, status: int, obj: Any, content_type: str = "application/json") -> None:
    body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    await send(writer, response_head(status, [("Content-Type", content_type),
                                              ("Content-Length", str(len(body)))]) + body)


class EchoKey:
    def __init__(self, args: argparse.Namespace) -> None:
        self.log = RequestLog(args.log)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            req = await read_head(reader)
            if req is None:
                return
            req.body = await read_body(reader, req.headers)
            self.log.write(request_record(req, server="echokey"))
            token = (req.header("authorization") or "").removeprefix("Bearer ")
            if req.method == "POST" and req.path == "/v1/chat/completions":
                body = req.json() if isinstance(req.json(), dict) else {}
                model = str(body.get("model") or chatwire.MODEL)
                if body.get("stream"):
                    events = b"".join(b"data: " + json.dumps(o).encode() + b"\n\n"
                                      for o in stream_objects(model, token)) + b"data: [DONE]\n\n"
                    head = response_head(200, [("Content-Type", "text/event-stream"),
                                               ("Transfer-Encoding", "chunked")])
                    await send(writer, head + chunk(events) + LAST_CHUNK)
                else:
                    await _json(writer, 200, completion(model, token))
            elif req.path == "/health":
                await _json(writer, 200, b"", "text/plain")
            elif req.path == "/v1/models":
                await _json(writer, 200, chatwire.models(chatwire.MODEL, OWNER, chatwire.MAX_MODEL_LEN))
            elif req.path == "/v1/loads":
                await _json(writer, 200, chatwire.loads(0))
            elif req.path == "/metrics":
                await _json(writer, 200, chatwire.metrics(0, 0), "text/plain; version=0.0.4")
            else:
                await _json(writer, 404, {"detail": "Not Found"})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.echokey", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_args(parser)
    args = parser.parse_args(argv)
    serve(EchoKey(args).handle, args)


if __name__ == "__main__":
    main()
