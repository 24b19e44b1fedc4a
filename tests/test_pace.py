"""The drain's pace by batch (client.core.pace), table-driven, and the ETA it gives a thinning batch
(client.core.eta, client.core.stats on an injected clock). No wall clock, no server."""

from __future__ import annotations

import pytest

from client.core.eta import LengthHistogram, eta
from client.core.pace import MIN_POINTS, PaceModel, drain_seconds
from client.core.stats import EndpointLive, RunStats


def model(step: tuple[float, float], batches: list[float]) -> PaceModel:
    """Points of a fleet whose decode step takes a + b x k seconds at k requests in flight."""
    a, b = step
    m = PaceModel()
    for k in batches:
        m.observe(k, 1 / (a + b * k))
    return m


@pytest.mark.parametrize(("step", "batches", "now", "at", "ratio"), [
    # t(k) = 10 ms + 10 ms x k/64 (the simulator's defaults): a lone request decodes 2x as fast as a full batch
    ((0.01, 0.01 / 64), [64, 56, 48, 40, 32, 24, 16, 8, 1], 64, 1, 2.0 * 64 / 65),
    ((0.01, 0.01 / 64), [64, 56, 48, 40, 32, 24, 16, 8, 1], 64, 32, (0.01 + 0.01) / (0.01 + 0.005)),
    # a memory-bound GPU: the step does not grow with the batch, the pace stays
    ((0.02, 0.0), [64, 48, 32, 16, 8, 4], 64, 1, 1.0),
    # a host-bound rate: the fleet's throughput is flat, one request's pace is 1/k of it
    ((0.0, 0.001), [64, 48, 32, 16, 8, 4], 64, 4, 16.0),
    # the line holds down to half the smallest batch seen, and the pace is held there below
    ((0.0, 0.001), [64, 48, 32, 16, 8, 4], 64, 1, 32.0),
    ((0.0, 0.001), [64, 48, 32, 16, 8, 4], 64, 2, 32.0),
    # too few points, or no spread of batches: no slope is trusted
    ((0.01, 0.01 / 64), [64, 32, 16, 8, 4][: MIN_POINTS - 1], 64, 1, 1.0),
    ((0.01, 0.01 / 64), [64, 63, 62, 64, 63, 62, 64, 63], 64, 1, 1.0),
], ids=["sim-lone", "sim-half", "memory-bound", "host-bound", "held-below-reach", "at-reach", "few-points",
        "no-spread"])
def test_pace_ratio(step: tuple[float, float], batches: list[float], now: float, at: float, ratio: float) -> None:
    assert model(step, batches).ratio(now)(at) == pytest.approx(ratio, rel=1e-6)


@pytest.mark.parametrize(("rests", "step", "seconds"), [
    # flat pace: the longest at today's pace, as before
    ([100.0, 200.0, 400.0], (0.01, 0.0), 400 * 0.01),
    # 3 left until 100 (3 x 100 ms-per-token steps), 2 until 200, then 1: steps of 0.01 + 0.001 k
    ([100.0, 200.0, 400.0], (0.01, 0.001), 100 * 0.013 + 100 * 0.012 + 200 * 0.011),
])
def test_drain_seconds_follow_the_thinning_batch(rests: list[float], step: tuple[float, float],
                                                 seconds: float) -> None:
    a, b = step
    fitted = model(step, [3, 2, 1, 3, 2, 1])
    pace_now = 1 / (a + b * 3)
    assert drain_seconds(rests, pace_now, fitted.ratio(3)) == pytest.approx(seconds, rel=1e-6)


def test_eta_without_a_shape_is_the_rule_before() -> None:
    seen = LengthHistogram()
    seen.add(1000, 40)
    flat = eta(unsent=0, in_flight=[100.0, 500.0], lengths=seen, pace=10.0)
    shaped = eta(unsent=0, in_flight=[100.0, 500.0], lengths=seen, pace=10.0, pace_ratio=PaceModel().ratio(2))
    assert flat.seconds == shaped.seconds == pytest.approx(900 / 10)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_thinning_batch_that_decodes_faster_shortens_the_eta() -> None:
    """A fleet whose one-request pace doubles as its batch goes from 8 to 1 (step 10 + 10 x k/8 ms): the run's
    figures learn that shape as the batch thins, and the ETA of the last 4 requests counts on it."""
    clock = Clock()
    stats = RunStats(total=8, clock=clock, started=0.0, max_tokens=100_000)
    stats.track(1)
    stats.seed_lengths([1000] * 10 + [2000] * 10 + [4000] * 10)
    attempts = []
    for started in range(8):  # started a second apart: they have streamed different shares, so rests differ
        clock.now = started - 8.0
        attempts.append(stats.begin_attempt())
    streamed = 0.0
    # each request streams at 1 / (0.01 + 0.01 k / 8) tok/s while k are in flight; one ends every 5 s
    for second in range(1, 21):
        k = len(attempts)
        streamed += k / (0.01 + 0.01 * k / 8)
        clock.now = float(second)
        if second % 5 == 0:
            stats.end_attempt(attempts.pop())
            stats.record_done(0, {"completion_tokens": 200}, "stop")
        stats.snapshot([EndpointLive(url="http://a", state="up", in_flight=len(attempts), max_in_flight=8,
                                     streamed_tokens=int(streamed))])
    assert stats.pace_model.line() is not None, "the slope is seen as the batch thins from 8 to 4"
    ratio = stats.pace_model.ratio(4)
    # the smallest batch seen is 4: the line holds down to 2, where a request goes 1.2x as fast as at 4
    assert ratio(1) == ratio(2) == pytest.approx((0.01 + 0.005) / (0.01 + 0.0025), rel=0.05)
    snap = stats.snapshot([EndpointLive(url="http://a", state="up", in_flight=4, max_in_flight=8,
                                        streamed_tokens=int(streamed))])
    assert snap.eta_parts is not None and snap.eta_s is not None
    rests = snap.eta_parts.rests
    assert len(set(rests)) > 1
    pace = stats._pace
    assert pace is not None
    assert snap.eta_s < max(rests) / pace, "the drain counts on the faster pace of a thinner batch"


def test_no_eta_once_a_stop_is_asked_for() -> None:
    clock = Clock()
    stats = RunStats(total=100, clock=clock, started=0.0)
    stats.track(1)
    stats.seed_lengths([500] * 30)
    stats.begin_attempt()
    clock.now = 10.0
    live = EndpointLive(url="http://a", state="up", in_flight=1, max_in_flight=8, streamed_tokens=200)
    assert stats.snapshot([live]).eta_s is not None
    stats.stopping = True
    clock.now = 11.0
    snap = stats.snapshot([live])
    assert snap.eta_s is None and snap.stopping and snap.gpu_hours_projected is None
