"""The client against real SGLang 0.5.23 on the CPU (two servers of the scripted tiny Qwen3).

What is proved here, on the user's own engine rather than on our picture of it:
- a streaming run with tools and thinking records the exact reasoning, answer and tool call the model was
  scripted to write, with `--token-ids on`: the ids come streamed in SGLang's `sglext` chunk and equal the
  script's, and the prompt ids are what SGLang's own `/v1/tokenize` renders for the same request;
- the preflight and the fields sent (the start-up lines name SGLang's id fields);
- balancing: both servers report their slots in `/v1/loads`, the dispatcher takes them, and a run uses both;
- readiness: a server still warming up answers `/health` 503 and joins when ready;
- a prompt over the context (2048) is `too_long`, counted apart;
- `--token-ids on` through a kill -9 and a resume: every id once, every record with its ids;
- the tokenized export of that run with `--require-exact-ids`: rows are the server's ids.

Every server is a real process on 127.0.0.1 (tests/engines/sglang_server.py). Waits are on observable
events (records written, `/health`), never fixed sleeps; nothing is asserted on wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
import pytest

from client.fleet.dispatcher import Dispatcher
from client.fleet.startup import check_reachable
from client.wire.endpoint import Endpoint
from tests.conftest import (
    REPO,
    WEATHER_TOOL,
    client_command,
    make_prompts,
    read_failures,
    read_results,
    run_client,
    wait_for_records,
    wait_until,
)
from tests.engines.conftest_sglang import LOG_DIR
from tests.engines.sglang_server import CONTEXT_LENGTH, SGLangServer
from tests.engines.start_time import server_start
from tests.engines.vllm_server import STARTUP_TIMEOUT_S

pytestmark = [pytest.mark.sglang_server, pytest.mark.slow]

SLOTS = 8  # --max-running-requests of the test servers (tests/engines/sglang_server.py)
IDS = ("prompt_token_ids", "completion_token_ids")


def _urls(servers: list[SGLangServer]) -> str:
    return ",".join(server.url for server in servers)


def _tokenize(server: SGLangServer, request: dict[str, Any]) -> list[int]:
    """SGLang's own rendering of a chat request (`POST /v1/tokenize` with messages): the prompt's ids."""
    body = {"model": server.model_name, "messages": request["messages"]}
    for key in ("tools", "chat_template_kwargs"):
        if key in request:
            body[key] = request[key]
    answer = httpx.post(f"{server.url}/v1/tokenize", json=body, timeout=60).json()
    tokens: list[int] = answer["tokens"]
    assert answer["count"] == len(tokens)
    return tokens


@pytest.fixture(scope="module")
def ids_run(sglang_pair: list[SGLangServer], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `--token-ids on` run over both servers: 24 prompts, half with the weather tool."""
    tmp = tmp_path_factory.mktemp("sglang-ids")
    prompts = make_prompts(tmp / "prompts.jsonl", 24, with_tools_every=2)
    out = tmp / "out"
    result = run_client(["--endpoints", _urls(sglang_pair), "--prompts", str(prompts), "--out", str(out),
                         "--token-ids", "on", "--max-tokens", "64", "--max-in-flight", "4"], timeout=300)
    return {"result": result, "records": read_results(out), "failures": read_failures(out), "out": out,
            "prompts": prompts, "servers": sglang_pair}


