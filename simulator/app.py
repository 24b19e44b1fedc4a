"""HTTP routes of the simulated server (aiohttp): chat completions, health, load and metrics views.

A chat request is read and checked as SGLang reads it (simulator.request), its prompt counted (with
`--tokenizer`, rendered and tokenized as SGLang does: prompts.sglang_input, simulator.tokens), then generated
by the capacity model and written in SGLang 0.5.23's wire shapes (simulator.wire). Like SGLang, a stream's
HTTP headers go out only with its first generated token, so time in the queue shows up as time to first
byte. Token ids, MTP and prefix-cache figures come in `sglext` as `serving_chat.py` places them: at the
response's top level without streaming, in a chunk of their own after the finish chunk when streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from prompts.sglang_input import TemplateInputError
from simulator import generate, parsers, qwen36, status, tokenize, wire
from simulator.config import STOP_TOKEN_ID, SimConfig
from simulator.engine import Engine, EngineRequest
from simulator.faults import Fault, FaultInjector, FaultKind
from simulator.replies import error, json_response, model_not_found, refused
from simulator.request import ChatRequest, Refusal, bad, check_lengths, parse
from simulator.script import ReplyCursor, Script, build_script
from simulator.tally import Tally
from simulator.tokens import CompletionIds, SimTokenizer, cached_tokens, spec_details


class SimState:
    """What the handlers share: settings, the engine, the fault draws and the start time."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.engine = Engine(config)
        self.faults = FaultInjector(config.faults, config.effective_fault_seed)
        self.tokenizer = SimTokenizer(Path(config.tokenizer)) if config.tokenizer else None
        # /generate (simulator.generate): the replies given, so a continuation goes on as the reply did.
        self.book = generate.ReplyBook()
        self.prompts = generate.PromptBook()  # chat prompts rendered by /v1/tokenize, for /generate
        self.markov = (generate.Markov(self.tokenizer, config.seed, config.mean_tokens)
                       if self.tokenizer is not None else None)
        self.started = time.monotonic()

    @property
    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.config.startup_delay


STATE = web.AppKey("sim_state", SimState)


