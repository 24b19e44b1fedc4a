"""The start-up warns when an SGLang server's tool-call parser loses reply text while streaming.

SGLang 0.5.23's `qwen` parser (Qwen25Detector) drops the text that arrives in the same stream increment as
"<tool_call>"; the client always streams, so a run with tools on such a server can record `content` that
ends early. The warning comes from the server's own `/server_info` (`tool_call_parser`), before any
prompt is sent, and only when the prompts carry tools. The servers are simulated SGLang servers, whose
`/server_info` has the field as SGLang's does (real SGLang: tests/test_client_sglang.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import make_prompts, run_client

WARNING = "runs --tool-call-parser qwen, which streaming loses the reply text"


@pytest.mark.parametrize(("parser", "tools_every", "warned"), [
    ("qwen", 2, True),
    ("qwen3_coder", 2, False),
    ("qwen", 0, False),  # no tools in the prompts: no tool-call parsing, nothing lost
])
def test_the_start_up_names_a_parser_that_loses_text(parser: str, tools_every: int, warned: bool,
                                                     fleet_factory: Any, tmp_path: Path) -> None:
    fleet = fleet_factory([SimServerSpec(speed=50.0, extra_args=("--tool-call-parser", parser,
                                                                 "--mean-tokens", "20"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 4, with_tools_every=tools_every)
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert result.code == 0, result.stderr[-3000:]
    assert (f"{fleet.urls[0]} {WARNING}" in result.stderr) is warned, result.stderr[-3000:]
    if warned:
        assert "--tool-call-parser qwen3_coder, which keeps it" in result.stderr