def test_a_streaming_run_records_the_exact_reply_tool_call_and_ids(ids_run: dict[str, Any],
                                                                   sglang_pair: list[SGLangServer],
                                                                   sglang_script: dict[str, Any]) -> None:
    result, records = ids_run["result"], ids_run["records"]
    assert result.code == 0, result.stderr[-3000:]
    assert not ids_run["failures"]
    assert sorted(r["id"] for r in records) == [f"p{i:06d}" for i in range(24)], "every id once"
    assert {r["endpoint"] for r in records} == {s.url for s in sglang_pair}, "both servers were used"
    for record in records:
        assert record["reasoning"] == sglang_script["reasoning"], record["id"]
        assert record["completion_token_ids"] == sglang_script["completion_token_ids"], record["id"]
        assert record["usage"]["completion_tokens"] == len(sglang_script["completion_token_ids"])
        assert record["timings"]["ttft_s"] is not None, "streamed: the first token's time is known"
        if record.get("tools"):
            # SGLang's qwen parser takes the call out of the text; the answer before it keeps the "\n\n"
            # that follows </think> in a stream. The text that shares a stream increment with "<tool_call>"
            # is lost by that parser (the start-up warns of it), so the answer may end early; the ids above
            # are the reply's, whole.
            assert ("\n\n" + sglang_script["answer"]).startswith(record["content"]), record["id"]
            assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in record["tool_calls"]] \
                == [(sglang_script["tool_name"], json.loads(sglang_script["tool_arguments"]))]
            assert record["finish_reason"] == "tool_calls"
        else:
            assert record["content"] == "\n\n" + sglang_script["answer"] + sglang_script["tool_call_text"]
            assert record["tool_calls"] == [] and record["finish_reason"] == "stop"
    # The prompt ids are SGLang's own rendering of the request, tools and thinking included.
    request = {"messages": records[0]["messages"], "chat_template_kwargs": {"enable_thinking": True},
               **({"tools": records[0]["tools"]} if records[0].get("tools") else {})}
    assert records[0]["prompt_token_ids"] == _tokenize(sglang_pair[0], request)
    assert records[0]["usage"]["prompt_tokens"] == len(records[0]["prompt_token_ids"])


def test_the_start_up_names_sglang_and_its_id_fields(ids_run: dict[str, Any]) -> None:
    stderr = ids_run["result"].stderr
    assert "servers: sglang x2" in stderr
    assert ("--token-ids on: 2 endpoint(s) asked for ids (return_input_ids_in_sglext, return_output_ids_in_sglext, "
            "return_spec_tokens_details, return_cached_tokens_details)") in stderr
    assert "preflight: 2 of 2 answering endpoint(s) took the run's request shape" in stderr
    # Real SGLang's /server_info names the tool-call parser (tests/engines/sglang_server.py serves with qwen).
    for url in _urls(ids_run["servers"]).split(","):
        assert f"{url} runs --tool-call-parser qwen, which streaming loses the reply text" in stderr


async def test_the_dispatcher_takes_each_servers_slots_from_v1_loads(sglang_pair: list[SGLangServer]) -> None:
    endpoints = [Endpoint(server.url, index=i, max_in_flight=64)
                 for i, server in enumerate(sglang_pair)]
    try:
        found = await check_reachable(endpoints, 0)
        dispatcher = Dispatcher(endpoints)
        for endpoint, readiness in zip(endpoints, found, strict=True):
            dispatcher.starting(endpoint, readiness.ready, readiness.reason)
        await dispatcher.prime()
        assert [dispatcher.capacity(0), dispatcher.capacity(1)] == [SLOTS, SLOTS]
        assert [e.server_running for e in dispatcher.live()] == [0, 0]
    finally:
        await asyncio.gather(*(e.aclose() for e in endpoints))


