"""The simulated server's plain (non-streaming) HTTP answers: JSON bodies, SGLang's flat error body, the
refusals of simulator.request, and the OpenAI-style 404 of an unknown model under --strict-model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from simulator import wire
from simulator.request import Refusal


def json_response(obj: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status_code, content_type="application/json",
                        headers=headers)


def error(code: int, message: str, err_type: str, param: str | None = None) -> web.Response:
    return json_response(wire.error_body(message, err_type, code, param), code)


def refused(refusal: Refusal) -> web.Response:
    if refusal.text:  # FastAPI's own answer to an exception it did not expect
        return web.Response(text=refusal.message, status=refusal.status, content_type="text/plain")
    return error(refusal.status, refusal.message, refusal.err_type)


def model_not_found(model: str) -> web.Response:
    body = {"error": {"message": f"The model '{model}' does not exist", "type": "invalid_request_error",
                      "param": "model", "code": "model_not_found"}}
    return json_response(body, 404)
