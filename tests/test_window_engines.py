"""`--train-window N` on the real engines: each record's max_tokens is N minus the prompt's count, and that
count is the engine's own (it equals the reply's usage.prompt_tokens); a prompt that fills the window is
`fills_window`; the count comes from vLLM's `/tokenize` and SGLang 0.5.23's `/v1/tokenize`. Prompts carry
tools and thinking, so the count must render them as the chat request does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WEATHER_TOOL, read_failures, read_results, run_client
from tests.engines.sglang_server import SGLangServer
from tests.engines.vllm_server import VLLMServer

MAX_TOKENS = 64
WINDOW = 800  # above the short prompts (the tool schema and its template make ~400), below the long one


def _prompts(path: Path) -> Path:
    rows: list[dict[str, Any]] = [
        {"id": "plain", "messages": [{"role": "user", "content": "What is the weather in Paris?"}]},
        {"id": "tools", "messages": [{"role": "user", "content": "What is the weather in Oslo?"}],
         "tools": [WEATHER_TOOL]},
        {"id": "long", "messages": [{"role": "user", "content": " ".join(["weather"] * (WINDOW + 100))}]},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _run_window(url: str, tmp_path: Path, *extra: str) -> None:
    out = tmp_path / "out"
    result = run_client(["--endpoints", url, "--prompts", str(_prompts(tmp_path / "p.jsonl")), "--out", str(out),
                         "--max-tokens", str(MAX_TOKENS), "--train-window", str(WINDOW), *extra], timeout=300)
    assert result.code == 0, result.stderr[-3000:]
    records = {r["id"]: r for r in read_results(out)}
    assert sorted(records) == ["plain", "tools"]
    for record in records.values():
        cut = record["train_window"]
        assert cut["prompt_tokens"] == record["usage"]["prompt_tokens"], record["id"]
        assert cut["max_tokens"] == min(MAX_TOKENS, WINDOW - cut["prompt_tokens"]), record["id"]
    assert records["tools"]["train_window"]["prompt_tokens"] > records["plain"]["train_window"]["prompt_tokens"], \
        "the tool schema is counted"
    assert [(f["id"], f["error_class"]) for f in read_failures(out)] == [("long", "fills_window")]


@pytest.mark.vllm
@pytest.mark.slow
def test_the_window_on_vllm(vllm_scripted: VLLMServer, tmp_path: Path) -> None:
    _run_window(vllm_scripted.url, tmp_path)


@pytest.mark.sglang_server
@pytest.mark.slow
def test_the_window_on_sglang(sglang_scripted: SGLangServer, tmp_path: Path) -> None:
    _run_window(sglang_scripted.url, tmp_path)
