"""The deadline of one non-streaming request, which takes the place of stall detection there.

A non-streaming answer sends no byte until it is whole, so "no byte for --idle-timeout seconds" would
fail every long reply. Instead each request gets `floor + SAFETY * max_tokens / rate`: the time its
`max_tokens` would take at a slow per-request decode rate, plus the idle timeout for queueing and
prefill. The rate is measured from the run's own finished non-streaming requests (completion tokens over
the request's time, so queueing and prefill count against it): the 10th percentile of the last
`WINDOW`, i.e. a slow request, not a typical one, and for one endpoint the slower of its own figure and
the whole fleet's (a slow server among fast ones keeps its own, longer deadline). Until `MIN_SAMPLES`
have finished, a deliberately low `INITIAL_RATE` holds.

The deadline is not fixed when a request starts: client.wire.complete asks for it again every
30 s (its `REVISE_S`), so a request follows the measured rate as it moves (shorter once the first replies
show the real rate, longer when the fleet slows down). A request past its deadline fails as
StreamStalled and is retried; each deadline the same prompt has already missed doubles its next one (at
most `2 ** MAX_DOUBLINGS`), so a reply that is legitimately slower than planned is not killed again and
again, and long replies are not the ones that go missing from the data.

The numbers, for Qwen3.6-27B decoding at 20-80 tok/s per request under load and the default 300 s
--idle-timeout: max_tokens 32768 at a slow 20 tok/s is 27 min of decoding, and its deadline is
300 + 2 * 32768 / 20 = 3577 s (1 h); max_tokens 8192 gets 1119 s (19 min) for 7 min of decoding. A hung
server is found within those times (the idle timeout finds it in 300 s when streaming). Before 8 replies
have finished, 5 tok/s plans 3.7 h for 32768 tokens, and the revision brings requests already in flight
down to the measured figure as soon as there is one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

INITIAL_RATE = 5.0  # tok/s per request: a 27B model at a full batch decodes far faster than this
SAFETY = 2.0
WINDOW = 256
MIN_SAMPLES = 8
QUANTILE = 0.1
MAX_DOUBLINGS = 2  # a prompt's missed deadlines double its next one, up to 4x


def _slow(rates: deque[float] | None) -> float | None:
    """The QUANTILE of `rates`, or None before MIN_SAMPLES."""
    if rates is None or len(rates) < MIN_SAMPLES:
        return None
    ordered = sorted(rates)
    return max(ordered[int(QUANTILE * (len(ordered) - 1))], 1e-3)


class DecodeDeadline:
    """Per-request decode rates of finished requests (fleet-wide and per endpoint) -> the deadline of the next."""

    def __init__(self, *, initial_rate: float = INITIAL_RATE, window: int = WINDOW) -> None:
        self.initial_rate = initial_rate
        self.window = window
        self._rates: deque[float] = deque(maxlen=window)
        self._by_endpoint: dict[Hashable, deque[float]] = {}

    def observe(self, tokens: int, seconds: float, endpoint: Hashable = None) -> None:
        if tokens > 0 and seconds > 0:
            self._rates.append(tokens / seconds)
            if endpoint is not None:
                self._by_endpoint.setdefault(endpoint, deque(maxlen=self.window)).append(tokens / seconds)

    def rate(self, endpoint: Hashable = None) -> float:
        """The slow per-request decode rate (tok/s) the deadline is planned for: the slower of the fleet's
        and the endpoint's own figure, where each is measured."""
        measured = [rate for rate in (_slow(self._rates), _slow(self._by_endpoint.get(endpoint))) if rate is not None]
        return min(measured) if measured else self.initial_rate

    def deadline(self, max_tokens: int, floor_s: float, *, endpoint: Hashable = None, missed: int = 0) -> float:
        """Seconds a request may take; `missed`: deadlines this prompt has already missed."""
        return (floor_s + SAFETY * max_tokens / self.rate(endpoint)) * (1 << min(max(missed, 0), MAX_DOUBLINGS))
