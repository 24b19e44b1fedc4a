"""Is a server ready to take requests, and if not, why: one probe shared by the start-up checks and the
dispatcher's watch of an endpoint that is out of rotation.

A server is ready when `/health` answers 200. Servers without a `/health` route (404 or 405: many
OpenAI-compatible servers and gateways) are ready when `/v1/models` answers. Any other status (SGLang
and vLLM answer 503 while loading) means "still starting"; a refused or failed connection means
unreachable, with the transport's own reason (certificate, proxy, DNS).

No answer from `/health` within the limit is not "unreachable" (SGLang's `/health` generates a token and
can be slow under load), but it is not waited on for ever either: `/v1/models` is asked next. When it
answers, the server is serving and only its health route hangs, so it is ready (with a note saying so);
when it does not answer either, the server accepted the connection and answers nothing, which counts as
unreachable (a wrong port, a stuck process): without this, a hung `/health` left the run "not ready" for
ever.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.core.errors import AttemptError, StreamStalled
from client.wire.endpoint import Endpoint

NO_HEALTH_ROUTE = (404, 405)
# /v1/models is cheap on every engine: a server that does not list its models within this long is mute.
MODELS_LIMIT_S = 10.0


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reachable: bool  # something answered, or accepted the connection and is slow
    reason: str = ""  # why it is not ready; empty when ready
    via_models: bool = False  # ready by /v1/models because /health is missing or hangs
    note: str = ""  # said once to the person running the job, e.g. why /v1/models stood in for /health


async def probe(endpoint: Endpoint, limit_s: float) -> Readiness:
    status = await endpoint.health(limit_s=limit_s)
    if status == 200:
        return Readiness(ready=True, reachable=True)
    if status in NO_HEALTH_ROUTE:
        try:
            await endpoint.model_catalog(limit_s, fresh=True)
        except AttemptError as exc:
            return Readiness(ready=False, reachable=True,
                             reason=f"/health answered {status} (no such route) and /v1/models failed: {exc}")
        return Readiness(ready=True, reachable=True, via_models=True,
                         note="no /health route; ready because /v1/models answers")
    if status is not None:
        return Readiness(ready=False, reachable=True, reason=f"/health answered {status} (still starting?)")
    error = endpoint.last_error
    if isinstance(error, StreamStalled):
        return await _models_instead(endpoint, limit_s)
    return Readiness(ready=False, reachable=False, reason=str(error) if error is not None else "no answer")


async def _models_instead(endpoint: Endpoint, health_limit_s: float) -> Readiness:
    """/health did not answer in time: is the server serving at all?"""
    hung = f"/health did not answer within {health_limit_s:.0f}s"
    try:
        await endpoint.model_catalog(MODELS_LIMIT_S, fresh=True)
    except StreamStalled:
        return Readiness(ready=False, reachable=False,
                         reason=f"it accepted the connection but answered nothing: {hung}, nor /v1/models within "
                                f"{MODELS_LIMIT_S:.0f}s")
    except AttemptError as exc:
        return Readiness(ready=False, reachable=True, reason=f"{hung} and /v1/models failed: {exc}")
    return Readiness(ready=True, reachable=True, via_models=True,
                     note=f"{hung}; ready because /v1/models answers (its health route hangs)")