class _Prepared:
    """A request checked and planned: its script, the cut, and the ids when there is a tokenizer."""

    def __init__(self, st: SimState, req: ChatRequest) -> None:
        cfg = self.cfg = st.config
        self.req = req
        self.prompt_ids = st.tokenizer.prompt_ids(req.body) if st.tokenizer is not None else None
        script = build_script(req.body, req.thinking, cfg)
        if self.prompt_ids is not None:
            script = dataclasses.replace(script, prompt_tokens=len(self.prompt_ids))
        check_lengths(script.prompt_tokens, req.max_tokens, cfg.context_length)
        self.script = script
        # Without max_tokens SGLang lets a reply run to the end of the context.
        cap = req.max_tokens if req.max_tokens is not None else cfg.context_length - script.prompt_tokens
        self.target, self.finish = script.cut(cap)
        # The whole reply's text, for the non-streaming message and the ids; a plain stream makes it as it goes.
        self.message: dict[str, Any] = {}
        if st.tokenizer is not None or not req.stream:
            self.message = self._message(self.target)
        self.output_ids: list[int] | None = None
        reasoning = script.reasoning_in(self.target)
        completion = self.target
        if st.tokenizer is not None:
            ids = self._ids(st.tokenizer, self.target, self.script, self.finish)
            if len(ids.ids) > cap:
                ids = self._fit(st.tokenizer, cap)
            self.output_ids, completion, reasoning = ids.ids, len(ids.ids), ids.reasoning_tokens
        if not self.target and req.thinking:
            # At max_tokens 0 SGLang still counts the one token its prefill sampled (and dropped) as reasoning.
            reasoning = 1
        self.tally = Tally(script.prompt_tokens, completion, reasoning, self.target)
        stop_id = st.tokenizer.eos_id if st.tokenizer is not None else STOP_TOKEN_ID
        self.stop_id = stop_id if self.finish in ("stop", "tool_calls") else None

    def _message(self, upto: int, script: Script | None = None) -> dict[str, Any]:
        script = script or self.script
        return wire.message(ReplyCursor(script).advance(upto), script, self.cfg.reasoning_field,
                            strip_before_calls=self.cfg.tool_call_parser == "qwen")

    def _ids(self, tokenizer: SimTokenizer, upto: int, script: Script, finish: str) -> CompletionIds:
        """The reply's ids: Qwen3.6's, the tokens of the text it wrote; else the reply's message rendered."""
        if script.style == "qwen3.6":
            return tokenizer.text_ids(qwen36.raw_text(script, upto), self.req.thinking, finish != "length")
        return tokenizer.completion_ids(self.req.body, self.req.thinking, self._message(upto, script), finish)

    def _fit(self, tokenizer: SimTokenizer, cap: int) -> CompletionIds:
        """Cut the reply where the tokenizer's count reaches `cap`, as an engine stops at max_tokens.

        The script counts word pieces, and a word piece may be several of the tokenizer's tokens, so the
        reply the script cut at `cap` pieces can tokenize to more than `cap` tokens. Bisection finds the
        longest run of whole pieces whose ids fit (the count grows with the run), then the longest start
        of the next piece that still fits is kept too, so the count lands on `cap` but for a token that
        only the piece's next character would have completed. The reply ends there, finish_reason "length"."""
        def count(upto: int, script: Script) -> CompletionIds:
            return self._ids(tokenizer, upto, script, "length")

        fits, over = 0, self.target  # script positions known to fit, and known not to
        best = count(0, self.script)
        while over - fits > 1:
            mid = (fits + over) // 2
            ids = count(mid, self.script)
            if len(ids.ids) <= cap:
                fits, best = mid, ids
            else:
                over = mid
        cursor = ReplyCursor(self.script)
        cursor.advance(fits)
        partial = cursor.advance(fits + 1)
        self.finish, self.target = "length", fits
        # Qwen3.6: a call's header is one position, and the call is only there once `<function=NAME>` is
        # whole (the qwen3_coder detector's rule); a cut inside it would report a call the text does not
        # hold, so the reply ends before the header instead.
        header = bool(partial) and partial[-1].phase == "tool_start" and self.script.style == "qwen3.6"
        for chars in range(len(partial[-1].text) - 1 if partial and not header else 0, 0, -1):
            trimmed = dataclasses.replace(self.script, trim=(fits, chars))
            ids = count(fits + 1, trimmed)
            if len(ids.ids) <= cap:
                self.script, self.target, best = trimmed, fits + 1, ids
                break
        if not best.ids and cap > 0:
            # A first character of several tokens (a byte-level BPE splits a multi-byte one): an engine still
            # samples and sends its first tokens, and holds back the text until the character is whole.
            whole = count(fits + 1, self.script)
            best = CompletionIds(whole.ids[:cap], min(whole.reasoning_tokens, cap))
        self.message = self._message(self.target)
        return best

    def whole_reply(self, tokenizer: SimTokenizer | None) -> tuple[list[int], bool]:
        """The reply's ids as the model would write it whole, and whether it ends by itself: a cut reply is booked
        as its ids then those of the whole reply's text after the cut, so `/generate` continues it into the
        rest of its reasoning, content and calls (simulator.generate's docstring says how the ids may differ)."""
        assert self.output_ids is not None
        if self.finish != "length" or tokenizer is None or self.script.style != "qwen3.6":
            return self.output_ids, self.stop_id is not None
        whole_script = dataclasses.replace(self.script, trim=None)
        whole_target, whole_finish = whole_script.cut(None)
        cut_text = qwen36.raw_text(self.script, self.target)
        whole_text = qwen36.raw_text(whole_script, whole_target)
        stopped = whole_finish != "length"
        if not whole_text.startswith(cut_text):
            return self.output_ids, False  # the Markov rule continues it
        rest = tokenizer.text_ids(whole_text[len(cut_text):], self.req.thinking, stopped)
        return [*self.output_ids, *rest.ids], stopped

    def sglext(self) -> dict[str, Any]:
        """The `SglExt` fields asked for, in its field order."""
        ext: dict[str, Any] = {}
        if self.req.asks("return_cached_tokens_details"):
            cached = cached_tokens(self.script.text_seed, self.tally.prompt)
            ext["cached_tokens_details"] = {"device": cached, "host": 0}
        if self.req.asks("return_spec_tokens_details"):
            ext["spec_tokens_details"] = spec_details(self.script.text_seed, self.tally.completion)
        if self.req.input_ids and self.prompt_ids is not None:
            ext["input_ids"] = self.prompt_ids
        if self.req.output_ids and self.output_ids is not None:
            ext["output_ids"] = [self.output_ids]
        return ext


