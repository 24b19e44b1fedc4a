"""`--train-window N`: each request's max_tokens is N minus the prompt's exact token count as the server
counts it (its tokenize route, with the request's tools and thinking), never above --max-tokens; a prompt
that alone fills N is `fills_window`, counted apart and left out by later runs; a reply cut at the window
is not damage to the audit; the window is part of run.json. On the simulator here; on real vLLM and real
SGLang in tests/test_window_engines.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.payload import FieldPolicy, RequestShape, SamplingSettings
from client.core.records import Prompt
from client.engine.retry import WindowCut
from tests.conftest import make_prompts, read_failures, read_results, run_client

MAX_TOKENS = 400


def _check_window(records: list[dict[str, Any]], window: int) -> None:
    """Every record's max_tokens is the window's room, measured with the server's own prompt count."""
    for record in records:
        cut = record["train_window"]
        assert cut["size"] == window
        assert cut["prompt_tokens"] == record["usage"]["prompt_tokens"], record["id"]
        assert cut["max_tokens"] == min(MAX_TOKENS, window - cut["prompt_tokens"]), record["id"]
        assert record["usage"]["completion_tokens"] <= cut["max_tokens"], record["id"]


def _long_prompt_file(path: Path, fill: int) -> Path:
    """Short prompts (some with tools), and two whose text alone runs past `fill` tokens."""
    make_prompts(path, 10)
    words = " ".join(["weather"] * (fill + 50))
    with path.open("a") as handle:
        for i in range(2):
            handle.write(json.dumps({"id": f"long{i}", "messages": [{"role": "user", "content": words}]}) + "\n")
    return path


@pytest.mark.slow
def test_max_tokens_is_the_window_minus_the_prompt_and_a_full_prompt_is_left_out(tmp_path: Path) -> None:
    # Room for a prompt with tools (Qwen3.6's tools block is some 650 of the tiny tokenizer's tokens), but
    # not for the two long prompts.
    window = 900
    prompts = _long_prompt_file(tmp_path / "p.jsonl", window)
    out = tmp_path / "out"
    args = ["--simulate", "2", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out),
            "--max-tokens", str(MAX_TOKENS), "--train-window", str(window), "--sim-arg=--mean-tokens",
            "--sim-arg=350"]
    result = run_client(args)
    assert result.code == 0, result.stderr
    records = read_results(out)
    assert len(records) == 10
    _check_window(records, window)
    assert any(r["train_window"]["max_tokens"] < MAX_TOKENS for r in records), "the window binds somewhere"
    assert sorted((f["id"], f["error_class"]) for f in read_failures(out)) == [("long0", "fills_window"),
                                                                            ("long1", "fills_window")]
    assert "2 prompt(s) alone fill the training window" in result.stderr
    settings = orjson.loads((out / "run.json").read_bytes())["settings"]
    assert settings["train_window"] == window
    audit = _audit(out)
    assert audit["cut_by_train_window"] == sum(r["finish_reason"] == "length"
                                               and r["train_window"]["max_tokens"] < MAX_TOKENS for r in records)
    again = run_client(args)
    assert again.code == 0, again.stderr
    assert "leaving out 2 prompt(s)" in again.stderr
    assert len(read_failures(out)) == 2, "a fills_window prompt is not sent again"


def _audit(out: Path) -> dict[str, Any]:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], capture_output=True,
                          timeout=120, check=False)
    assert proc.returncode in (0, 3), proc.stderr
    return orjson.loads(proc.stdout)  # type: ignore[no-any-return]


def test_a_changed_window_is_a_settings_change(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 4)
    out = tmp_path / "out"
    base = ["--simulate", "1", "--sim-speed", "200", "--prompts", str(prompts), "--out", str(out),
            "--max-tokens", "64"]
    assert run_client([*base, "--train-window", "2000"]).code == 0
    changed = run_client([*base, "--train-window", "1000"])
    assert changed.code == 2, changed.stderr
    assert "train_window" in changed.stderr


def test_a_server_that_cannot_count_is_refused_at_start(tmp_path: Path, servers: Any) -> None:
    server = servers.oddserver("normal")
    prompts = make_prompts(tmp_path / "p.jsonl", 2)
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                         "--max-tokens", "16", "--train-window", "4096"])
    assert result.code == 2, result.stderr
    # The odd server says it is SGLang but has no tokenize route: its 404 stops the run before any prompt.
    assert "did not count the preflight prompt's tokens" in result.stderr and "404" in result.stderr
    assert not read_results(tmp_path / "out")


PROMPT = Prompt(id="p", messages=[{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {
    "name": "f", "parameters": {"type": "object"}}}], meta=None, source="t", line=1)


