"""Real SGLang 0.5.23 (CPU) serving Qwen3.6's own chat template with `--tool-call-parser qwen3_coder
--reasoning-parser qwen3`, as Qwen3.6-27B is served, and the client and the export against it.

The model is the tiny scripted one that writes what Qwen3.6 writes (tests/engines/tiny_qwen36.py): its
tokenizer carries the real Qwen3.6 template (the replica tests/test_sim_qwen36.py holds byte for byte to
the registry file), and every reply is reasoning, `</think>`, an answer and one XML tool call, so that
SGLang's XML parser has a real call to parse (a random model never writes one). What is proved, on two
`--token-ids on` runs (thinking on and off, half the prompts with the weather tool):
- the records' reasoning, content and tool calls are what SGLang's own parsers make of the reply's text,
  streamed as the server streamed it (tests/engines/sglang_parsers.py); the call is parsed out of the XML;
- the prompt ids are SGLang's own rendering of the request (`/v1/tokenize`), and the project's render of
  the record (prompt and reply, the tools as SGLang hands them to the template) is the server's ids;
- the exact-id formats (parquet, specforge-tokenized, speculators) carry the server's ids, read back as
  the trainers read them, and the specforge conversation rows re-render, as SpecForge parses them, to the
  same ids with the loss on every generated token; with thinking off SpecForge would supervise the empty
  think block the server put in the prompt (docs/export.md), and that export is refused.

One server for the module (about 3 GB, minutes to start on a loaded CPU), few prompts, short replies.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from client.export.render import ChatTokenizer, render_record, sglang_tool
from tests.conftest import REPO, make_prompts, read_failures, read_results, run_client
from tests.engines.conftest_sglang import LOG_DIR
from tests.engines.sglang_server import SGLangQwen36Server
from tests.engines.start_time import server_start
from tests.engines.tiny_models import MODEL_NAMES, build_tiny_models, load_script
from tests.engines.vllm_server import VLLMServerError
from tests.real_templates import QWEN36, template_text
from tests.test_sim_qwen36_parsers import Parsers
from tests.trainer_readers import read_specforge_conversations, read_specforge_tokenized, read_speculators

pytestmark = [pytest.mark.sglang_server, pytest.mark.slow]

IDS = ("prompt_token_ids", "completion_token_ids")
PROMPTS = 6  # per run; every other one with the weather tool
MAX_LENGTH = 4096  # the trainers' window, above every row here


@pytest.fixture(scope="module")
def model_dir(sglang_venv_python: Path) -> Path:
    try:
        with server_start():
            return build_tiny_models(sglang_venv_python, variants=("qwen36",))["qwen36"]
    except VLLMServerError as exc:
        message = str(exc)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="module")
def script(model_dir: Path) -> dict[str, Any]:
    return load_script(model_dir)


@pytest.fixture(scope="module")
def server(sglang_venv_python: Path, model_dir: Path) -> Iterator[SGLangQwen36Server]:
    name = MODEL_NAMES["qwen36"]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    srv = SGLangQwen36Server(model_dir, name, python=sglang_venv_python, log_path=LOG_DIR / f"{name}.log")
    srv.log_path.unlink(missing_ok=True)
    try:
        with server_start():  # its own bound while it lives, not the first test's time limit
            srv.spawn()
            srv.wait_ready()  # raises with the log's tail
    except VLLMServerError as exc:
        srv.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def parsers(sglang_venv_python: Path) -> Iterator[Parsers]:
    driver = Parsers(sglang_venv_python)
    try:
        yield driver
    finally:
        driver.close()


@pytest.fixture(scope="module")
def runs(server: SGLangQwen36Server, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, Any]]:
    """Two `--token-ids on` runs, thinking on and off: {thinking: {"out", "records", "failures", "result"}}."""
    tmp = tmp_path_factory.mktemp("sglang-qwen36")
    found: dict[bool, dict[str, Any]] = {}
    for thinking in (True, False):
        name = "on" if thinking else "off"
        prompts = make_prompts(tmp / f"prompts-{name}.jsonl", PROMPTS, with_tools_every=2, prefix=name)
        out = tmp / f"out-{name}"
        result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                             "--token-ids", "on", "--max-tokens", "64", "--max-in-flight", "4",
                             *(() if thinking else ("--no-thinking",))], timeout=300)
        found[thinking] = {"out": out, "records": read_results(out), "failures": read_failures(out),
                           "result": result}
    return found


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> ChatTokenizer:
    return ChatTokenizer.load(model_dir)


def _increments(tokenizer: ChatTokenizer, ids: list[int]) -> list[str]:
    """The reply's text as SGLang's detokenizer hands it to the parsers: token by token, special tokens
    skipped (every piece of the script is whole characters)."""
    out, sent = [], ""
    for n in range(1, len(ids) + 1):
        text = tokenizer.tokenizer.decode(ids[:n], skip_special_tokens=True)
        out.append(text[len(sent):])
        sent = text
    return out


def _tokenize(server: SGLangQwen36Server, record: dict[str, Any], thinking: bool) -> list[int]:
    """SGLang's own rendering of the record's request (`POST /v1/tokenize` with messages)."""
    body: dict[str, Any] = {"model": server.model_name, "messages": record["messages"],
                            "chat_template_kwargs": {"enable_thinking": thinking}}
    if record.get("tools"):
        body["tools"] = record["tools"]
    answer = httpx.post(f"{server.url}/v1/tokenize", json=body, timeout=60).json()
    tokens: list[int] = answer["tokens"]
    return tokens


def test_the_server_serves_qwen36s_own_template_and_parsers(server: SGLangQwen36Server, model_dir: Path) -> None:
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == template_text(QWEN36), "the registry file's text, byte for byte"
    info = httpx.get(f"{server.url}/server_info", timeout=60).json()
    assert (info["tool_call_parser"], info["reasoning_parser"]) == ("qwen3_coder", "qwen3")


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_a_run_records_what_sglangs_parsers_make_of_the_reply(runs: dict[bool, dict[str, Any]], thinking: bool,
                                                              script: dict[str, Any], tokenizer: ChatTokenizer,
                                                              parsers: Parsers) -> None:
    run = runs[thinking]
    assert run["result"].code == 0, run["result"].stderr[-3000:]
    assert not run["failures"]
    records = run["records"]
    prefix = "on" if thinking else "off"
    assert sorted(r["id"] for r in records) == [f"{prefix}{i:06d}" for i in range(PROMPTS)], "every id once"
    assert "which streaming loses the reply text" not in run["result"].stderr, "qwen3_coder keeps the text"
    expected_ids = script["completion_token_ids"] if thinking else script["after_think_token_ids"]
    for record in records:
        assert record["completion_token_ids"] == expected_ids, record["id"]
        assert record["usage"]["completion_tokens"] == len(expected_ids)
        parsed = parsers.parse({"text": _increments(tokenizer, record["completion_token_ids"]),
                                "tools": record.get("tools") or [], "thinking": thinking})["streamed"]
        assert (record.get("reasoning") or None) == parsed["reasoning"], record["id"]
        assert (record.get("content") or "") == parsed["content"], record["id"]
        calls = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                 for c in record.get("tool_calls") or []]
        assert calls == parsed["calls"], record["id"]
        if thinking:
            assert record["reasoning"] == script["reasoning"], record["id"]
        if record.get("tools"):  # the XML call, parsed by SGLang's qwen3_coder detector
            assert [(c["name"], json.loads(c["arguments"])) for c in calls] \
                == [(script["tool_name"], script["tool_arguments"])]
            assert record["finish_reason"] == "tool_calls"
            assert script["tool_call_text"] not in record["content"]
        else:  # no tools in the request: the tool parser is off and the call stays text
            assert calls == [] and record["finish_reason"] == "stop"
            assert record["content"].strip().endswith(script["tool_call_text"]), record["id"]


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_the_records_render_back_to_the_servers_ids(runs: dict[bool, dict[str, Any]], thinking: bool,
                                                    server: SGLangQwen36Server, tokenizer: ChatTokenizer) -> None:
    """The prompt ids are SGLang's own rendering of the request, and the project's render of the record
    with Qwen3.6's template (prompt, and the reply from its parsed reasoning, content and call) is the
    server's ids, id for id."""
    for record in runs[thinking]["records"]:
        assert record["prompt_token_ids"] == _tokenize(server, record, thinking), record["id"]
        assert record["usage"]["prompt_tokens"] == len(record["prompt_token_ids"])
        as_served = {k: v for k, v in record.items() if k not in IDS}
        if record.get("tools"):  # SGLang hands the template each tool as its pydantic model dumps it
            as_served["tools"] = [sglang_tool(t) for t in record["tools"]]
        rendered = render_record(as_served, tokenizer)
        assert not rendered.exact
        assert rendered.prompt == record["prompt_token_ids"], record["id"]
        assert rendered.completion == record["completion_token_ids"], record["id"]