async def chat_completions(request: web.Request) -> web.StreamResponse:
    st = request.app[STATE]
    if not st.ready:
        return error(503, "The server is still starting up.", "ServiceUnavailable")
    try:
        req = parse(await request.read(), request.headers, st.config)
        if st.config.strict_model and req.model not in (st.config.model_name, "default"):
            return model_not_found(req.model)
        try:
            plan = _Prepared(st, req)
        except TemplateInputError as exc:
            raise bad(str(exc), "BadRequest") from exc
    except Refusal as refusal:
        return refused(refusal)

    fault = st.faults.draw()
    if fault.kind is FaultKind.FAIL_500:
        return error(500, "Internal server error: simulated failure", "InternalServerError")
    if fault.kind is FaultKind.FAIL_429:
        retry = str(st.config.faults.retry_after)
        return json_response(wire.error_body("Too many requests: simulated overload", "TooManyRequests", 429), 429,
                     headers={"Retry-After": retry})

    if plan.prompt_ids is not None and plan.output_ids is not None:
        st.book.add(plan.prompt_ids, *plan.whole_reply(st.tokenizer))
    ereq = st.engine.submit(plan.tally.tokens, plan.script.prompt_tokens)
    call = _Call(request, st.config, plan, fault, ereq)
    try:
        return await (call.stream() if req.stream else call.complete())
    finally:
        st.engine.release(ereq)


