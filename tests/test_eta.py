"""The ETA rule (client.core.eta), table-driven, and the run's figures that feed it (client.core.stats) on an
injected clock and injected token counts: the tail of a run at several points, a resume before its first
reply, and `client.status --out` of a stopped run. No wall clock, no server."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from client.core.eta import MIN_LENGTHS, LengthHistogram, eta, expected_rest
from client.core.inflight import UNNAMED, streamed_by_request
from client.core.stats import EndpointLive, RunStats
from client.status.local import read_local


def hist(*groups: tuple[int, int]) -> LengthHistogram:
    """`(length, count)` groups; lengths far apart, so no two share a bin and the arithmetic is exact."""
    h = LengthHistogram()
    for length, count in groups:
        h.add(length, count)
    return h


SEEN = hist((100, 10), (1000, 10))  # mean 550


@pytest.mark.parametrize(("streamed", "lengths", "mean", "cap", "rest"), [
    (0, SEEN, 550.0, None, 550.0),  # a fresh request: the mean
    (200, SEEN, 550.0, None, 800.0),  # past the short ones: only the long ones are left, 1000 - 200
    (500, SEEN, 550.0, None, 500.0),
    (1200, SEEN, 550.0, None, 600.0),  # past everything seen: half as long again
    (1200, SEEN, 550.0, 1500, 300.0),  # ... never past max_tokens
    (1500, SEEN, 550.0, 1500, 0.0),
    (100, hist((1000, MIN_LENGTHS - 1)), 1000.0, None, 900.0),  # too few lengths: the mean less what is done
    (700, hist((1000, MIN_LENGTHS - 1)), 1000.0, None, 350.0),  # ... or half of it, when more
    (100, LengthHistogram(), 400.0, None, 300.0),  # no length yet: the estimate's mean
    (100, LengthHistogram(), None, None, None),  # nothing to go by
], ids=["fresh", "past-short", "mid", "past-all", "past-all-capped", "at-cap", "few-lengths", "few-lengths-long",
        "prior-only", "nothing"])
def test_expected_rest(streamed: float, lengths: LengthHistogram, mean: float | None, cap: int | None,
                       rest: float | None) -> None:
    got = expected_rest(streamed, lengths, mean, cap)
    assert got == (None if rest is None else pytest.approx(rest))


@pytest.mark.parametrize(("streamed", "running", "rest"), [
    # 30 requests still running past every finished length: the lengths do not stop at 1000. Survival after
    # 100 is 41/51, after 1000 (40 at risk, 10 end) x 0.75; the 30 at 1200 carry the rest, half as long again:
    # 500 + 0.75 x 200 + 0.75 x 600, where the finished lengths alone said 1000 - 500.
    (500, [500.0] + [1200.0] * 30, 1100.0),
    # The all-started-together tail: a request 10 tokens below the longest finished reply, 50 running past it.
    # Alone the finished lengths say 10 tokens; with them, 10 + 0.5 x (1010 - 1000) + 0.5 x 505 (S(1000) =
    # a half of S(990): ten end of the twenty at risk).
    (990, [990.0] + [1010.0] * 10, 10 + 0.5 * 10 + 0.5 * 505),
    # Requests running below the finished lengths change nothing above them.
    (500, [500.0] + [150.0] * 30, 500.0),
], ids=["running-past-all", "just-below-the-longest", "running-short"])
def test_expected_rest_counts_the_requests_still_running(streamed: float, running: list[float],
                                                         rest: float) -> None:
    assert expected_rest(streamed, SEEN, 550.0, None, running) == pytest.approx(rest)


@pytest.mark.parametrize(("attempts", "streamed", "written", "written_total", "shares"), [
    # One server: its unwritten tokens by age.
    ([(20.0, 0), (0.0, 0)], [400], [0], 0, [100.0, 300.0]),
    # Written tokens are not in flight.
    ([(20.0, 0), (0.0, 0)], [900], [500], 500, [100.0, 300.0]),
    # Two servers at different paces: each shares its own (fleet-wide, each would read 1100 / 3).
    ([(20.0, 0), (20.0, 1), (20.0, 1)], [100, 1000], [0, 0], 0, [100.0, 500.0, 500.0]),
    # Unnamed requests share what the named servers do not account for.
    ([(20.0, 0), (20.0, UNNAMED), (0.0, UNNAMED)], [100, 600], [0, 200], 200, [100.0, 100.0, 300.0]),
], ids=["one-server", "less-written", "per-server", "unnamed"])
def test_streamed_by_request(attempts: list[tuple[float, int]], streamed: list[int], written: list[int],
                             written_total: int, shares: list[float]) -> None:
    assert streamed_by_request(30.0, attempts, streamed, written, written_total) == pytest.approx(shares)


@pytest.mark.parametrize(("unsent", "in_flight", "pace", "rate", "prior", "seconds"), [
    # Nothing left at all.
    (0, [], 20.0, None, None, 0.0),
    # Every prompt sent: the longest expected rest at one request's pace (not 0, however much was streamed).
    (0, [200.0, 200.0, 200.0, 200.0], 20.0, None, None, 800.0 / 20),
    (0, [600.0, 1200.0], 20.0, None, None, 600.0 / 20),  # 1000-600=400 and 1200/2=600: the longer counts
    # Prompts still to send: their work at the fleet's rate now (4 in flight x 20 tok/s), then the drain.
    (8, [200.0, 200.0, 200.0, 200.0], 20.0, None, None, 8 * 550.0 / 80 + 800.0 / 20),
    # The estimate's mean stands for the prompts not yet sent.
    (8, [200.0, 200.0, 200.0, 200.0], 20.0, None, 1000.0, 8 * 1000.0 / 80 + 800.0 / 20),
    # Nothing in flight: the fleet would start min(U, C) = 2 fresh requests (C = 640 / 20 = 32 slots), and
    # end with the longer of two: E[max] = 100 x 0.25 + 1000 x 0.75 = 775 tokens at 20 tok/s.
    (2, [], 20.0, 640.0, None, 2 * 550.0 / 40 + (775.0 - 550.0) / 20),
    # More prompts than slots: the work at the fleet's rate, and the longest of 32 less the mean.
    (100, [], 20.0, 640.0, None, 100 * 550.0 / 640 + (100 * 0.5**32 + 1000 * (1 - 0.5**32) - 550.0) / 20),
    # No pace yet (the first seconds): unknown, never a guess of 0.
    (8, [0.0, 0.0], None, None, None, None),
], ids=["done", "tail", "tail-past-all", "sending", "sending-estimate", "stopped-two-left", "stopped-many-left",
        "no-pace"])
def test_eta(unsent: int, in_flight: list[float], pace: float | None, rate: float | None, prior: float | None,
             seconds: float | None) -> None:
    got = eta(unsent=unsent, in_flight=in_flight, lengths=SEEN, pace=pace, rate=rate, prior_mean=prior)
    assert got.seconds == (None if seconds is None else pytest.approx(seconds))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# A scripted tail: four requests start at 0 and stream 20 tok/s each; A ends at 400 tokens (t=20), B and C
# at 1000 (t=50), D at 1600 (t=80). The run's lengths start from a resume's records: ten of 100, ten of 1000.
FINAL = {"A": 400, "B": 1000, "C": 1000, "D": 1600}


def play_tail(until: float, stats: RunStats, clock: Clock, attempts: dict[str, int]) -> EndpointLive:
    """Advance second by second to `until`, ending each request at its length; the fleet's view at `until`."""
    streamed = 0
    t = clock.now
    while True:
        clock.now = t
        streamed = sum(min(20 * int(t), length) for length in FINAL.values())
        for name, length in FINAL.items():
            if name in attempts and 20 * t >= length:
                stats.end_attempt(attempts.pop(name))
                stats.record_done(0, {"completion_tokens": length}, "stop")
        live = EndpointLive(url="http://a", state="up", in_flight=len(attempts), max_in_flight=8,
                            streamed_tokens=streamed)
        stats.snapshot([live])  # once a second, as the console does
        if t >= until:
            return live
        t += 1.0