@pytest.mark.parametrize(("policy", "thinking", "kwargs"), [
    (FieldPolicy.everything(), True, {"enable_thinking": True}),
    (FieldPolicy.everything(), False, {"enable_thinking": False}),
    (FieldPolicy.standard(), True, None),  # no chat_template_kwargs go out, so none are counted with
])
def test_the_count_request_renders_as_the_chat_request(policy: FieldPolicy, thinking: bool,
                                                       kwargs: dict[str, bool] | None) -> None:
    shape = RequestShape("m", SamplingSettings(enable_thinking=thinking), policy)
    request = shape.count_request(PROMPT, PROMPT.messages)
    payload = shape.payload(PROMPT, PROMPT.messages, 0)
    assert request["messages"] == payload["messages"] and request["tools"] == payload["tools"]
    assert request.get("chat_template_kwargs") == kwargs == payload.get("chat_template_kwargs")
    assert "add_generation_prompt" not in request  # rendered as the chat request is, by both engines


@pytest.mark.parametrize(("window", "prompt_tokens", "max_tokens", "room"), [
    (4096, 1000, 8192, 3096),  # the window binds
    (4096, 1000, 2000, 2000),  # --max-tokens binds
    (4096, 4095, 8192, 1),
])
def test_the_room_is_the_window_minus_the_prompt_never_above_max_tokens(window: int, prompt_tokens: int,
                                                                        max_tokens: int, room: int) -> None:
    cut = WindowCut(window, prompt_tokens, min(window - prompt_tokens, max_tokens))
    assert cut.max_tokens == room
    shape = RequestShape("m", SamplingSettings(max_tokens=max_tokens), FieldPolicy.everything())
    assert shape.payload(PROMPT, PROMPT.messages, 0, cut.max_tokens)["max_tokens"] == room
    assert shape.sampling["max_tokens"] == max_tokens, "the recorded sampling keeps the run's cap"


def test_a_server_that_cannot_count_is_counted_here_with_the_tokenizer(tmp_path: Path, servers: Any) -> None:
    """--tokenizer DIR: for a server of no known kind (no tokenize route), the prompt is counted on this host
    with the model's template and tokenizer, and the request's max_tokens is the window minus that count."""
    from client.local.chat_template import ChatTokenizer, prompt_count
    from tests.tokenizer_fixture import tiny_tokenizer_dir

    server = servers.oddserver("normal", extra=("--owned-by", "acme"))
    prompts = make_prompts(tmp_path / "p.jsonl", 4)
    out = tmp_path / "out"
    window = 700
    refused = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                          "--max-tokens", "600", "--train-window", str(window)])
    assert refused.code == 2 and "Pass --tokenizer DIR" in refused.stderr, refused.stderr
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "600", "--train-window", str(window),
                         "--tokenizer", str(tiny_tokenizer_dir())])
    assert result.code == 0, result.stderr
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    sent = {json.loads(r["body"])["messages"][-1]["content"]: json.loads(r["body"])["max_tokens"]
            for r in server.log_records() if r.get("method") == "POST" and r["path"].endswith("/chat/completions")
            and json.loads(r["body"]).get("max_tokens") != 1}
    records = read_results(out)
    assert len(records) == 4
    for record in records:
        count = prompt_count(tok, record["messages"], record.get("tools"), kwargs={"enable_thinking": True})
        assert record["train_window"]["prompt_tokens"] == count
        room = min(600, window - count)
        assert sent[record["messages"][-1]["content"]] == record["train_window"]["max_tokens"] == room


@pytest.mark.parametrize("compat", ["auto", "openai"])
def test_the_tokenizer_rescues_an_sglang_server_without_a_tokenize_route(tmp_path: Path, servers: Any,
                                                                         compat: str) -> None:
    """The odd server says it is SGLang but answers /v1/tokenize with 404: with --tokenizer its prompts are
    counted on this host (before, the run was refused, exit 2, with --compat openai too)."""
    from tests.tokenizer_fixture import tiny_tokenizer_dir

    server = servers.oddserver("normal")
    prompts = make_prompts(tmp_path / "p.jsonl", 3, with_tools_every=0)
    out = tmp_path / "out"
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out), "--compat", compat,
                         "--max-tokens", "600", "--train-window", "300", "--tokenizer", str(tiny_tokenizer_dir())])
    assert result.code == 0, result.stderr[-3000:]
    assert len(read_results(out)) == 3
    if compat == "auto":
        assert "answers HTTP 404; its prompts are counted on this host with --tokenizer" in result.stderr
    for record in read_results(out):
        cut = record["train_window"]
        assert cut["prompt_tokens"] > 0 and cut["max_tokens"] == 300 - cut["prompt_tokens"]
