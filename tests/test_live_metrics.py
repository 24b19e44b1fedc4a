"""The live figures against what the servers say, and the `--metrics-port` endpoint, on a simulated fleet.

Everything is read over HTTP, as a user's Prometheus would: the client's /metrics, parsed with
prometheus_client's own text parser, and each simulated server's /metrics.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from simulator.fleet import SimServerSpec
from simulator.tokens import MEAN_ACCEPT_LENGTH
from tests.conftest import REPO, client_command, make_prompts, read_results, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def servers_generated(urls: list[str]) -> float:
    """The fleet's generated tokens, as the servers count them."""
    return sum(v for url in urls for (name, _), v in scrape(url + "/metrics").items()
               if name == "sglang:generation_tokens_total")


def start_client(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen[Any], Path, str]:
    stderr = tmp_path / "client.err"
    with stderr.open("w") as sink:
        proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=sink,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    found: list[str] = []

    def announced() -> bool:
        found[:] = re.findall(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", stderr.read_text())
        return bool(found)

    wait_until(announced, "the metrics URL on stderr", proc=proc)
    return proc, stderr, found[0]


def stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=60)


def scrape_until_the_end(proc: subprocess.Popen[Any], url: str, *, timeout: float = 150.0) -> list[Samples]:
    """Scrape like Prometheus until the run ends (with --metrics-linger it serves the final figures to one
    scrape, then closes the endpoint)."""
    scrapes: list[Samples] = []
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            scrapes.append(scrape(url))
        except OSError:
            break  # the run ended and closed the endpoint after the final scrape
        time.sleep(0.2)  # a scraper's interval, not a wait for an event
    proc.wait(timeout=30)
    return scrapes


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_live_figures_show_before_any_request_finishes_and_end_at_the_servers_count(fleet_factory: Any,
                                                                                    tmp_path: Path) -> None:
    # Every reply runs to max_tokens (mean far above it), 3 tokens per chunk (MTP); 16 prompts on 16 slots,
    # each streaming for several seconds. That the live count is tokens, not chunks, as each chunk comes:
    # tests/test_stream.py::test_live_tokens_count_tokens_as_the_chunks_come.
    # Without a tokenizer: the servers' /metrics count the script's word pieces, which only then are the tokens
    # the replies report (with --tokenizer the usage counts the tokenizer's ids; simulator/README.md).
    spec = SimServerSpec(max_running=8, speed=1.0, extra_args=("--mean-tokens", "60000", "--tokens-per-chunk", "3",
                                                               "--tokenizer", "none"))
    fleet = fleet_factory([spec, spec])
    prompts = make_prompts(tmp_path / "p.jsonl", 16)
    max_tokens = 900
    proc, stderr, url = start_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                      "--out", str(tmp_path / "out"), "--max-tokens", str(max_tokens),
                                      "--metrics-port", "0", "--metrics-linger", "60"], tmp_path)
    try:
        scrapes = scrape_until_the_end(proc, url)
    finally:
        stop(proc)
    assert proc.returncode == 0, stderr.read_text()[-2000:]
    seen = [s for s in scrapes if ("regen_requests_done_total", ()) in s]
    # A live figure while every request is still streaming: the rate needs no finished request.
    early = [s for s in seen if value(s, "regen_requests_done_total") == 0
             and value(s, "regen_streamed_tokens_total") > 0]
    assert early, "no scrape caught the run streaming before its first request finished"
    assert any(value(s, "regen_tokens_per_second", window="15s") > 0 for s in early)
    # The servers' own figures, from the load poll, are shown beside ours; and the MTP accept length they
    # report: tokens per verify step of the replies' MTP draws (simulator.tokens), not the chunk size.
    # (a gauge is left out until it is known)
    assert any(s.get(("regen_server_tokens_per_second", ()), 0.0) > 0 for s in seen)
    assert any(s.get(("regen_server_accept_length", ()), 0.0) == pytest.approx(MEAN_ACCEPT_LENGTH) for s in seen)
    # Once the servers are idle, the streamed count is exactly what they generated and what the results say.
    final = seen[-1]
    made = 16 * max_tokens
    assert sum(r["usage"]["completion_tokens"] for r in read_results(tmp_path / "out")) == made
    assert value(final, "regen_streamed_tokens_total") == made
    assert value(final, "regen_completion_tokens_total") == made
    # The servers also made one token each for the start-up check (client/fleet/preflight.py: max_tokens 1).
    assert servers_generated(fleet.urls) == made + len(fleet.urls)


_SUMMARY = re.compile(r"run ended after \S+: ([\d,]+) done, ([\d,]+) failed, ([\d,]+) retries, ([\d,]+) truncated "
                      r"\(finish_reason length\), ([\d,]+) completion tokens")
_COUNTERS = ("regen_requests_done_total", "regen_requests_failed_total", "regen_requests_retried_total",
             "regen_requests_truncated_total", "regen_completion_tokens_total", "regen_prompt_tokens_total",
             "regen_streamed_tokens_total")


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_metrics_counters_rise_and_end_at_the_summary(fleet_factory: Any, tmp_path: Path) -> None:
    spec = SimServerSpec(max_running=8, speed=10.0, extra_args=("--fail-500", "0.1", "--mean-tokens", "300"))
    fleet = fleet_factory([spec, spec])
    prompts = make_prompts(tmp_path / "p.jsonl", 120)
    out = tmp_path / "out"
    proc, stderr, url = start_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
                                      "--out", str(out), "--max-tokens", "400", "--metrics-port", "0",
                                      "--metrics-linger", "60"], tmp_path)
    try:
        scrapes = scrape_until_the_end(proc, url)
    finally:
        stop(proc)
    assert proc.returncode in (0, 1), stderr.read_text()[-2000:]
    seen = [s for s in scrapes if ("regen_requests_done_total", ()) in s]
    assert len(seen) >= 3
    for name in _COUNTERS:
        values = [value(s, name) for s in seen]
        assert values == sorted(values), f"{name} went down: {values}"
    match = _SUMMARY.search(stderr.read_text())
    assert match is not None, stderr.read_text()[-2000:]
    done, failed, retries, truncated, tokens = (int(g.replace(",", "")) for g in match.groups())
    final = seen[-1]
    assert value(final, "regen_requests_done_total") == done == len(read_results(out)) > 0
    assert value(final, "regen_requests_failed_total") == failed
    assert value(final, "regen_requests_retried_total") == retries > 0
    assert value(final, "regen_requests_truncated_total") == truncated
    assert value(final, "regen_completion_tokens_total") == tokens
    assert value(final, "regen_in_flight") == 0
    per_endpoint = sum(value(final, "regen_endpoint_requests_done_total", endpoint=u) for u in fleet.urls)
    assert per_endpoint == done


def test_metrics_port_in_use_is_refused_at_start(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        prompts = make_prompts(tmp_path / "p.jsonl", 2)
        result = subprocess.run(client_command(["--simulate", "1", "--prompts", str(prompts), "--out",
                                                str(tmp_path / "out"), "--metrics-port", str(port)]),
                                cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2, result.stderr
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr
