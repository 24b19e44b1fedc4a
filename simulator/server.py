"""Running the simulated server on a real socket: in-process (`SimServer`, for tests) or as the CLI main.

Client disconnects cancel their handler (aiohttp `handler_cancellation`), which is how a vanished client
frees its engine slot even while it is still queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from types import TracebackType

from aiohttp import web

from simulator.app import STATE, SimState, build_app
from simulator.config import SimConfig

log = logging.getLogger("simulator")


class SimServer:
    """`async with SimServer(config) as srv:` serves on `srv.url` (port 0 picks a free port)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.app = build_app(config)
        access_log = logging.getLogger("aiohttp.access") if config.log_level == "debug" else None
        self._runner = web.AppRunner(self.app, handler_cancellation=True, shutdown_timeout=0.25,
                                     access_log=access_log)
        self.port = config.port

    @property
    def state(self) -> SimState:
        return self.app[STATE]

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port, backlog=4096)
        await site.start()
        server = site._server
        if server is not None and self.config.port == 0:
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()


async def serve_forever(config: SimConfig) -> None:
    """Serve until SIGTERM or SIGINT, then close connections quickly (streams are simply cut)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with SimServer(config) as srv:
        c = config
        log.info("simulated SGLang serving %s on %s (dp=%d, max_running=%d, speed=%g)",
                    c.model_name, srv.url, c.dp_size, c.max_running, c.speed)
        await stop.wait()
