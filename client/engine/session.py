"""`open_fleet`: the one way a tool gets a checked fleet (`client.run`, and `client.estimate`'s calibration).

In order: the endpoints (one per URL), reachability (`--wait-ready`), the model, `--max-tokens` against
each server's context, the server kinds, the field policy and each server's token-id fields, the
caller's check of the settled request shape (the run's settings gate), and the preflight request. What
it yields is settled: the endpoints, their dispatcher and the RequestShape every request is built from.
The endpoints are closed when the context ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from client.core.payload import RequestShape, SamplingSettings
from client.core.sampling_plan import SamplingPlan
from client.engine.fields import settle_fields
from client.fleet.dispatcher import Dispatcher, DispatchSettings, Health
from client.fleet.native_check import check_native
from client.fleet.options import FleetConfig
from client.fleet.startup import check_max_tokens, check_reachable, resolve_model
from client.wire.endpoint import Endpoint
from client.wire.native import Parsers

# At start, how long to wait for a model list from endpoints that answer but are still loading.
_MODEL_WAIT_S = 60.0


@dataclass(frozen=True, slots=True)
class Fleet:
    endpoints: list[Endpoint]
    dispatcher: Dispatcher
    shape: RequestShape
    native: Parsers | None = None  # --continue-replies: the servers' parsers (client.fleet.native_check)

    @property
    def model(self) -> str:
        return self.shape.model


def _say_nothing(_: str) -> None:
    return None


@contextlib.asynccontextmanager
async def open_fleet(
    cfg: FleetConfig,
    settings: SamplingSettings,
    *,
    prompt_paths: Sequence[Path],
    note: Callable[[str], None] = _say_nothing,
    check_shape: Callable[[RequestShape], Awaitable[None]] | None = None,
    train_window: int | None = None,
    counts_locally: bool = False,
    plan: SamplingPlan | None = None,
) -> AsyncIterator[Fleet]:
    """ConfigError (exit 2) for anything that makes the fleet unusable, before any prompt is sent."""
    endpoints: list[Endpoint] = []
    try:
        for index, url in enumerate(cfg.urls):
            endpoints.append(Endpoint(url, index=index, max_in_flight=cfg.max_in_flight, idle_timeout=cfg.idle_timeout,
                                      api_key=cfg.api_key, network=cfg.network))
        dispatcher = Dispatcher(endpoints, DispatchSettings(failure_threshold=cfg.circuit_failures,
                                                            default_capacity=cfg.slots))
        found = await check_reachable(endpoints, cfg.wait_ready, note=note)
        for endpoint, readiness in zip(endpoints, found, strict=True):
            dispatcher.starting(endpoint, readiness.ready, readiness.reason)
        answering = [e for e in endpoints if dispatcher.health(e) is Health.UP]
        model = await resolve_model(endpoints, cfg.model, max(cfg.wait_ready, _MODEL_WAIT_S), note=note)
        await check_max_tokens(endpoints, model, max(s.values.max_tokens for s in plan.settings) if plan
                               else settings.max_tokens)

        shape = await settle_fields(endpoints, answering, settings, model=model, compat=cfg.compat,
                                    prompt_paths=prompt_paths, before_preflight=check_shape,
                                    token_ids=cfg.token_ids, note=note, train_window=train_window,
                                    counts_locally=counts_locally, plan=plan)
        native = await check_native(endpoints, shape) if cfg.continue_replies else None
        for endpoint in endpoints:
            endpoint.count_from_here()  # the preflight's one-token replies are not the run's work
        yield Fleet(endpoints, dispatcher, shape, native)
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints), return_exceptions=True)