def _export(run: Path, model_dir: Path, out: Path, fmt: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "client.export", str(run), "--out",
                           str(out), "--tokenizer", str(model_dir), "--format", fmt, "--require-exact-ids", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def _expected(records: list[dict[str, Any]]) -> list[tuple[list[int], list[int]]]:
    """Each record's server ids and the loss mask a trainer must get: 0 on the prompt, 1 on the reply."""
    return sorted((r["prompt_token_ids"] + r["completion_token_ids"],
                   [0] * len(r["prompt_token_ids"]) + [1] * len(r["completion_token_ids"])) for r in records)


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
def test_every_format_trains_on_the_servers_ids(runs: dict[bool, dict[str, Any]], thinking: bool,
                                                model_dir: Path, tokenizer: ChatTokenizer, tmp_path: Path) -> None:
    records = runs[thinking]["records"]
    run = runs[thinking]["out"]
    expected = _expected(records)
    assert len(expected) == PROMPTS

    # With thinking off the server put the empty think block in the prompt, and SpecForge's `qwen3.5` spans
    # (from the assistant header on) supervise it: the check, a report for the exact-id formats, says so of
    # every row (docs/export.md, the specforge format).
    matched = PROMPTS if thinking else 0
    parquet = tmp_path / "train.parquet"
    done = _export(run, model_dir, parquet, "parquet", "--template-check", "all")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"({PROMPTS} from server token ids, 0 re-rendered;" in done.stderr
    assert f"template check: {matched} of {PROMPTS} row(s) with server ids" in done.stderr, done.stderr[-3000:]
    if not thinking:
        assert done.stderr.count("the trainer supervises a token of the prompt") >= 1, done.stderr[-3000:]
    rows = pq.read_table(parquet).to_pylist()
    assert sorted((row["input_ids"], row["loss_mask"]) for row in rows) == expected

    tokenized = tmp_path / "train-tokenized.jsonl"
    done = _export(run, model_dir, tokenized, "specforge-tokenized")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_specforge_tokenized(tokenized, MAX_LENGTH)
    assert sorted((row["input_ids"], row["loss_mask"]) for row in rows) == expected

    speculators = tmp_path / "train-speculators.jsonl"
    done = _export(run, model_dir, speculators, "speculators")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_speculators(speculators, MAX_LENGTH)
    assert sorted((list(row["input_ids"]), list(row["loss_mask"])) for row in rows) == expected

    # SpecForge's conversation rows: the trainer re-renders them with the template. The export's check
    # (on by default for this format) finds every row trained exactly, and SpecForge's own parsing of the
    # file gives the server's ids with the loss on every generated token; past them only the newline the
    # template writes after <|im_end|> (supervised in every SpecForge row, as the model ended its turn).
    conversations = tmp_path / "train-specforge.jsonl"
    done = _export(run, model_dir, conversations, "specforge")
    if not thinking:  # every row would be trained on a token the model did not generate: refused
        assert done.returncode == 3, done.stderr[-3000:]
        assert f"template check: 0 of {PROMPTS} row(s) with server ids" in done.stderr, done.stderr[-3000:]
        assert not conversations.exists()
        return
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"template check: {PROMPTS} of {PROMPTS} row(s) with server ids" in done.stderr, done.stderr[-3000:]
    rows = read_specforge_conversations(conversations, tokenizer, MAX_LENGTH)
    trained = sorted((list(row["input_ids"]), list(row["loss_mask"])) for row in rows)
    assert len(trained) == PROMPTS
    for (ids, mask), (server_ids, server_mask) in zip(trained, expected, strict=True):
        assert ids[:len(server_ids)] == server_ids
        assert mask[:len(server_ids)] == server_mask
        assert tokenizer.tokenizer.decode(ids[len(server_ids):]) == "\n"
