"""Table-driven tests of the dispatch policy (pure function) and the load-document parsers."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest

from client.core.errors import LoadFormatError
from client.fleet.balancer import EndpointLoad, estimated_load, pick_endpoint, target_depth
from client.fleet.kinds import metric_families
from client.wire.loads import ServerLoad, parse_get_load, parse_metrics, parse_v1_loads

LoadParser = Callable[[bytes], ServerLoad]


def load(in_flight: int, capacity: int = 4, available: bool = True, server: int | None = None,
         max_in_flight: int = 1000) -> EndpointLoad:
    return EndpointLoad(available=available, in_flight=in_flight, capacity=capacity, max_in_flight=max_in_flight,
                        server_outstanding=server)


@pytest.mark.parametrize(("loads", "avoid", "expected"), [
    ([load(0), load(0)], None, 0),
    ([load(2), load(1)], None, 1),
    ([load(6), load(6)], None, None),  # target depth of capacity 4 is 4 + 2
    ([load(5), load(6)], None, 0),
    ([load(0, available=False), load(3)], None, 1),
    ([load(0, available=False), load(6)], None, None),
    ([load(2, capacity=8), load(1, capacity=2)], None, 0),  # relative load 0.25 < 0.5
    ([load(0, capacity=1), load(0, capacity=4)], None, 1),  # tie goes to the larger
    ([load(0), load(1)], 0, 1),
    ([load(0), load(6)], 0, 0),
    ([load(1, server=5), load(2)], None, 1),  # the server sees other clients' work too
    ([load(3, server=0), load(2, server=0)], None, 1),  # never less than what we have in flight
    ([load(1, max_in_flight=1), load(3)], None, 1),  # the client-side cap holds
    ([], None, None),
], ids=["idle-tie", "least", "all-full", "below-target", "down-skipped", "down-and-full", "relative",
        "tie-larger", "avoid", "avoid-only-room", "server-view", "own-floor", "client-cap", "none"])
def test_pick_endpoint(loads: list[EndpointLoad], avoid: int | None, expected: int | None) -> None:
    assert pick_endpoint(loads, avoid) == expected


@pytest.mark.parametrize(("capacity", "depth"), [(1, 3), (4, 6), (16, 18), (64, 72), (256, 288)])
def test_target_depth(capacity: int, depth: int) -> None:
    assert target_depth(capacity) == depth


def test_estimated_load() -> None:
    assert estimated_load(load(3)) == 3
    assert estimated_load(load(3, server=7)) == 7
    assert estimated_load(load(3, server=-2)) == 3


def test_filling_a_heterogeneous_fleet_follows_capacity() -> None:
    capacities = [1, 1, 2, 4]
    in_flight = [0, 0, 0, 0]
    while True:
        loads = [load(n, capacity=c) for n, c in zip(in_flight, capacities, strict=True)]
        index = pick_endpoint(loads)
        if index is None:
            break
        in_flight[index] += 1
    assert in_flight == [target_depth(c) for c in capacities]


SGLANG_LOADS = b"""{"timestamp": "2026-11-29T00:00:00", "version": "0.5.23", "accelerator": "B200",
 "num_accelerators": 2, "loads": [
  {"dp_rank": 0, "num_running_reqs": 60, "num_waiting_reqs": 4, "num_used_tokens": 1, "num_total_tokens": 2,
   "max_total_num_tokens": 9, "token_usage": 0.5, "gen_throughput": 1500.0, "utilization": 0.9,
   "max_running_requests": 64},
  {"dp_rank": 1, "num_running_reqs": 10, "num_waiting_reqs": 0, "token_usage": 0.1, "gen_throughput": 300.5,
   "max_running_requests": 64}]}"""

# /metrics read with the metric names of every kind the client knows, as the dispatcher reads it.
known_metrics = partial(parse_metrics, families=metric_families())

SGLANG_METRICS = b"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",dp_rank="0"} 12.0
sglang:num_running_reqs{model_name="m",dp_rank="1"} 3.0
sglang:num_queue_reqs{model_name="m",dp_rank="0"} 5.0
sglang:generation_tokens_total{model_name="m"} 1.5e+06
"""

SGLANG_MTP_METRICS = SGLANG_METRICS + b"""sglang:token_usage{model_name="m",dp_rank="0"} 0.25
sglang:token_usage{model_name="m",dp_rank="1"} 0.75
sglang:gen_throughput{model_name="m",dp_rank="0"} 800.0
sglang:gen_throughput{model_name="m",dp_rank="1"} 700.0
sglang:spec_accept_length{model_name="m",dp_rank="0"} 3.0
sglang:spec_accept_length{model_name="m",dp_rank="1"} 2.0
"""

SGLANG_MTP_LOADS = b"""{"loads": [
  {"dp_rank": 0, "num_running_reqs": 1, "speculative": {"accept_length": 3.5, "accept_rate": 0.8}},
  {"dp_rank": 1, "num_running_reqs": 2, "speculative": {"accept_length": 2.5, "accept_rate": 0.5}}]}"""

VLLM_METRICS = b"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 4.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 9.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 321.0
"""


@pytest.mark.parametrize(("parser", "body", "expected"), [
    (parse_v1_loads, SGLANG_LOADS, ServerLoad(70, 4, 128, 0.5, 1800.5)),
    (parse_v1_loads, b'{"loads": [{"num_running_reqs": 2}]}', ServerLoad(2, 0, None)),
    (parse_get_load, b'[{"dp_rank": 0, "num_reqs": 9, "num_waiting_reqs": 3}, {"num_reqs": 1}]',
     ServerLoad(7, 3)),
    (known_metrics, SGLANG_METRICS, ServerLoad(15, 5, generation_tokens_total=1.5e6)),
    (known_metrics, VLLM_METRICS, ServerLoad(4, 9, generation_tokens_total=321.0)),
    (known_metrics, VLLM_METRICS + b'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.4\n',
     ServerLoad(4, 9, generation_tokens_total=321.0, token_usage=0.4)),
    (known_metrics, SGLANG_MTP_METRICS,
     ServerLoad(15, 5, generation_tokens_total=1.5e6, token_usage=0.75, gen_throughput=1500.0, accept_length=2.5)),
    (parse_v1_loads, SGLANG_MTP_LOADS, ServerLoad(3, 0, accept_length=3.0)),
], ids=["v1-loads-dp2", "v1-loads-minimal", "get-load", "sglang-metrics", "vllm-metrics", "vllm-kv-cache",
        "sglang-metrics-mtp", "v1-loads-mtp"])
def test_load_parsers(parser: LoadParser, body: bytes, expected: ServerLoad) -> None:
    assert parser(body) == expected


@pytest.mark.parametrize(("parser", "body"), [
    (parse_v1_loads, b"not json"),
    (parse_v1_loads, b'{"loads": []}'),
    (parse_v1_loads, b'{"loads": [{"num_waiting_reqs": 1}]}'),
    (parse_get_load, b'[{"x": 1}]'),
    (known_metrics, b"# nothing here\nother_metric 1\n"),
])
def test_load_parsers_reject_bad_documents(parser: LoadParser, body: bytes) -> None:
    with pytest.raises(LoadFormatError):
        parser(body)
