"""Simulated SGLang server (`python -m simulator`) and a fleet of them as subprocesses (`SimFleet`).

It answers like SGLang 0.5.23 serving Qwen3.6-27B with the qwen3 reasoning parser and the qwen3_coder
tool parser, with deterministic replies, a GPU-like capacity model and injectable failures, so the client
can be tested end to end on a laptop. A program of its own: the client reaches it only through
`simulator.api` (SimFleet, the GPU kinds' figures, the tiny tokenizer), and it imports nothing of the client
and of the launcher only the memory plan a GPU kind is played at (pyproject.toml's import contracts).

Modules: config (settings), request (reading and refusing a chat request), tokens (ids, MTP and cache
figures), tokenize (the tokenize route), script and text (deterministic replies), qwen36 (the model played),
engine (capacity model), kinds (GPU kinds), faults, wire (chat JSON), generate (/generate), replies (error
bodies), status (load/metrics views), app (routes), server (sockets), fleet (subprocesses), tiny_tokenizer,
api (the client's face), __main__ (CLI).
"""
