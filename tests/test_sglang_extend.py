"""`client.run --extend` on real SGLang 0.5.23 (CPU, the scripted tiny Qwen3, `--reasoning-parser qwen3
--tool-call-parser qwen`): replies cut by a small `--max-tokens` at several points (inside the reasoning, the
answer and the tool call) and extended to a larger one are, id for id, the replies a run made with the larger
`--max-tokens` in one go, and SGLang's own detokenizer and parsers split them as its chat completions did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import make_prompts, read_results, run_client
from tests.engines.sglang_server import SGLangServer

pytestmark = [pytest.mark.sglang_server, pytest.mark.slow]

WHOLE = 64


def _run(server: SGLangServer, prompts: Path, out: Path, max_tokens: int) -> dict[str, dict[str, Any]]:
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out), "--plain",
                         "--token-ids", "on", "--max-tokens", str(max_tokens), "--max-in-flight", "4"], timeout=300)
    assert result.code == 0, result.stderr
    return {r["id"]: r for r in read_results(out)}


def _calls(record: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in record["tool_calls"]]


def test_a_cut_reply_extended_is_the_reply_made_whole_id_for_id(sglang_scripted: SGLangServer,
                                                               tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "prompts.jsonl", 6, with_tools_every=2)
    whole = _run(sglang_scripted, prompts, tmp_path / "whole", WHOLE)
    assert any(r["tool_calls"] for r in whole.values()) and all(r["finish_reason"] != "length" for r in whole.values())
    lengths = sorted(len(r["completion_token_ids"]) for r in whole.values())
    seen_cut_at: set[str] = set()
    for cut in (3, lengths[0] // 2, lengths[0] - 2):
        narrow = _run(sglang_scripted, prompts, tmp_path / f"narrow-{cut}", cut)
        assert all(r["finish_reason"] == "length" for r in narrow.values())
        out = tmp_path / f"extended-{cut}"
        result = run_client(["--endpoints", sglang_scripted.url, "--extend", str(tmp_path / f"narrow-{cut}"),
                             "--out", str(out), "--plain", "--max-tokens", str(WHOLE)], timeout=300)
        assert result.code == 0, result.stderr
        extended = {r["id"]: r for r in read_results(out)}
        assert extended.keys() == whole.keys()
        for record_id, one_go in whole.items():
            ext = extended[record_id]
            assert ext["completion_token_ids"] == one_go["completion_token_ids"], (cut, record_id)
            assert ext["prompt_token_ids"] == one_go["prompt_token_ids"]
            assert ext["continued"] == [{"attempt": 1, "tokens": cut},
                                        {"attempt": 2, "tokens": len(one_go["completion_token_ids"]) - cut}]
            assert (ext["reasoning"], ext["content"].strip(), _calls(ext), ext["finish_reason"]) == (
                one_go["reasoning"], one_go["content"].strip(), _calls(one_go), one_go["finish_reason"]), cut
            cut_text = narrow[record_id]
            seen_cut_at.add("content" if cut_text["content"] else "reasoning")
            if cut_text["tool_calls"] or "<tool_call>" in cut_text["content"]:
                seen_cut_at.add("call")
    assert {"reasoning", "content"} <= seen_cut_at, seen_cut_at
