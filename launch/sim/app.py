"""HTTP routes of the simulated server (aiohttp): chat completions, health, load and metrics views.

Validation and error bodies follow SGLang's OpenAI layer (`serving_chat.py`, `serving_base.py`): errors
are flat `ErrorResponse` objects with HTTP 400 for bad requests. Like SGLang, a stream's HTTP headers go
out only with its first generated token, so time in the queue shows up as time to first byte. With
`stream_options.continuous_usage_stats`, every chunk carries the running usage, as SGLang's
`_generate_stream_content` attaches `UsageProcessor.calculate_token_usage(...)` to each chunk.
A non-streaming reply carries token ids, MTP and cache details as asked, in the shapes of SGLang
0.5.23's `protocol.py` and `serving_chat.py` (launch.sim.tokens cites them field by field).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from launch.sim import status, wire
from launch.sim.config import CONTEXT_LENGTH, SimConfig
from launch.sim.engine import Engine, EngineRequest
from launch.sim.faults import Fault, FaultInjector, FaultKind
from launch.sim.script import ReplyCursor, Script, build_script
from launch.sim.tokens import SimTokenizer, cached_tokens, spec_details


class SimState:
    """What the handlers share: settings, the engine, the fault draws and the start time."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.engine = Engine(config)
        self.faults = FaultInjector(config.faults, config.effective_fault_seed)
        self.tokenizer = SimTokenizer(Path(config.tokenizer)) if config.tokenizer else None
        self.started = time.monotonic()

    @property
    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.config.startup_delay


STATE = web.AppKey("sim_state", SimState)


def _json(obj: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status_code, content_type="application/json",
                        headers=headers)


def _error(code: int, message: str, err_type: str, param: str | None = None) -> web.Response:
    return _json(wire.error_body(message, err_type, code, param), code)


def _model_not_found(model: str) -> web.Response:
    body = {"error": {"message": f"The model '{model}' does not exist", "type": "invalid_request_error",
                      "param": "model", "code": "model_not_found"}}
    return _json(body, 404)


def _max_tokens(body: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """(the request's output cap, or an error message)."""
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int):
        return None, "max_tokens must be an integer"
    if value <= 0:
        return None, "max_tokens must be positive"
    if value > CONTEXT_LENGTH:
        return None, (f"max_completion_tokens is too large: {value}."
                      f"This model supports at most {CONTEXT_LENGTH} completion tokens.")
    return value, None


def _thinking(body: Mapping[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and "enable_thinking" in kwargs:
        return bool(kwargs["enable_thinking"])
    return True


def _validate(body: Mapping[str, Any], config: SimConfig) -> web.Response | None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return _error(400, "Messages cannot be empty.", "BadRequestError")
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list)
        and all(isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
                and isinstance(t["function"].get("name"), str) for t in tools)
    ):
        return _error(400, "Each tool needs a function with a name.", "BadRequestError")
    choice = body.get("tool_choice")
    if choice == "required" and not tools:
        return _error(400, "Tools cannot be empty if tool choice is set to required.", "BadRequestError")
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not tools:
            return _error(400, "Tools cannot be empty if tool choice is set to a specific tool.",
                          "BadRequestError")
        if not any(t["function"]["name"] == name for t in tools):
            return _error(400, f"Tool '{name}' not found in tools list.", "BadRequestError")
    model = body.get("model", "default")
    if config.strict_model and model not in (config.model_name, "default"):
        return _model_not_found(str(model))
    _, problem = _max_tokens(body)
    if problem:
        return _error(400, problem, "BadRequestError")
    if body.get("stream"):
        if body.get("return_prompt_token_ids"):
            return _error(400, "return_prompt_token_ids is not supported with streaming. Please set "
                          "stream=false when using return_prompt_token_ids=true.", "BadRequestError")
        if body.get("return_token_ids"):
            return _error(400, "return_token_ids is not supported with streaming on /v1/chat/completions. "
                          "Please set stream=false when using return_token_ids=true.", "BadRequestError")
    return None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    st = request.app[STATE]
    if not st.ready:
        return _error(503, "The server is still starting up.", "ServiceUnavailable")
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return _error(400, f"Invalid JSON body: {exc}", "BadRequestError")
    if not isinstance(body, dict):
        return _error(400, "The request body must be a JSON object.", "BadRequestError")
    invalid = _validate(body, st.config)
    if invalid is not None:
        return invalid

    fault = st.faults.draw()
    if fault.kind is FaultKind.FAIL_500:
        return _error(500, "Internal server error: simulated failure", "InternalServerError")
    if fault.kind is FaultKind.FAIL_429:
        retry = str(st.config.faults.retry_after)
        return _json(wire.error_body("Too many requests: simulated overload", "TooManyRequests", 429), 429,
                     headers={"Retry-After": retry})

    script = build_script(body, _thinking(body), st.config)
    target, finish = script.cut(_max_tokens(body)[0])
    ereq = st.engine.submit(target, script.prompt_tokens)
    call = _Call(request, st.config, body, script, target, finish, fault, ereq, st.tokenizer)
    try:
        return await (call.stream() if body.get("stream") else call.complete())
    finally:
        st.engine.release(ereq)