@pytest.mark.parametrize(("at", "eta_s", "left"), [
    # t=10: each has streamed 200 (the 800 unwritten tokens shared by age); past the 100s only 1000s remain:
    # 800 to go at 20 tok/s.
    (10.0, 40.0, 70.0),
    # t=30: A is written; B, C, D have 600 each: 400 to go.
    (30.0, 20.0, 50.0),
    # t=60: only D (1200 streamed) is left, past every length seen: half as long again, 600 at 20 tok/s. The
    # old rule said 0 here: the tokens streamed outweighed what the mean expected of the remaining prompts.
    (60.0, 30.0, 20.0),
    (80.0, 0.0, 0.0),
], ids=["t10", "t30", "t60-one-left", "t80-done"])
def test_eta_through_a_runs_tail(at: float, eta_s: float, left: float) -> None:
    clock = Clock()
    stats = RunStats(total=4, clock=clock, started=0.0, max_tokens=4000)
    stats.track(1)
    stats.seed_lengths([100] * 10 + [1000] * 10)
    attempts = {name: stats.begin_attempt() for name in FINAL}
    play_tail(at - 1, stats, clock, attempts)
    snap = stats.snapshot([play_tail(at, stats, clock, attempts)])
    assert snap.eta_s == pytest.approx(eta_s)
    assert (snap.eta_s > 0) == (left > 0), "ETA 0 only when nothing is left"
    assert snap.gpu_hours_projected is None and snap.gpus is None  # no --gpus, no server said


