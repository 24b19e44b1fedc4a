"""Checks that must pass before the first request: the fleet answers, the model is served by it.

Each failure is a ConfigError whose message says what to change.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from client.core.errors import AttemptError, ConfigError
from client.fleet.readiness import MODELS_LIMIT_S, Readiness, probe
from client.wire.endpoint import Endpoint
from client.wire.urls import ServerURL


def parse_endpoints(spec: str) -> list[str]:
    """`URL[,URL...]` or `@FILE` (one URL per line; blank lines and `#` comments ignored)."""
    if spec.startswith("@"):
        path = Path(spec[1:])
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"--endpoints {spec}: cannot read {path}: {exc.strerror or exc}") from exc
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise ConfigError(f"--endpoints {spec}: {path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                              "write one URL per line") from None
        items = [line.split("#", 1)[0].strip() for line in lines]
        origin = str(path)
    else:
        items = [item.strip() for item in spec.split(",")]
        origin = "--endpoints"
    urls = [item for item in items if item]
    if not urls:
        raise ConfigError(f"{origin}: no endpoint URLs given")
    servers: dict[str, str] = {}
    duplicates: set[str] = set()
    for url in urls:
        try:
            server = ServerURL.parse(url)
        except ValueError as exc:  # the text carries no credentials
            if not spec.startswith("@") and "://" not in url and Path(url).is_file():
                # A file of URLs given without its `@` (e.g. runs/servers/endpoints.txt): say what was meant.
                raise ConfigError(f"{origin}: {url!r} is a file, not an http(s) URL: to read the endpoints from "
                                  f"it, write --endpoints @{url}") from None
            raise ConfigError(f"{origin}: {exc} (expected e.g. http://10.0.0.5:30000 or https://host/v1)") from None
        key = f"{server.origin}{server.root}"  # the same server with or without /v1 is one server
        if key in servers:
            duplicates.add(server.display)
        servers[key] = server.display
    if duplicates:
        raise ConfigError(f"{origin}: endpoint listed twice: {', '.join(sorted(duplicates))}")
    return urls


# A health check at start may take this long before it counts as "no answer" (SGLang's /health
# generates a token); --wait-ready extends it.
HEALTH_LIMIT_S = 30.0
# A probe still open after this long gets a line saying what is waited for, instead of silence.
SAY_WAITING_AFTER_S = 3.0


async def _probe_all(endpoints: Sequence[Endpoint], limit_s: float, note: Callable[[str], None],
                     say_after_s: float) -> list[Readiness]:
    """One probe of every endpoint; those that take long are named while they are waited for."""
    tasks = [asyncio.ensure_future(probe(e, limit_s)) for e in endpoints]
    try:
        await asyncio.wait(tasks, timeout=say_after_s)
        slow = [e.url for e, task in zip(endpoints, tasks, strict=True) if not task.done()]
        if slow:
            note(f"waiting up to {limit_s:.0f}s for /health (then up to {MODELS_LIMIT_S:.0f}s for /v1/models) on "
                 f"{len(slow)} endpoint(s) that have not answered yet: {', '.join(slow)}")
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


async def check_reachable(endpoints: Sequence[Endpoint], wait_s: float,
                          note: Callable[[str], None] = lambda _: None, *,
                          health_limit_s: float = HEALTH_LIMIT_S,
                          say_waiting_after_s: float = SAY_WAITING_AFTER_S) -> list[Readiness]:
    """Every endpoint must be reachable; those not ready yet (still loading, slow) join later.

    An endpoint nothing answers on (refused, or accepted and mute on both /health and /v1/models) is
    usually a wrong host or port, so it stops the run unless `wait_s` gives a fleet still loading its
    weights time to open its ports. Returns what each endpoint's probe found (by position), which the
    dispatcher takes as its starting health. Each probe is bounded (`health_limit_s`, or what is left
    of `wait_s`, plus client.fleet.readiness.MODELS_LIMIT_S), and one still open after
    `say_waiting_after_s` is named in a line.
    """
    deadline = time.monotonic() + wait_s
    waiting = False
    while True:
        limit_s = max(health_limit_s, deadline - time.monotonic())
        found = await _probe_all(endpoints, limit_s, note, say_waiting_after_s)
        for endpoint, readiness in zip(endpoints, found, strict=True):
            if readiness.note:
                note(f"{endpoint.url}: {readiness.note}")
        silent = [f"{e.url} ({r.reason})" for e, r in zip(endpoints, found, strict=True) if not r.reachable]
        if not silent:
            return found
        for endpoint in endpoints:  # an untrusted certificate or a failing proxy is not "still loading"
            if isinstance(endpoint.last_error, ConfigError):
                raise ConfigError(f"{endpoint.url}: {endpoint.last_error}") from endpoint.last_error
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"cannot reach {len(silent)} of {len(endpoints)} endpoint(s): {'; '.join(silent)}. "
                "Check the host and port; if the servers are still loading, pass --wait-ready SECONDS."
            )
        if not waiting:
            waiting = True
            note(f"waiting up to {wait_s:.0f}s (--wait-ready) for {len(silent)} endpoint(s) nothing answers on "
                 f"yet: {'; '.join(silent)}")
        await asyncio.sleep(2.0)


async def resolve_model(endpoints: Sequence[Endpoint], requested: str | None, wait_s: float,
                        note: Callable[[str], None] = lambda _: None) -> str:
    """The model to request: `requested` if every answering endpoint serves it, else the fleet's one model.
    Until one endpoint lists its models, they are asked again for up to `wait_s`, said in one line."""
    served = await _model_lists(endpoints, wait_s, note)
    first_listed = next((names[0] for names in served.values() if names), None)
    model = requested or first_listed
    if model is None:
        raise ConfigError("the endpoints list no models at /v1/models; pass --model NAME")
    missing = {url: names for url, names in served.items() if model not in names}
    if len(missing) == len(served):
        offered = sorted({name for names in served.values() for name in names})
        raise ConfigError(f"no server serves model {model!r}; they serve: {', '.join(offered) or 'nothing'}. "
                          "Pass one of those with --model.")
    if missing:
        detail = "; ".join(f"{url} serves {', '.join(names) or 'nothing'}" for url, names in missing.items())
        raise ConfigError(f"not every endpoint serves {model!r} ({detail}). A run must come from one model: "
                          "fix the fleet or drop those endpoints.")
    return model


async def _model_lists(endpoints: Sequence[Endpoint], wait_s: float,
                       note: Callable[[str], None]) -> dict[str, list[str]]:
    """Each answering endpoint's /v1/models ids, by URL; asked again for up to `wait_s` until one answers."""
    deadline = time.monotonic() + wait_s
    served: dict[str, list[str]] = {}
    said = False
    while True:
        for endpoint in endpoints:
            if endpoint.url in served:
                continue
            try:
                served[endpoint.url] = (await endpoint.model_catalog()).ids
            except AttemptError:
                continue  # still starting; it is checked when it answers
        if served:
            return served
        if time.monotonic() >= deadline:
            raise ConfigError("no endpoint answered /v1/models; are these inference servers? "
                              "Pass --wait-ready SECONDS if they are still starting.")
        if not said:
            said = True
            note(f"waiting up to {wait_s:.0f}s for /v1/models to answer on {', '.join(e.url for e in endpoints)}")
        await asyncio.sleep(2.0)


async def check_max_tokens(endpoints: Sequence[Endpoint], model: str, max_tokens: int) -> None:
    """`--max-tokens` must leave room for a prompt in the model's context on every endpoint.

    vLLM answers HTTP 400 to every request whose max_tokens exceeds the context ("max_tokens=8192 cannot
    be greater than max_model_len=2048"), and SGLang to every one whose prompt plus max_tokens does: such
    a run would send every prompt once just to write it to the failures file. Both engines list the
    context as `max_model_len` in /v1/models (read from the list resolve_model fetched); an endpoint that
    does not, or does not answer, is not checked.
    """
    for endpoint in endpoints:
        try:
            served = (await endpoint.model_catalog()).get(model)
        except AttemptError:
            continue
        context = served.max_model_len if served is not None else None
        if context is not None and max_tokens >= context:
            raise ConfigError(
                f"--max-tokens {max_tokens} does not fit the context of {model} on {endpoint.url} "
                f"(max_model_len {context}): every request would be refused. Pass a --max-tokens well "
                f"below {context}, leaving room for the prompt.")
