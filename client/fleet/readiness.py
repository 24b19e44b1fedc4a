"""Is a server ready to take requests, and if not, why: one probe shared by the start-up checks and the
dispatcher's watch of an endpoint that is out of rotation.

A server is ready when `/health` answers 200. Servers without a `/health` route (404 or 405: many
OpenAI-compatible servers and gateways) are ready when `/v1/models` answers. Any other status (SGLang
and vLLM answer 503 while loading) means "still starting"; no answer within the limit means "slow", not
"unreachable" (SGLang's `/health` generates a token and can be slow under load); a refused or failed
connection means unreachable, with the transport's own reason (certificate, proxy, DNS).
"""

from __future__ import annotations

from dataclasses import dataclass

from client.core.errors import AttemptError, StreamStalled
from client.wire.endpoint import Endpoint

NO_HEALTH_ROUTE = (404, 405)


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reachable: bool  # something answered, or accepted the connection and is slow
    reason: str = ""  # why it is not ready; empty when ready
    via_models: bool = False  # ready by /v1/models because the server has no /health


async def probe(endpoint: Endpoint, limit_s: float) -> Readiness:
    status = await endpoint.health(limit_s=limit_s)
    if status == 200:
        return Readiness(ready=True, reachable=True)
    if status in NO_HEALTH_ROUTE:
        try:
            await endpoint.get_json("/v1/models", limit_s=limit_s)
        except (AttemptError, ValueError) as exc:
            return Readiness(ready=False, reachable=True,
                             reason=f"/health answered {status} (no such route) and /v1/models failed: {exc}")
        return Readiness(ready=True, reachable=True, via_models=True)
    if status is not None:
        return Readiness(ready=False, reachable=True, reason=f"/health answered {status} (still starting?)")
    error = endpoint.last_error
    if isinstance(error, StreamStalled):
        return Readiness(ready=False, reachable=True,
                         reason=f"/health did not answer within {limit_s:.0f}s (slow or still loading)")
    return Readiness(ready=False, reachable=False, reason=str(error) if error is not None else "no answer")
