"""`client.run --continue-replies` on real SGLang 0.5.23 (CPU, the scripted tiny Qwen3) started with
`--incremental-streaming-output`: the replies made on `/generate` from the server's own rendering of each
prompt (`/v1/tokenize`) and split by its own parsers are the chat completions' replies, id for id and field for
field (reasoning, answer, tool call), and the server refuses nothing of the path at start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import make_prompts, read_results, run_client
from tests.engines.conftest_sglang import LOG_DIR
from tests.engines.sglang_server import SGLangServer, SGLangServerError
from tests.engines.start_time import server_start
from tests.engines.tiny_models import MODEL_NAMES

pytestmark = [pytest.mark.sglang_server, pytest.mark.slow]


@pytest.fixture(scope="module")
def incremental(sglang_venv_python: Path, sglang_model_dirs: dict[str, Path]) -> Iterator[SGLangServer]:
    name = MODEL_NAMES["scripted"]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    server = SGLangServer(sglang_model_dirs["scripted"], name, python=sglang_venv_python,
                          extra_args=["--incremental-streaming-output"], log_path=LOG_DIR / f"{name}-incremental.log")
    server.log_path.unlink(missing_ok=True)
    try:
        with server_start():
            server.spawn()
            server.wait_ready()
    except SGLangServerError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


def _run(server: SGLangServer, prompts: Path, out: Path, *extra: str) -> dict[str, dict[str, Any]]:
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out), "--plain",
                         "--token-ids", "on", "--max-tokens", "64", "--max-in-flight", "4", *extra], timeout=300)
    assert result.code == 0, result.stderr
    return {r["id"]: r for r in read_results(out)}


def _calls(record: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in record["tool_calls"]]


def test_replies_on_generate_are_the_chat_replies(incremental: SGLangServer, tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "prompts.jsonl", 8, with_tools_every=2)
    chat = _run(incremental, prompts, tmp_path / "chat")
    native = _run(incremental, prompts, tmp_path / "native", "--continue-replies")
    assert native.keys() == chat.keys()
    assert any(r["tool_calls"] for r in chat.values()) and any(r["reasoning"] for r in chat.values())
    for record_id, made in chat.items():
        other = native[record_id]
        assert other["prompt_token_ids"] == made["prompt_token_ids"], record_id
        assert other["completion_token_ids"] == made["completion_token_ids"], record_id
        assert (other["reasoning"], other["content"].strip(), _calls(other), other["finish_reason"]) == (
            made["reasoning"], made["content"].strip(), _calls(made), made["finish_reason"]), record_id
        assert "continued" not in other  # one attempt each: nothing broke
