"""What each request in flight has streamed, estimated from per-server counters (pure).

The client counts streamed tokens per server, not per request: the tokens a server has streamed and not
yet written are shared among its requests in flight by age (they decode in the same batches, so the
older one has streamed more). Per server, since servers run at different paces (a fuller batch decodes
slower): shared across the fleet, the requests of a slow server would look longer than they are and those
of a fast one shorter, below replies that have already ended, and the ETA's rest (client.core.residual)
would read them as nearly done.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

UNNAMED = -1  # the server of a request whose caller did not say which one


def streamed_by_request(now: float, attempts: Iterable[tuple[float, int]], streamed: Sequence[int],
                        written: Sequence[int], written_total: int) -> list[float]:
    """One estimate per attempt (start time, server index or UNNAMED): `streamed[i]` and `written[i]` are
    server i's tokens streamed and written; `written_total` is the run's written tokens, all servers."""
    pools: dict[int, list[float]] = {}
    for start, server in attempts:
        known = 0 <= server < min(len(streamed), len(written))
        pools.setdefault(server if known else UNNAMED, []).append(max(0.0, now - start))
    shares: list[float] = []
    for server, ages in pools.items():
        if server != UNNAMED:
            unwritten = streamed[server] - written[server]
        else:  # what the named servers do not account for
            named = [i for i in pools if i != UNNAMED]
            unwritten = (sum(s for i, s in enumerate(streamed) if i not in pools)
                         - (written_total - sum(written[i] for i in named)))
        total_age = sum(ages)
        shares.extend(max(0, unwritten) * age / total_age if total_age > 0 else 0.0 for age in ages)
    return shares
