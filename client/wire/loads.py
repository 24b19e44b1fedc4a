"""Server load documents -> `ServerLoad`: pure parsers for SGLang's `/v1/loads`, its legacy `/get_load`,
and Prometheus `/metrics` read with the metric names each kind's dialect gives (client.wire.dialect). No I/O
here; the dispatcher polls and calls these.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from client.core.errors import LoadFormatError
from client.wire.dialect import MetricNames


@dataclass(frozen=True, slots=True)
class ServerLoad:
    """What one server reports, summed over its DP ranks. `capacity` is None when the server does not say."""

    running: int
    waiting: int
    capacity: int | None = None
    token_usage: float | None = None
    gen_throughput: float | None = None
    generation_tokens_total: float | None = None
    accept_length: float | None = None  # MTP/speculative: mean tokens per verify step, over the ranks


def parse_v1_loads(body: bytes) -> ServerLoad:
    """SGLang >= 0.5: `{"loads": [{"dp_rank", "num_running_reqs", "num_waiting_reqs", "max_running_requests",
    "token_usage", "gen_throughput", ...}, ...]}`, one entry per DP rank."""
    ranks = _rank_entries(_json(body))
    try:
        running = sum(int(r["num_running_reqs"]) for r in ranks)
        waiting = sum(int(r.get("num_waiting_reqs", 0)) for r in ranks)
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadFormatError(f"/v1/loads: bad rank entry ({exc})") from exc
    usages = _numbers(ranks, "token_usage")
    throughputs = _numbers(ranks, "gen_throughput")
    accepts = _numbers([spec for r in ranks if isinstance(spec := r.get("speculative"), dict)], "accept_length")
    return ServerLoad(
        running=running, waiting=waiting, capacity=_capacity(ranks),
        token_usage=max(usages) if usages else None,
        gen_throughput=sum(throughputs) if throughputs else None,
        accept_length=sum(accepts) / len(accepts) if accepts else None,
    )


def _rank_entries(document: Any) -> list[dict[str, Any]]:
    ranks = document.get("loads") if isinstance(document, dict) else None
    if not isinstance(ranks, list) or not ranks or not all(isinstance(r, dict) for r in ranks):
        raise LoadFormatError("/v1/loads: expected a non-empty 'loads' list")
    return ranks


def _capacity(ranks: list[dict[str, Any]]) -> int | None:
    """Every rank's max_running_requests summed; None unless every rank gives a positive count."""
    limits = [r.get("max_running_requests") for r in ranks]
    counts = [x for x in limits if isinstance(x, int) and x > 0]
    return sum(counts) if len(counts) == len(limits) else None


def _numbers(entries: list[dict[str, Any]], key: str) -> list[float]:
    """The entries' `key` where it is a number; a rank that leaves it out (or sends null) is skipped."""
    return [float(value) for entry in entries if isinstance(value := entry.get(key), int | float)]


def parse_get_load(body: bytes) -> ServerLoad:
    """Older SGLang: a list of `{"dp_rank", "num_reqs" (running + waiting), "num_waiting_reqs", ...}`."""
    document = _json(body)
    ranks = document if isinstance(document, list) else [document]
    try:
        total = sum(int(r["num_reqs"]) for r in ranks)
        waiting = sum(int(r.get("num_waiting_reqs", 0)) for r in ranks)
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadFormatError(f"/get_load: bad entry ({exc})") from exc
    return ServerLoad(running=max(0, total - waiting), waiting=waiting)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfaINFA]+)(?:\s+\d+)?$")


def parse_metrics(text: bytes, families: Sequence[MetricNames]) -> ServerLoad:
    """Prometheus text; sums every sample of a family (one per DP rank or engine). `families`: each kind's
    metric names (client.wire.dialect), tried in order; the first whose running gauge is present is read."""
    sums: dict[str, float] = {}
    samples: Counter[str] = Counter()
    highest: dict[str, float] = {}  # gauges of a share (cache use) are per rank: the fullest rank counts
    for raw in text.decode("utf-8", "replace").splitlines():
        if not raw or raw.startswith("#"):
            continue
        match = _SAMPLE.match(raw.strip())
        if match is None:
            continue
        name = match.group(1)
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        sums[name] = sums.get(name, 0.0) + value
        samples[name] += 1
        highest[name] = max(highest.get(name, value), value)
    for names in families:
        if names.running in sums:
            usage = next((highest[name] for name in names.usage if name in highest), None)
            accept = names.accept_length
            return ServerLoad(running=int(sums[names.running]), waiting=int(sums.get(names.waiting, 0.0)),
                              generation_tokens_total=sums.get(names.generated), token_usage=usage,
                              gen_throughput=sums.get(names.throughput) if names.throughput else None,
                              accept_length=sums[accept] / samples[accept] if accept and samples[accept] else None)
    raise LoadFormatError("/metrics: no known running/waiting gauges (is --enable-metrics on?)")


def load_sources(families: Sequence[MetricNames]) -> tuple[tuple[str, Callable[[bytes], ServerLoad]], ...]:
    """The load documents tried in this order; the first that answers and parses is kept for the endpoint.
    `/metrics` is read with the known kinds' metric names (client.fleet.kinds.metric_families)."""
    return (
        ("/v1/loads", parse_v1_loads),
        ("/get_load", parse_get_load),
        ("/metrics", partial(parse_metrics, families=tuple(families))),
    )


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise LoadFormatError(f"not JSON: {exc}") from exc