class _Call:
    """One chat request in flight: walks the engine's progress and writes the reply."""

    def __init__(self, request: web.Request, config: SimConfig, body: Mapping[str, Any], script: Script,
                 target: int, finish: str, fault: Fault, ereq: EngineRequest,
                 tokenizer: SimTokenizer | None = None) -> None:
        self.request = request
        self.tokenizer = tokenizer
        self.config = config
        self.body = body
        self.script = script
        self.target = target
        self.finish = finish
        self.fault = fault
        self.ereq = ereq
        self.rid = uuid.uuid4().hex
        self.created = int(time.time())
        model = body.get("model")
        self.model = model if isinstance(model, str) else "default"
        self.cursor = ReplyCursor(script)
        self.strike = fault.trigger_token(target) if fault.kind.mid_stream else None

    def _abort_connection(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    async def stream(self) -> web.StreamResponse:
        cfg = self.config
        opts = self.body.get("stream_options")
        include_usage = isinstance(opts, Mapping) and bool(opts.get("include_usage"))
        continuous = isinstance(opts, Mapping) and bool(opts.get("continuous_usage_stats"))
        writer = wire.ChunkWriter(self.rid, self.created, self.model, cfg.reasoning_field, cfg.omit_nulls)
        resp: web.StreamResponse | None = None
        sent = 0
        try:
            while sent < self.target:
                upto = min(await self.ereq.wait_beyond(sent), self.target)
                if self.strike is not None and upto >= self.strike:
                    upto = max(sent, self.strike)
                running = wire.usage(self.script, upto) if continuous else None
                out = writer.pieces(self.cursor.advance(upto), self.script, running)
                sent = upto
                if resp is None:
                    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache"})
                    await resp.prepare(self.request)
                    out.insert(0, writer.role())
                if self.strike is not None and sent >= self.strike:
                    await resp.write(b"".join(out))
                    if await self._strike_stream(resp):
                        return resp
                    continue
                await resp.write(b"".join(out))
            assert resp is not None  # target >= 1, so the loop ran
            tail = [writer.finish(self.finish, wire.usage(self.script, self.target) if continuous else None)]
            if include_usage:
                tail.append(writer.usage(self.script, self.target))
            if not cfg.omit_done:
                tail.append(wire.DONE)
            await resp.write(b"".join(tail))
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client left; the caller frees the engine slot
        return resp if resp is not None else web.Response(status=499)

    async def _strike_stream(self, resp: web.StreamResponse) -> bool:
        """Apply the mid-stream fault; True when the response is over."""
        kind = self.fault.kind
        self.strike = None
        if kind is FaultKind.DROP_STREAM:
            self._abort_connection()
            return True
        if kind is FaultKind.ERROR_EVENT:
            event = wire.stream_error_event("Simulated engine failure mid-stream.", "InternalServerError", 500)
            await resp.write(event if self.config.omit_done else event + wire.DONE)
            await resp.write_eof()
            return True
        # A stall keeps the connection open and silent; if the client outlasts it, the reply goes on.
        await asyncio.sleep(self.config.faults.stall_seconds)
        return False

    async def complete(self) -> web.StreamResponse:
        if self.strike is not None:
            while self.ereq.produced < self.strike and not self.ereq.finished:
                await self.ereq.wait_beyond(self.ereq.produced)
            if self.fault.kind is FaultKind.DROP_STREAM:
                self._abort_connection()
                return web.Response(status=499)
            if self.fault.kind is FaultKind.ERROR_EVENT:
                return _error(500, "Simulated engine failure.", "InternalServerError")
            await asyncio.sleep(self.config.faults.stall_seconds)
        await self.ereq.wait_finished()
        pieces = self.cursor.advance(self.target)
        body = wire.completion(self.rid, self.created, self.model, self.script, self.target, self.finish,
                               pieces, self.config.reasoning_field)
        self._extensions(body)
        return _json(body)

    def _extensions(self, body: dict[str, Any]) -> None:
        """Token ids (with a tokenizer), and SGLang's `sglext` details, as asked (launch.sim.tokens)."""
        choice, usage, ask = body["choices"][0], body["usage"], self.body.get
        if self.tokenizer is not None:
            ids = self.tokenizer.ids(dict(self.body), _thinking(self.body), choice["message"], self.finish)
            usage.update(prompt_tokens=len(ids.prompt), completion_tokens=len(ids.completion),
                         total_tokens=len(ids.prompt) + len(ids.completion), reasoning_tokens=ids.reasoning_tokens)
            usage["completion_tokens_details"] = {"reasoning_tokens": ids.reasoning_tokens}
            if ask("return_token_ids"):
                choice["token_ids"] = ids.completion
            if ask("return_token_ids") or ask("return_prompt_token_ids"):
                choice["prompt_token_ids"] = ids.prompt
        sglext: dict[str, Any] = {}
        if ask("return_cached_tokens_details"):
            cached = cached_tokens(self.script.text_seed, usage["prompt_tokens"])
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            sglext["cached_tokens_details"] = {"device": cached, "host": 0}
        if ask("return_spec_tokens_details"):
            sglext["spec_tokens_details"] = spec_details(self.script.text_seed, usage["completion_tokens"])
        if sglext:
            body["sglext"] = sglext


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[STATE].ready else 503)