def test_a_resume_has_an_eta_from_its_first_tokens() -> None:
    """11 prompts left, resumed: nothing finishes for a while, but the records already done give the lengths."""
    clock = Clock()
    stats = RunStats(total=11, clock=clock, started=0.0)
    stats.track(1)
    stats.seed_lengths([100] * 10 + [1000] * 10)
    for _ in range(11):
        stats.begin_attempt()
    live = EndpointLive(url="http://a", state="up", in_flight=11, max_in_flight=16, streamed_tokens=0)
    assert stats.snapshot([live]).eta_s is None  # no token yet: no pace, and no guess
    for second in range(1, 6):
        clock.now = float(second)
        snap = stats.snapshot([EndpointLive(url="http://a", state="up", in_flight=11, max_in_flight=16,
                                            streamed_tokens=11 * 20 * second)])
    # Each has 100 tokens at t=5: past the ten 100s (in their bin) only the 1000s remain, 900 at 20 tok/s.
    assert snap.eta_s == pytest.approx(900.0 / 20, rel=0.01)


def test_gpu_hours_from_the_servers_count_or_gpus() -> None:
    clock = Clock()
    stats = RunStats(total=4, clock=clock, started=0.0)
    stats.track(2)
    fleet = [EndpointLive(url=u, state="up", in_flight=0, max_in_flight=8, gpus=g) for u, g in (("a", 4), ("b", 4))]
    clock.now = 3600.0
    snap = stats.snapshot(fleet)
    assert (snap.gpus, snap.gpus_source, snap.gpu_hours_so_far) == (8, "servers", pytest.approx(8.0))
    one_silent = [fleet[0], EndpointLive(url="c", state="up", in_flight=0, max_in_flight=8)]
    assert stats.snapshot(one_silent).gpus is None  # a partial count would understate: unknown instead
    stats.gpus = 7
    assert (stats.snapshot(one_silent).gpus, stats.snapshot(one_silent).gpus_source) == (7, "--gpus")


def test_status_of_a_stopped_run_starts_from_its_records(tmp_path: Path) -> None:
    """11 prompts left after a stop: about the longest of 11 replies at one request's pace, not 11 divided by
    the records per second."""
    now = time.time()
    out = tmp_path / "out"
    (out / "segments").mkdir(parents=True)
    lengths = [100] * 60 + [1000] * 40
    # 100 records over the last 100 s: a 20-slot fleet at 20 tok/s each (decode time = length / 20).
    records = [{"id": f"p{i}", "usage": {"completion_tokens": n, "prompt_tokens": 10}, "created": now - 100 + i,
                "timings": {"queued_s": 0.5, "ttft_s": 0.5, "total_s": n / 20 + 1.0}} for i, n in enumerate(lengths)]
    (out / "segments" / "h-0of1-20260101T000000-abcd-000001.jsonl").write_bytes(
        b"".join(orjson.dumps(r) + b"\n" for r in records))
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"p{i}", "messages": []}) + b"\n" for i in range(111)))
    status = read_local(out, [prompts], now=now)
    assert status.remaining == 11 and status.pace == pytest.approx(20.0)
    rate = sum(lengths) / 99.0  # tokens over the span of the window (first to last record)
    k = min(11, round(rate / 20.0))
    longest = 100 * 0.6**k + 1000 * (1 - 0.6**k)
    expected = 11 * 460.0 / min(rate, k * 20.0) + (longest - 460.0) / 20.0
    assert status.eta_s == pytest.approx(expected, rel=0.01)
    assert status.eta_s > 40.0, "at least one long reply's time, not 11 / (1 record a second)"
