"""SGLang's extension object, `sglext`, as a streaming chat completion carries it (SGLang 0.5.23).

Asked for with `return_input_ids_in_sglext` / `return_output_ids_in_sglext` (and the detail fields), SGLang
streams, after the finish chunk and before the usage chunk, one chunk with `choices: []` and
`sglext: {"input_ids": [...], "output_ids": [[...]], "spec_tokens_details": {...},
"cached_tokens_details": {...}}` (`serving_chat.py`, `_generate_chat_stream`). So the exact ids come without
giving up streaming. (`return_token_ids` is vLLM's field; SGLang refuses it on a streaming request with
HTTP 400, and without streaming answers `choices[0].response_token_ids`.) With the header
`x-sglext-ids-framed: 1` the ids come as a named `event: sglext_ids` instead; the client does not send it,
and the SSE parser would read that event the same way.

This module owns the field names and turns the object into the record's parts: ids, `spec` (the request's
MTP accept length, accept rate, verify steps and draft counts) and the prefix-cache hit. It is SGLang's reply
dialect (`REPLY`, client.wire.dialect): the metric families its `/metrics` reports load in are here too.
"""

from __future__ import annotations

from typing import Any

from client.core.records import Spec, Usage
from client.wire.dialect import MetricNames, ReplyDialect, TrailerIds, int_list

# What an SGLang request carries to get its ids and its figures. The detail fields change nothing in the
# reply, so they are not part of the recorded sampling.
SGLANG_ID_FIELDS = ("return_input_ids_in_sglext", "return_output_ids_in_sglext")
SGLANG_DETAIL_FIELDS = ("return_spec_tokens_details", "return_cached_tokens_details")
SGLANG_REQUEST_FIELDS: dict[str, bool] = dict.fromkeys((*SGLANG_ID_FIELDS, *SGLANG_DETAIL_FIELDS), True)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def output_ids(sglext: dict[str, Any]) -> list[int] | None:
    """The first choice's generated ids: `output_ids` holds one list per choice (n=1 here)."""
    found = sglext.get("output_ids")
    if isinstance(found, list) and found and isinstance(found[0], list):
        return int_list(found[0])
    return None


def spec_from(details: object) -> Spec | None:
    """`sglext.spec_tokens_details` (one object for n=1) -> the record's `spec` object."""
    if isinstance(details, list):
        details = details[0] if details else None
    if not isinstance(details, dict):
        return None
    spec: Spec = {}
    for ours, theirs in (("accept_length", "spec_accept_length"), ("accept_rate", "spec_accept_rate")):
        value = details.get(theirs)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            spec[ours] = float(value)  # type: ignore[literal-required]
    for ours, theirs in (("verify_ct", "spec_verify_ct"), ("draft_tokens", "spec_num_proposed_drafts"),
                         ("accepted_tokens", "spec_num_correct_drafts")):
        number = _int(details.get(theirs))
        if number is not None:
            spec[ours] = number  # type: ignore[literal-required]
    histogram = int_list(details.get("spec_correct_drafts_histogram"))
    if histogram:
        spec["accepted_histogram"] = histogram
    return spec or None


def fill_cached_tokens(usage: Usage, sglext: dict[str, Any]) -> None:
    """Fill `usage.prompt_tokens_details.cached_tokens` from the cache tiers when only those came."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        return
    tiers = sglext.get("cached_tokens_details")
    if isinstance(tiers, dict):
        total = sum(_int(tiers.get(tier)) or 0 for tier in ("device", "host", "storage"))
        usage["prompt_tokens_details"] = {**(details if isinstance(details, dict) else {}), "cached_tokens": total}


def read_ids(sglext: dict[str, Any]) -> TrailerIds:
    """The ids one `sglext` object carries (with the framed ids event, they come in a chunk of their own)."""
    return TrailerIds(prompt=int_list(sglext.get("input_ids")), completion=output_ids(sglext))


def figures(sglext: dict[str, Any], usage: Usage) -> Spec | None:
    """At the reply's end: the cache hit into `usage` when only the tiers came, and the MTP figures."""
    fill_cached_tokens(usage, sglext)
    return spec_from(sglext.get("spec_tokens_details"))


# SGLang's Prometheus families (metrics/collector.py, SchedulerMetricsCollector); the accept length is a
# gauge of the mean accepted length, one sample per rank.
METRICS = MetricNames(running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs",
                      generated="sglang:generation_tokens_total", usage=("sglang:token_usage",),
                      throughput="sglang:gen_throughput", accept_length="sglang:spec_accept_length")

REPLY = ReplyDialect(trailer="sglext", read_trailer=read_ids, figures=figures, metrics=METRICS)