def test_a_prompt_over_the_context_is_too_long(sglang_scripted: SGLangServer, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    words = " ".join(["weather"] * (CONTEXT_LENGTH + 200))
    lines = [{"id": "long", "messages": [{"role": "user", "content": words}]},
             {"id": "short", "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
              "tools": [WEATHER_TOOL]}]
    prompts.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "out"
    result = run_client(["--endpoints", sglang_scripted.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "64"], timeout=180)
    assert result.code == 0, result.stderr[-3000:]
    assert [r["id"] for r in read_results(out)] == ["short"]
    failures = read_failures(out)
    assert [(f["id"], f["error_class"]) for f in failures] == [("long", "too_long")], failures
    again = run_client(["--endpoints", sglang_scripted.url, "--prompts", str(prompts), "--out", str(out),
                        "--max-tokens", "64"], timeout=180)
    assert again.code == 0, again.stderr[-3000:]
    assert len(read_failures(out)) == 1, "a too_long prompt is not sent again"


def test_kill_9_and_resume_keep_every_id_once_with_its_ids_and_export_exactly(
        sglang_pair: list[SGLangServer], sglang_script: dict[str, Any], sglang_model_dirs: dict[str, Path],
        tmp_path: Path) -> None:
    count = 160
    prompts = make_prompts(tmp_path / "p.jsonl", count, with_tools_every=3)
    out = tmp_path / "out"
    args = ["--endpoints", _urls(sglang_pair), "--prompts", str(prompts), "--out", str(out), "--token-ids", "on",
            "--max-tokens", "64", "--max-in-flight", "8"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        written = wait_for_records(out, 30, timeout=240, proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert written < count, "the kill came while the run was under way"
    resumed = run_client(args, timeout=400)
    assert resumed.code == 0, resumed.stderr[-3000:]
    records = read_results(out)
    assert sorted(r["id"] for r in records) == [f"p{i:06d}" for i in range(count)], "every id exactly once"
    for record in records:
        assert record["completion_token_ids"] == sglang_script["completion_token_ids"], record["id"]
        assert record["prompt_token_ids"] and record["usage"]["prompt_tokens"] == len(record["prompt_token_ids"])

    export = tmp_path / "train.parquet"
    exported = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "-m", "client.export", str(out), "--out",
                               str(export), "--tokenizer", str(sglang_model_dirs["scripted"]), "--require-exact-ids",
                               "--json"],
                              cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert exported.returncode == 0, exported.stderr[-3000:]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pq.read_table(export).to_pylist()
    assert len(table) == count
    # Rows and records as multisets: each row is one record's server ids, prompt masked out.
    rows = sorted((row["input_ids"], row["loss_mask"], row["seq_len"]) for row in table)
    expected = sorted((r["prompt_token_ids"] + r["completion_token_ids"],
                       [0] * len(r["prompt_token_ids"]) + [1] * len(r["completion_token_ids"]),
                       len(r["prompt_token_ids"]) + len(r["completion_token_ids"])) for r in records)
    assert rows == expected


def _scheduler(server: SGLangServer) -> psutil.Process:
    assert server.proc is not None
    for child in psutil.Process(server.proc.pid).children(recursive=True):
        if "scheduler" in " ".join(child.cmdline()) or "scheduler" in child.name():
            return child
    raise AssertionError("no sglang::scheduler process under the server")


def test_a_server_warming_up_answers_503_and_joins_when_ready(sglang_model_dirs: dict[str, Path],
                                                              sglang_venv_python: Path, tmp_path: Path) -> None:
    """SGLang answers /health 503 from the moment its HTTP server is up until its warm-up request is done
    (http_server.py, ServerStatus.Starting). That window lasts about 3 s here, too short to catch by
    timing, so the test holds it open: it stops the scheduler (SIGSTOP) as soon as /health says 503, so the
    warm-up cannot finish, starts the client, waits until the client reports the 503, and lets the
    scheduler go on (SIGCONT). The client must then join the server and finish the run."""
    server = SGLangServer(sglang_model_dirs["scripted"], "tiny-qwen3-scripted", python=sglang_venv_python,
                          log_path=LOG_DIR / "warm-up.log")
    server.log_path.unlink(missing_ok=True)
    server.spawn()
    proc: subprocess.Popen[str] | None = None
    try:
        def health() -> int | None:
            try:
                return httpx.get(f"{server.url}/health", timeout=5).status_code
            except httpx.HTTPError:
                return None

        with server_start():  # the server's own bound, while it lives; not the test's time limit
            wait_until(lambda: health() is not None, "SGLang's HTTP server to answer", timeout=STARTUP_TIMEOUT_S,
                       proc=server.proc)
        scheduler = _scheduler(server)
        scheduler.suspend()
        assert health() == 503, "the warm-up ended before the scheduler was stopped; /health must say 503 now"
        prompts = make_prompts(tmp_path / "p.jsonl", 4, with_tools_every=2)
        out = tmp_path / "out"
        proc = subprocess.Popen(client_command(["--endpoints", server.url, "--prompts", str(prompts), "--out",
                                                str(out), "--max-tokens", "64", "--progress-every", "1"]),
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines: list[str] = []  # the plain progress lines (stdout) and the log (stderr), as they come
        output = proc.stdout
        assert output is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(output.readline, "")), daemon=True)
        reader.start()
        wait_until(lambda: any("not ready: /health answered 503" in line for line in lines),
                   "the client to report the server's 503", timeout=120, proc=proc)
        scheduler.resume()
        assert proc.wait(timeout=300) == 0, "".join(lines)[-3000:]
        reader.join(timeout=10)
        assert sorted(r["id"] for r in read_results(out)) == [f"p{i:06d}" for i in range(4)]
        assert health() == 200
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        with contextlib.suppress(psutil.Error, AssertionError):
            _scheduler(server).resume()
        server.stop()