class _Call:
    """One chat request in flight: walks the engine's progress and writes the reply."""

    def __init__(self, request: web.Request, config: SimConfig, plan: _Prepared, fault: Fault,
                 ereq: EngineRequest) -> None:
        self.request = request
        self.config = config
        self.plan = plan
        self.script: Script = plan.script
        self.target = plan.target
        self.fault = fault
        self.ereq = ereq
        self.rid = uuid.uuid4().hex
        self.created = int(time.time())
        self.cursor = ReplyCursor(plan.script)
        self.tokens = plan.tally.tokens if self.target else 0  # what the engine paces, in tokens sent
        # An empty reply (max_tokens 0) has no stream to break; the strike counts tokens sent.
        self.strike = fault.trigger_token(self.tokens) if fault.kind.mid_stream and self.target else None

    def _abort_connection(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()

    async def _open(self) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache"})
        await resp.prepare(self.request)
        return resp

    async def stream(self) -> web.StreamResponse:
        cfg, req, tally = self.config, self.plan.req, self.plan.tally
        writer = wire.ChunkWriter(self.rid, self.created, req.model, cfg.reasoning_field, cfg.omit_nulls,
                                  tool_parsing=req.tool_parsing,
                                  drops_text_beside_call=cfg.tool_call_parser == "qwen")
        resp: web.StreamResponse | None = None
        sent = 0
        try:
            if self.target == 0:
                resp = await self._open()
                await resp.write(writer.role())
            while sent < self.tokens:
                made = min(await self.ereq.wait_beyond(sent), self.tokens)
                if self.strike is not None and made >= self.strike:
                    made = max(sent, self.strike)
                running = tally.at(made) if req.continuous_usage else None
                out = writer.pieces(self.cursor.advance(tally.position(made)), self.script, running)
                sent = made
                if resp is None:
                    resp = await self._open()
                    out.insert(0, writer.role())
                if self.strike is not None and sent >= self.strike:
                    await resp.write(b"".join(out))
                    if await self._strike_stream(resp):
                        return resp
                    continue
                await resp.write(b"".join(out))
            assert resp is not None  # opened before the loop or in its first pass
            tail = [writer.finish(self.plan.finish, self.plan.stop_id)]
            ext = self.plan.sglext()
            if ext:
                tail.append(writer.sglext(ext, req.ids_framed))
            if req.include_usage:
                tail.append(writer.usage(tally.final))
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
                return error(500, "Simulated engine failure.", "InternalServerError")
            await asyncio.sleep(self.config.faults.stall_seconds)
        if self.target:
            await self.ereq.wait_finished()
        plan = self.plan
        matched = None if plan.finish == "tool_calls" else plan.stop_id
        body = wire.completion(self.rid, self.created, plan.req.model, plan.message, plan.finish, matched,
                               plan.tally.final)
        choice, ask = body["choices"][0], plan.req.asks
        if plan.prompt_ids is not None and (ask("return_token_ids") or ask("return_prompt_token_ids")):
            choice["prompt_token_ids"] = plan.prompt_ids
        if plan.output_ids is not None and ask("return_token_ids"):
            choice["response_token_ids"] = plan.output_ids
        ext = plan.sglext()
        if ext:
            body["sglext"] = ext
        return json_response(body)


async def native_generate(request: web.Request) -> web.StreamResponse:
    st = request.app[STATE]
    if not st.ready:
        return error(503, "The server is still starting up.", "ServiceUnavailable")
    fault = st.faults.draw()
    if fault.kind is FaultKind.FAIL_500:
        return error(500, "Internal server error: simulated failure", "InternalServerError")
    if fault.kind is FaultKind.FAIL_429:
        return json_response(wire.error_body("Too many requests: simulated overload", "TooManyRequests", 429), 429,
                             headers={"Retry-After": str(st.config.faults.retry_after)})
    return await generate.serve(request, st.tokenizer, st.engine, st.book, st.markov, st.config.seed, fault,
                                prepare=lambda ids: _book_rendered(st, ids),
                                incremental=st.config.incremental_streaming_output)


def _book_rendered(st: SimState, input_ids: list[int]) -> None:
    """A `/generate` of a chat prompt this server rendered (and maybe the start of its reply): the reply a chat
    completion of that prompt gets is booked, unless the book already holds it."""
    found = st.prompts.find(input_ids) if st.book.rest(input_ids) is None else None
    if found is None:
        return
    prompt_ids, body = found
    raw = orjson.dumps({**body, "model": st.config.model_name, "stream": False})
    with contextlib.suppress(Refusal, TemplateInputError):
        plan = _Prepared(st, parse(raw, {"content-type": "application/json"}, st.config))
        if plan.output_ids is not None and plan.prompt_ids == prompt_ids:
            st.book.add(prompt_ids, *plan.whole_reply(st.tokenizer))


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[STATE].ready else 503)


async def list_models(request: web.Request) -> web.Response:
    return json_response(status.models(request.app[STATE].config))


async def retrieve_model(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    name = request.match_info["model"]
    return json_response(status.model_card(cfg)) if name == cfg.model_name else model_not_found(name)


async def v1_loads(request: web.Request) -> web.Response:
    raw = request.query.get("dp_rank")
    try:
        dp_rank = int(raw) if raw is not None else None
    except ValueError:
        return error(400, f"invalid dp_rank: {raw}", "BadRequestError")
    return json_response(status.loads(request.app[STATE].engine, dp_rank))


async def get_load(request: web.Request) -> web.Response:
    return json_response(status.legacy_load(request.app[STATE].engine))


async def metrics(request: web.Request) -> web.Response:
    text = status.metrics(request.app[STATE].engine)
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"X-Prometheus-Format": "0.0.4"})


async def sim_clock(request: web.Request) -> web.Response:
    return json_response(status.clock(request.app[STATE].engine))


async def server_info(request: web.Request) -> web.Response:
    return json_response(status.server_info(request.app[STATE].engine))


async def model_info(request: web.Request) -> web.Response:
    cfg = request.app[STATE].config
    return json_response({"model_path": cfg.model_name, "tokenizer_path": cfg.model_name, "is_generation": True})


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
    r.add_post("/generate", native_generate)
    for path in tokenize.PATHS:
        r.add_post(path, tokenize.handler(app[STATE]))
    for path, handler in parsers.routes(lambda req: req.app[STATE].tokenizer,
                                        lambda req: req.app[STATE].config.tool_call_parser):
        r.add_post(path, handler)
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
    r.add_get("/sim/clock", sim_clock)
    return app
