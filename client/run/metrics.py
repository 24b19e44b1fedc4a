"""The run's Prometheus endpoint (`--metrics-port`): the StatsSnapshot as metric families, served by
prometheus_client's own HTTP server on a thread of its own.

The event loop publishes a frozen snapshot every second; a scrape reads only that reference, so the
serving thread never touches the swarm's mutable counters. Counters are the run's own totals (this
process, since it started); a resumed run starts them again from 0, which Prometheus reads as a reset.
After the run, `--metrics-linger` keeps the endpoint up until one scrape has seen the final figures, so a
scraper polling every 15 s does not miss the end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from client.core.errors import ConfigError
from client.core.stats import StatsSnapshot

PREFIX = "regen"


def _gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
    if value is not None:
        yield GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


def metric_families(snap: StatsSnapshot) -> Iterator[Metric]:
    """Every family of one snapshot. Unknown figures (no ETA yet, no server rate) are left out, not 0."""
    for name, doc, value in (
        ("requests_done", "Requests written as results.", snap.done),
        ("requests_failed", "Requests written to the failures file.", snap.failed),
        ("requests_retried", "Attempts retried after a failure.", snap.retries),
        ("requests_truncated", "Results cut by max_tokens (finish_reason length).", snap.truncated),
        ("loops_stopped", "Replies the loop stop ended (finish_reason repetition).", snap.loops_stopped),
        ("replies_continued", "Replies continued from their ids after a broken attempt (--continue-replies).",
         snap.continued),
        ("continued_tokens_kept", "Tokens of continued replies made by earlier attempts: not generated again.",
         snap.continued_kept),
        ("prompt_tokens", "Prompt tokens of finished requests.", snap.prompt_tokens),
        ("completion_tokens", "Completion tokens of finished requests (usage).", snap.completion_tokens),
        ("streamed_tokens", "Completion tokens counted as they stream, failed attempts included.",
         snap.streamed_tokens),
    ):
        yield CounterMetricFamily(f"{PREFIX}_{name}", doc, value=value)
    yield GaugeMetricFamily(f"{PREFIX}_in_flight", "Requests in flight.", value=snap.in_flight)
    rate = GaugeMetricFamily(f"{PREFIX}_tokens_per_second", "Fleet completion tok/s, streamed.",
                             labels=["window"])
    rate.add_metric(["15s"], snap.tokens_per_s_short)
    rate.add_metric(["5m"], snap.tokens_per_s_long)
    yield rate
    yield from _gauge("prompts_total", "Prompts (or turn events) this run set out to do.", snap.total)
    yield from _gauge("eta_seconds", "Estimated seconds to the end of the run.", snap.eta_s)
    yield from _gauge("s3_lag_seconds", "Age of the oldest segment not yet in S3.", snap.sync_lag_s)
    yield from _gauge("server_tokens_per_second", "Generation tok/s the servers report, other traffic included.",
                      snap.server_tokens_per_s)
    yield from _gauge("server_accept_length", "Mean MTP accept length the servers report.", snap.accept_length)
    yield from _gauge("gpu_hours", "GPU-hours so far (--gpus, else the servers' own count).", snap.gpu_hours_so_far)
    yield from _gauge("gpu_hours_projected", "GPU-hours at the end, projected (--gpus, else the servers' own count).",
                      snap.gpu_hours_projected)
    yield from _endpoint_families(snap)


def _endpoint_families(snap: StatsSnapshot) -> Iterator[Metric]:
    label = ["endpoint"]
    done = CounterMetricFamily(f"{PREFIX}_endpoint_requests_done", "Results written, per endpoint.", labels=label)
    errors = CounterMetricFamily(f"{PREFIX}_endpoint_errors", "Failed attempts, per endpoint.", labels=label)
    up = GaugeMetricFamily(f"{PREFIX}_endpoint_up", "1 when the endpoint takes requests.", labels=label)
    in_flight = GaugeMetricFamily(f"{PREFIX}_endpoint_in_flight", "Our requests in flight.", labels=label)
    rate = GaugeMetricFamily(f"{PREFIX}_endpoint_tokens_per_second", "Streamed tok/s over 15 s.", labels=label)
    running = GaugeMetricFamily(f"{PREFIX}_endpoint_server_running", "Requests the server runs.", labels=label)
    queue = GaugeMetricFamily(f"{PREFIX}_endpoint_server_queue", "Requests waiting in the server's queue.",
                              labels=label)
    server_rate = GaugeMetricFamily(f"{PREFIX}_endpoint_server_tokens_per_second",
                                    "Generation tok/s the server reports.", labels=label)
    kv = GaugeMetricFamily(f"{PREFIX}_endpoint_kv_cache_usage", "KV-cache use reported by the server, 0..1.",
                           labels=label)
    accept = GaugeMetricFamily(f"{PREFIX}_endpoint_server_accept_length", "MTP accept length the server reports.",
                               labels=label)
    for e in snap.endpoints:
        done.add_metric([e.url], e.done)
        errors.add_metric([e.url], e.errors)
        up.add_metric([e.url], 1.0 if e.state == "up" else 0.0)
        in_flight.add_metric([e.url], e.in_flight)
        rate.add_metric([e.url], e.tokens_per_s)
        for family, value in ((running, e.server_running), (queue, e.server_waiting),
                              (server_rate, e.server_tokens_per_s), (kv, e.token_usage),
                              (accept, e.accept_length)):
            if value is not None:
                family.add_metric([e.url], value)
    yield from (done, errors, up, in_flight, rate, running, queue, server_rate, kv, accept)


class _SnapshotCollector(Collector):
    def __init__(self) -> None:
        self.latest: StatsSnapshot | None = None
        self.on_final_scrape: Callable[[], None] | None = None  # set with the final snapshot

    def collect(self) -> Iterator[Metric]:
        snap, told = self.latest, self.on_final_scrape  # one read of each: the loop may swap them meanwhile
        if snap is not None:
            yield from metric_families(snap)
        if told is not None:
            told()


class MetricsServer:
    """`/metrics` on host:port for the life of the run; `publish` runs as one of the run's tasks."""

    def __init__(self, host: str, port: int) -> None:
        self._collector = _SnapshotCollector()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._collector)
        ProcessCollector(registry=registry)  # the client's own CPU and memory
        try:
            self._server: WSGIServer = start_http_server(port, addr=host, registry=registry)[0]
        except OSError as exc:
            raise ConfigError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                              "choose another port, or 0 for any free one") from exc
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def show(self, snap: StatsSnapshot) -> None:
        """What the next scrape reads."""
        self._collector.latest = snap

    async def publish(self, snapshot: Callable[[], StatsSnapshot], every_s: float = 1.0) -> None:
        """Until cancelled: a fresh snapshot for the scrapers every `every_s`."""
        while True:
            self._collector.latest = snapshot()
            await asyncio.sleep(every_s)

    def serve_final(self, final: StatsSnapshot) -> asyncio.Event:
        """From now on every scrape reads the final figures; the event is set once one has."""
        scraped = asyncio.Event()
        loop = asyncio.get_running_loop()

        def told() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
                loop.call_soon_threadsafe(scraped.set)

        self._collector.latest = final
        self._collector.on_final_scrape = told
        return scraped

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


async def linger_for_final_scrape(scraped: asyncio.Event, linger_s: float) -> bool:
    """Wait at most `linger_s` for a scrape of the final figures (`MetricsServer.serve_final`'s event).
    True when one came."""
    try:
        async with asyncio.timeout(linger_s):
            await scraped.wait()
    except TimeoutError:
        return False
    return True
