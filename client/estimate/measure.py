"""Result records -> the measurements a projection needs: lengths per stratum and decode spans.

Lengths are `usage.completion_tokens`, split into reasoning, content and tool-call tokens as the audit
does. A decode span runs from the first token to the end of a request; it is rebuilt from the record's
`created` (written when the completion was whole) and its timings: first token = created - total_s +
queued_s + ttft_s. A retried request's timings mix its attempts, so its span is instead its tokens at
the median pace of the others, ending at `created`. Per record it also keeps the prompt tokens and what a
loop stop would save (client.estimate.waste), for the purpose figures. A record whose `created` or
timings are no clock's reading (±1e308, NaN) is refused, named by file and line (exit 2).

On a simulated fleet the calibration hands a `ClockTrace` (client.fleet.sim_clock): every span's start and
end are then read on its own server's modelled clock, so the spans, and every rate over them, are the
modelled GPU's seconds at speed 1 rather than the host's wall clock. A record from a server the trace does
not know has no span (it still counts its tokens).
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from client.core.errors import ConfigError
from client.estimate.waste import REPETITION, loop_saving, record_text
from client.fleet.sim_clock import ClockTrace
from client.results.reader import ReadReport, iter_records
from client.results.rules import token_parts, usage_int


@dataclass
class StratumSample:
    lengths: array[int] = field(default_factory=lambda: array("i"))
    reasoning: float = 0.0
    content: float = 0.0
    tools: float = 0.0
    prompt: float = 0.0
    truncated: int = 0
    # Per record, beside `lengths`, for the purpose figures (client.estimate.purpose):
    prompt_lengths: array[int] = field(default_factory=lambda: array("i"))
    loop_saved: array[int] = field(default_factory=lambda: array("i"))  # tokens a loop stop would save
    looping: array[int] = field(default_factory=lambda: array("b"))  # 1 when the reply loops
    stopped: int = 0  # replies a loop stop ended (finish_reason "repetition")


@dataclass
class Measurements:
    strata: dict[str, StratumSample] = field(default_factory=dict)
    starts: array[float] = field(default_factory=lambda: array("d"))
    ends: array[float] = field(default_factory=lambda: array("d"))
    tokens: array[int] = field(default_factory=lambda: array("i"))
    endpoints: set[str] = field(default_factory=set)
    models: Counter[str] = field(default_factory=Counter)
    max_tokens: Counter[int] = field(default_factory=Counter)
    thinking: Counter[bool] = field(default_factory=Counter)
    records: int = 0
    outside_set: int = 0
    clock: ClockTrace | None = None  # a simulated fleet's modelled clock: spans are read on it
    _retried: list[tuple[float, int]] = field(default_factory=list)

    def add(self, record: dict[str, Any], stratum: str | None, where: str = "a record") -> None:
        if stratum is None:
            self.outside_set += 1
            return
        self.records += 1
        sample = self.strata.get(stratum)
        if sample is None:
            sample = self.strata[stratum] = StratumSample()
        usage = record.get("usage")
        length = usage_int(usage, "completion_tokens") or 0
        sample.lengths.append(length)
        reasoning, content, tools = token_parts(record)
        sample.reasoning += reasoning
        sample.content += content
        sample.tools += tools
        prompt = usage_int(usage, "prompt_tokens") or 0
        sample.prompt += prompt
        finish = record.get("finish_reason")
        sample.truncated += finish == "length"
        sample.prompt_lengths.append(prompt)
        loops, saved = loop_saving(record_text(record), length, finish)
        sample.looping.append(loops)
        sample.loop_saved.append(saved)
        sample.stopped += finish == REPETITION
        self.endpoints.add(str(record.get("endpoint")))
        self.models[str(record.get("model"))] += 1
        sampling = record.get("sampling")
        if isinstance(sampling, dict):
            if isinstance(sampling.get("max_tokens"), int):
                self.max_tokens[sampling["max_tokens"]] += 1
            self.thinking[sampling.get("enable_thinking") is not False] += 1
        self._span(record, length, where)

    def _span(self, record: dict[str, Any], length: int, where: str) -> None:
        created = record.get("created")
        timings = record.get("timings")
        if not isinstance(created, int | float) or not isinstance(timings, dict):
            return
        total, queued, ttft = timings.get("total_s"), timings.get("queued_s"), timings.get("ttft_s")
        _check_times(where, created, total, queued, ttft)
        if record.get("attempts", 1) != 1 or not isinstance(total, int | float):
            end_at = float(created) if self.clock is None else self.clock.at(str(record.get("endpoint")), created)
            if end_at is not None:
                self._retried.append((end_at, length))
            return
        start = min(created - total + (queued or 0.0) + (ttft or 0.0), created)
        end = float(created)
        if self.clock is not None:
            url = str(record.get("endpoint"))
            start_on, end_on = self.clock.at(url, start), self.clock.at(url, end)
            if start_on is None or end_on is None:
                return
            start, end = start_on, end_on
        self.starts.append(start)
        self.ends.append(end)
        self.tokens.append(length)

    def slow_down(self, factor: float) -> None:
        """Stretch every span's times by `factor`: results from servers that ran `factor` times faster than
        the hardware they stand for (a simulated fleet's --speed) are read in that hardware's time."""
        self.starts = array("d", (t * factor for t in self.starts))
        self.ends = array("d", (t * factor for t in self.ends))

    def close_spans(self) -> None:
        """Give retried requests a span at the median pace of the clean ones."""
        paces = [n / (e - s) for s, e, n in zip(self.starts, self.ends, self.tokens, strict=True) if e > s and n]
        pace = statistics.median(paces) if paces else 0.0
        for created, length in self._retried:
            self.starts.append(created - length / pace if pace > 0 else created)
            self.ends.append(created)
            self.tokens.append(length)
        self._retried.clear()


# A `created` outside these seconds since 1970 (up to the year 2286) is no clock's reading, and a duration past a
# year is none of a request's: such a record would make every span, and the projection, nonsense (±1e308 made
# NaN, then a traceback).
_CREATED = (0.0, 1e10)
_LONGEST_S = 365 * 86400.0


def _check_times(where: str, created: float, *durations: object) -> None:
    if not (math.isfinite(created) and _CREATED[0] <= created < _CREATED[1]):
        raise ConfigError(f"{where}: created {created!r} is not a time (seconds since 1970, as client.run writes "
                          "it): these results cannot be timed; leave the damaged record out of the results")
    for value in durations:
        if isinstance(value, int | float) and not (math.isfinite(value) and 0 <= value <= _LONGEST_S):
            raise ConfigError(f"{where}: a timing of {value!r} s is not a request's duration: these results cannot "
                              "be timed; leave the damaged record out of the results")


def measure(location: str, stratum_for: Callable[[dict[str, Any]], str | None],
            s3_endpoint_url: str | None = None, clock: ClockTrace | None = None) -> tuple[Measurements, ReadReport]:
    """Read every result of `location`; `stratum_for` names a record's stratum (None: not in the set). With
    `clock`, the spans are read on that modelled clock."""
    found = Measurements(clock=clock)
    report = ReadReport()
    for item, record in iter_records(location, report, s3_endpoint_url=s3_endpoint_url):
        found.add(record, stratum_for(record), f"{item.where}:{item.line}")
    found.close_spans()
    return found, report