async def list_models(request: web.Request) -> web.Response:
    return _json(status.models(request.app[STATE].config))


async def retrieve_model(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    name = request.match_info["model"]
    return _json(status.model_card(cfg)) if name == cfg.model_name else _model_not_found(name)


async def v1_loads(request: web.Request) -> web.Response:
    raw = request.query.get("dp_rank")
    try:
        dp_rank = int(raw) if raw is not None else None
    except ValueError:
        return _error(400, f"invalid dp_rank: {raw}", "BadRequestError")
    return _json(status.loads(request.app[STATE].engine, dp_rank))


async def get_load(request: web.Request) -> web.Response:
    return _json(status.legacy_load(request.app[STATE].engine))


async def metrics(request: web.Request) -> web.Response:
    text = status.metrics(request.app[STATE].engine)
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Prometheus-Format": "0.0.4"})


async def server_info(request: web.Request) -> web.Response:
    return _json(status.server_info(request.app[STATE].engine))


async def model_info(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    return _json({"model_path": cfg.model_name, "tokenizer_path": cfg.model_name, "is_generation": True})


async def _start_engine(app: web.Application) -> None:
    app[STATE].started = time.monotonic()
    app[STATE].engine.start()


async def _stop_engine(app: web.Application) -> None:
    with contextlib.suppress(Exception):
        await app[STATE].engine.stop()


def build_app(config: SimConfig) -> web.Application:
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app[STATE] = SimState(config)
    app.on_startup.append(_start_engine)
    app.on_cleanup.append(_stop_engine)
    r = app.router
    r.add_post("/v1/chat/completions", chat_completions)
    r.add_get("/health", health)
    r.add_get("/health_generate", health)
    r.add_get("/v1/models", list_models)
    r.add_get("/v1/models/{model:.+}", retrieve_model)
    r.add_get("/v1/loads", v1_loads)
    r.add_get("/get_load", get_load)
    r.add_get("/metrics", metrics)
    r.add_get("/server_info", server_info)
    r.add_get("/get_server_info", server_info)
    r.add_get("/get_model_info", model_info)
    return app
