"""docs/monitoring.md and docs/grafana-dashboard.json stay true to what `--metrics-port` serves: every
metric the dashboard queries and every one the table names is exported by client.run.metrics."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from client.core.stats import EndpointSnapshot, StatsSnapshot, SyncView
from client.run.metrics import metric_families

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _full_snapshot() -> StatsSnapshot:
    """Every optional figure known, so every family is present."""
    endpoint = EndpointSnapshot(url="http://a", state="up", in_flight=1, max_in_flight=8, capacity=8, done=1,
                                errors=0, tokens_per_s=1.0, server_running=1, server_waiting=0, last_error="",
                                server_tokens_per_s=1.0, token_usage=0.5, cache_hit=0.5, accept_length=3.0)
    values: dict[str, object] = {}
    for field in dataclasses.fields(StatsSnapshot):
        values[field.name] = {"errors_by_kind": {}, "endpoints": (endpoint,), "waiting_wake_s": (1.0, 2.0),
                             "sync": SyncView(uploaded=1, pending=1, pending_bytes=1, oldest_pending_s=1.0)
                             }.get(field.name, 1)
    return StatsSnapshot(**values)  # type: ignore[arg-type]


def _exported() -> set[str]:
    names = set()
    for family in metric_families(_full_snapshot()):
        names.update(sample.name for sample in family.samples)
    return names


def test_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bregen_[a-z0-9_]+", expr)}
    assert used and used <= _exported(), used - _exported()
    # The three views the dashboard promises: fleet tok/s, done over time, per-endpoint queue.
    assert {"regen_tokens_per_second", "regen_requests_done_total", "regen_endpoint_server_queue"} <= used
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_monitoring_page_names_only_exported_metrics() -> None:
    text = (DOCS / "monitoring.md").read_text()
    named = {name.rstrip("_") for name in re.findall(r"`(regen_[a-z0-9_]+)", text)}
    exported = _exported()
    missing = {name for name in named if name not in exported and f"{name}_total" not in exported}
    assert not missing
    # ... and the page's table lists every family the endpoint serves.
    families = {family.name for family in metric_families(_full_snapshot())}
    assert {f for f in families if f not in named and f"{f}_total" not in named} == set()
