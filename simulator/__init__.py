"""Simulated SGLang server (`python -m simulator`) and a fleet of them as subprocesses (`SimFleet`).

It answers like SGLang 0.5.23 serving Qwen3.6-27B with the qwen3 reasoning parser and the qwen3_coder
tool parser, with deterministic replies, a GPU-like capacity model and injectable failures, so the client
can be tested end to end on a laptop. Modules: config (settings), request (reading and refusing a chat
request), render (what the chat template is given), tokens (ids, MTP and cache figures), script
(deterministic replies), engine (capacity model), faults, wire (chat JSON), status (load/metrics views),
app (routes), server (sockets), fleet (subprocesses), __main__ (CLI).
"""

from __future__ import annotations

from simulator.config import FaultRates, SimConfig
from simulator.fleet import SimFleet, SimServerSpec

__all__ = ["FaultRates", "SimConfig", "SimFleet", "SimServerSpec"]
