"""client.core.meter's windowed rates and client.core.stats' live rates, table-driven with explicit clocks (the
ETA's rule and the figures that feed it: tests/test_eta.py)."""

from __future__ import annotations

import pytest

from client.core.meter import WindowedRates
from client.core.stats import EndpointLive, RunStats

Samples = list[tuple[float, list[float | None]]]


@pytest.mark.parametrize(("samples", "now", "values", "window", "from_zero", "expected"), [
    # Before a window has passed, the rate is over the time since the start: a figure from the first token.
    ([], 2.0, [100.0], 15.0, True, [50.0]),
    # A full window: the newest sample at or before its start is the base.
    ([(t, [t * 10.0]) for t in range(1, 41)], 40.0, [400.0], 15.0, True, [10.0]),
    # The rate falls back to zero when nothing more is counted.
    ([(t, [min(t, 10) * 10.0]) for t in range(1, 41)], 40.0, [100.0], 15.0, True, [0.0]),
    # Two counters, one unknown: None stays None.
    ([(1.0, [5.0, None])], 3.0, [15.0, None], 15.0, True, [5.0, None]),
    # A lifetime counter (from_zero=False) needs a sample of its own before it has a rate.
    ([], 5.0, [1_000_000.0], 15.0, False, [None]),
    ([(2.0, [1_000_000.0])], 4.0, [1_000_100.0], 15.0, False, [50.0]),
    # A counter that appeared after the start is measured from its first sample.
    ([(1.0, [None]), (3.0, [500.0])], 5.0, [700.0], 15.0, False, [100.0]),
    # Sampled at this very moment only: no span to measure over.
    ([(5.0, [10.0])], 5.0, [10.0], 15.0, False, [0.0]),
], ids=["from-start", "full-window", "idle", "unknown", "lifetime-unsampled", "lifetime", "late-counter",
        "no-span"])
def test_rates(samples: Samples, now: float, values: list[float | None], window: float, from_zero: bool,
               expected: list[float | None]) -> None:
    meter = WindowedRates(0.0, every_s=1.0, keep_s=60.0)
    for when, sampled in samples:
        meter.sample(when, sampled)
    rates = meter.rates(now, values, window, from_zero=from_zero)
    assert rates == [None if e is None else pytest.approx(e) for e in expected]


def test_samples_are_thinned_and_trimmed() -> None:
    meter = WindowedRates(0.0, every_s=1.0, keep_s=10.0)
    for step in range(1, 1001):
        meter.sample(step / 10, [float(step)])  # ten calls a second, for 100 s
    assert 10 <= len(meter._samples) <= 14
    assert meter.rates(100.0, [1000.0], 5.0) == [pytest.approx(10.0, rel=0.05)]


def test_snapshot_reads_cache_hits_from_usage() -> None:
    stats = RunStats()
    stats.track(1)
    fleet = [EndpointLive(url="http://a", state="up", in_flight=0, max_in_flight=8)]
    stats.record_done(0, {"completion_tokens": 5, "prompt_tokens": 100}, "stop")
    assert stats.snapshot(fleet).cache_hit is None  # usage never said
    stats.record_done(0, {"completion_tokens": 5, "prompt_tokens": 100,
                          "prompt_tokens_details": {"cached_tokens": 80}}, "length")
    snap = stats.snapshot(fleet)
    assert snap.cache_hit == pytest.approx(0.4) and snap.endpoints[0].cache_hit == pytest.approx(0.4)
    assert snap.truncated == 1 and snap.prompt_tokens == 200


class FakeClock:
    """RunStats' clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_live_rates_follow_the_streamed_tokens_on_an_injected_clock() -> None:
    clock = FakeClock()
    stats = RunStats(total=10, started=0.0, clock=clock)
    stats.track(1)

    def live(streamed: int, generated: float | None = None) -> list[EndpointLive]:
        return [EndpointLive(url="http://a", state="up", in_flight=4, max_in_flight=8, streamed_tokens=streamed,
                             server_generated=generated)]

    # Two seconds in, 300 tokens streamed and no request finished: a figure from the first tokens.
    clock.now = 2.0
    snap = stats.snapshot(live(300))
    assert (snap.done, snap.tokens_per_s_short, snap.endpoints[0].tokens_per_s) == (0, 150.0, 150.0)
    # Then 100 tok/s, seen once a second (as the progress line does), while the server's lifetime counter
    # (1,000,000 before the run) rises by 120 a second.
    generated = 1_000_000.0
    streamed = 300
    for second in range(3, 41):
        clock.now = float(second)
        streamed = 300 + 100 * (second - 2)
        generated = 1_000_000.0 + 120 * (second - 3)
        snap = stats.snapshot(live(streamed, generated))
    assert snap.tokens_per_s_short == pytest.approx(100.0)  # the last 15 s only
    assert snap.tokens_per_s_long == pytest.approx(snap.streamed_tokens / 40.0)  # since the start: under 5 min
    assert snap.endpoints[0].server_tokens_per_s == pytest.approx(120.0)
    # Five more seconds with nothing streamed: the 15 s figure falls by a third, the server's by its own.
    for second in range(41, 46):
        clock.now = float(second)
        generated += 120
        snap = stats.snapshot(live(streamed, generated))
    assert snap.tokens_per_s_short == pytest.approx(100.0 * 10 / 15)
