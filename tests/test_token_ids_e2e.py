"""--token-ids on against the simulated SGLang server: exact ids streamed in SGLang's sglext chunk, the MTP
and cache figures beside them, the audit's accept-length table, the export of an ids run, the preflight
refusal, and exactly-once through faults and a kill -9. The servers build their ids with the tiny
tokenizer of tests/tokenizer_fixture.py, which carries the simulator's default template (Qwen3.6's); the
checks re-render with the same template. (The
same path against real SGLang 0.5.23: tests/test_client_sglang.py.)"""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from client.export.render import ChatTokenizer, RenderError, render_record
from prompts.sglang_input import tool as sglang_tool
from prompts.tool_arguments import arguments_object
from simulator.fleet import SimServerSpec
from tests.conftest import (
    REPO,
    client_command,
    make_prompts,
    read_failures,
    read_results,
    read_whole_results,
    run_client,
    wait_for_records,
)
from tests.servers.harness import ServerGroup
from tests.tokenizer_fixture import tiny_tokenizer_dir

IDS = ("prompt_token_ids", "completion_token_ids")


def _sim(*extra: str, tokenizer: bool = True, speed: float = 40.0) -> SimServerSpec:
    args = ("--mean-tokens", "50", "--tokenizer", str(tiny_tokenizer_dir()) if tokenizer else "none", *extra)
    return SimServerSpec(max_running=8, speed=speed, extra_args=args)


def _tool(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(scope="module")
def tokenizer() -> ChatTokenizer:
    return ChatTokenizer.load(tiny_tokenizer_dir())


def test_ids_on_decode_as_the_template_renders_and_export_exactly(tmp_path: Path, fleet_factory: Any,
                                                                   tokenizer: ChatTokenizer) -> None:
    fleet = fleet_factory([_sim()])
    prompts = make_prompts(tmp_path / "p.jsonl", 40, with_tools_every=2)
    out = tmp_path / "out"
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                         "--token-ids", "on", "--max-tokens", "80", "--max-in-flight", "8"])
    assert result.code == 0, result.stderr[-3000:]
    assert ("--token-ids on: 1 endpoint(s) asked for ids (return_input_ids_in_sglext, return_output_ids_in_sglext, "
            "return_spec_tokens_details, return_cached_tokens_details)") in result.stderr
    records = read_results(out)
    assert len(records) == 40
    assert any(r["tool_calls"] for r in records), "some replies call tools"
    assert any(r["finish_reason"] == "length" for r in records), "some replies are cut by max_tokens"
    cut_calls = cut_trims = 0
    for record in records:
        assert all(isinstance(record.get(name), list) and record[name] for name in IDS), record["id"]
        assert len(record["completion_token_ids"]) == record["usage"]["completion_tokens"]
        assert len(record["prompt_token_ids"]) == record["usage"]["prompt_tokens"]
        # The ids are the template's rendering of the prompt and of reasoning + content + tool calls.
        # SGLang renders each tool as its pydantic model dumps it (`defer_loading: null` added,
        # prompts/sglang_input.py);
        # the export's re-render takes the tools as recorded, so the comparison gives it SGLang's form.
        as_served = {k: v for k, v in record.items() if k not in IDS}
        if record.get("tools"):
            as_served["tools"] = [sglang_tool(t) for t in record["tools"]]
        if any(arguments_object(call["function"]["arguments"]) is None for call in record["tool_calls"]):
            # Cut inside a call: Qwen3.6's template writes arguments item by item and has no rendering of a
            # half-written object. Re-rendered, the record is one failed row, said why; its ids stand.
            assert record["finish_reason"] == "length", record["id"]
            with pytest.raises(RenderError, match="cut by max_tokens inside a tool call"):
                render_record(as_served, tokenizer)
            cut_calls += 1
        else:
            rendered = render_record(as_served, tokenizer)
            assert not rendered.exact
            assert record["prompt_token_ids"] == rendered.prompt, record["id"]
            if record["finish_reason"] == "length" and record["completion_token_ids"] != rendered.completion:
                # Cut where Qwen3.6's template trims (inside the "\n\n" after </think>): the cut text is no
                # rendering of the parsed reply. The count differs from usage, so the export's re-render
                # leaves such a row out, named, instead of writing it.
                assert len(rendered.completion) != record["usage"]["completion_tokens"], record["id"]
                cut_trims += 1
            else:
                assert record["completion_token_ids"] == rendered.completion, record["id"]
        text = tokenizer.tokenizer.decode(record["completion_token_ids"], skip_special_tokens=False)
        assert record["reasoning"].strip() in text
        assert record["content"].strip() in text
        for call in record["tool_calls"]:
            assert f"<function={call['function']['name']}>" in text  # Qwen3.6's XML call
        spec = record["spec"]
        assert spec["verify_ct"] > 0 and spec["draft_tokens"] == 3 * spec["verify_ct"]
        assert spec["accept_length"] == pytest.approx(record["usage"]["completion_tokens"] / spec["verify_ct"])
        assert 0.0 <= spec["accept_rate"] <= 1.0
        assert isinstance(record["usage"]["prompt_tokens_details"]["cached_tokens"], int)
        assert record["timings"]["ttft_s"] is not None  # streamed: the first token's time is known

    audit = _tool("client.audit", str(out))
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
    assert "MTP accept length" in audit.stdout
    table = audit.stdout[audit.stdout.index("MTP accept length"):]
    assert "│ all " in table and "│ test " in table and "median" in table

    parquet = tmp_path / "train.parquet"
    export = _tool("client.export", str(out), "--tokenizer", str(tiny_tokenizer_dir()), "--out", str(parquet),
                   "--require-exact-ids", "--template-check", "all")
    assert export.returncode == 0, export.stderr[-3000:]
    assert "(40 from server token ids, 0 re-rendered;" in export.stderr
    # The template renders the simulated SGLang's exact ids back, tools in SGLang's form included: every
    # reply that ended by itself is trained exactly on them; a reply cut by max_tokens is not, since the
    # trainer's template closes it with tokens the model never generated (the check says so).
    ended = [r for r in records if r["finish_reason"] in ("stop", "tool_calls")]
    tooled = sum(bool(r.get("tools")) for r in ended)
    assert 0 < len(ended) < 40
    assert f"template check: {len(ended)} of 40 row(s) with server ids" in export.stderr
    assert f"({tooled} with the tools as SGLang renders them, written so)" in export.stderr
    examples = [line for line in export.stderr.splitlines() if "first difference at token" in line]
    cut_reasons = ("past the reply's last one", "arguments that do not parse as JSON with {}")
    assert examples and all(any(reason in line for reason in cut_reasons) for line in examples), examples
    rows = pq.read_table(parquet).to_pylist()
    completion_tokens = {r["id"]: r["usage"]["completion_tokens"] for r in records}
    assert {row["id"] for row in rows} == set(completion_tokens)
    for row in rows:
        assert sum(row["loss_mask"]) == completion_tokens[row["id"]], row["id"]


def test_require_exact_ids_refuses_a_run_without_ids(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([_sim()])
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    out = tmp_path / "out"
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                         "--max-tokens", "60", "--token-ids", "off"])
    assert result.code == 0, result.stderr[-3000:]
    assert not any(name in r for r in read_results(out) for name in IDS)
    parquet = tmp_path / "train.parquet"
    export = _tool("client.export", str(out), "--tokenizer", str(tiny_tokenizer_dir()), "--out", str(parquet),
                   "--require-exact-ids")
    assert export.returncode == 3, export.stderr[-3000:]
    assert "--require-exact-ids: 12 of 12 record(s) carry no server token ids" in export.stderr
    assert not parquet.exists() and not parquet.with_name(parquet.name + ".part").exists()
    # Half the records with ids: the JSON report must not read as if their rows were written.
    with_ids = 0
    for segment in sorted((out / "segments").glob("*.jsonl")):
        lines = segment.read_bytes().splitlines()
        with_ids += len(lines) // 2
        segment.write_bytes(b"".join(orjson.dumps({**orjson.loads(line), "prompt_token_ids": [1],
                                                   "completion_token_ids": [2]}) + b"\n" if i % 2 else line + b"\n"
                                     for i, line in enumerate(lines)))
    export = _tool("client.export", str(out), "--tokenizer", str(tiny_tokenizer_dir()), "--out", str(parquet),
                   "--require-exact-ids", "--json")
    assert export.returncode == 3, export.stderr[-3000:]
    report = orjson.loads(export.stdout)
    assert report["without_ids"] == 12 - with_ids and with_ids > 0 and report["written"] is False
    assert not parquet.exists()


@pytest.mark.parametrize(("extra", "words"), [
    ((), "answered the preflight request without token ids"),  # a server that sends no sglext ids
    (("--compat", "openai"), "--compat openai sends standard OpenAI fields only"),
])
def test_preflight_refuses_token_ids_on_without_ids(tmp_path: Path, fleet_factory: Any, extra: tuple[str, ...],
                                                    words: str) -> None:
    fleet = fleet_factory([_sim(tokenizer=False)])
    prompts = make_prompts(tmp_path / "p.jsonl", 5)
    out = tmp_path / "out"
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                         "--token-ids", "on", *extra])
    assert result.code == 2, result.stderr[-3000:]
    assert words in result.stderr
    assert "Traceback" not in result.stderr
    assert read_results(out) == []


def test_kill_9_and_faults_with_streamed_ids_keep_exactly_once(tmp_path: Path, fleet_factory: Any) -> None:
    faults = ("--fail-500", "0.04", "--fail-429", "0.04", "--retry-after", "1", "--drop-stream", "0.04",
              "--error-event", "0.04", "--stall-stream", "0.02", "--stall-seconds", "600")
    fleet = fleet_factory([_sim(*faults, speed=4.0)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 80)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), "--token-ids", "on",
            "--max-tokens", "40", "--max-in-flight", "8", "--idle-timeout", "2", "--max-attempts", "10",
            "--segment-age", "1"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_records(out, 10, proc=proc, timeout=120)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert 0 < len(read_whole_results(out)) < 80
    result = run_client(args, timeout=240)
    if result.code == 1:  # a prompt out of attempts is retried by the next run
        result = run_client(args, timeout=240)
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    counts = collections.Counter(r["id"] for r in records)
    assert counts == collections.Counter(f"p{i:06d}" for i in range(80)), "every id exactly once"
    assert all(r[name] for r in records for name in IDS)
    assert sum(r["attempts"] > 1 for r in records) > 0, "faults were injected, so some prompts were retried"
    failed = {f["id"] for f in read_failures(out)}
    assert not failed - set(counts)


@pytest.mark.parametrize("tokenizer", [True, False])
def test_simulated_stream_carries_sglang_ids_and_figures(fleet_factory: Any, tokenizer: bool) -> None:
    """The simulated server streams SGLang 0.5.23's sglext chunk (no choices, after the finish chunk, before
    the usage chunk) with the ids where it has a tokenizer, and the MTP and cache figures."""
    url = fleet_factory([_sim(tokenizer=tokenizer)]).urls[0]
    body = {"model": "default", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 30,
            "stream": True, "stream_options": {"include_usage": True},
            "return_input_ids_in_sglext": True, "return_output_ids_in_sglext": True,
            "return_spec_tokens_details": True, "return_cached_tokens_details": True}
    events = [orjson.loads(line[6:]) for line in httpx.post(f"{url}/v1/chat/completions", json=body,
                                                            timeout=30).text.split("\n")
              if line.startswith("data: {")]
    finish = next(i for i, e in enumerate(events) if e["choices"] and e["choices"][0].get("finish_reason"))
    extension = [i for i, e in enumerate(events) if e.get("sglext")]
    usage = [i for i, e in enumerate(events) if e.get("usage") and not e["choices"]]
    assert len(extension) == 1 and finish < extension[0] < usage[-1], (finish, extension, usage)
    sglext, totals = events[extension[0]]["sglext"], events[usage[-1]]["usage"]
    assert events[extension[0]]["choices"] == []
    assert ("output_ids" in sglext, "input_ids" in sglext) == (tokenizer, tokenizer)
    if tokenizer:
        assert len(sglext["output_ids"][0]) == totals["completion_tokens"]
        assert len(sglext["input_ids"]) == totals["prompt_tokens"]
    assert set(sglext["spec_tokens_details"]) >= {"spec_accept_rate", "spec_accept_length", "spec_verify_ct",
                                                  "spec_num_correct_drafts", "spec_num_proposed_drafts",
                                                  "spec_correct_drafts_histogram"}
    assert set(sglext["cached_tokens_details"]) >= {"device", "host"}
    refused = httpx.post(f"{url}/v1/chat/completions", json={**body, "return_token_ids": True}, timeout=30)
    assert refused.status_code == 400 and "return_token_ids" in refused.text


def test_a_refusal_of_the_id_fields_names_token_ids_off(tmp_path: Path) -> None:
    """A server that refuses the fields --token-ids on sends (the ids, SGLang's figures) is told apart from
    one that refuses the field set: the fix named is --token-ids, never an option that does not exist."""
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    with ServerGroup(tmp_path) as group:
        server = group.oddserver("strict400")
        result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                             "--compat", "sglang", "--token-ids", "on", "--top-k", "none", "--min-p", "none"])
    assert result.code == 2, result.stderr[-3000:]
    assert ("Refused field(s): chat_template_kwargs, return_input_ids_in_sglext, return_output_ids_in_sglext, "
            "return_spec_tokens_details") in result.stderr
    fixes = result.stderr[result.stderr.index("Change this with"):]
    assert "--token-ids off" in fixes
    assert "--compat openai --token-ids off" in fixes  # --compat openai alone is refused under --token-ids on
    assert "leaving out" not in fixes and "--compat sglang" not in fixes
    assert not read_results(tmp_path / "out")


def test_token_ids_on_refuses_a_server_of_unknown_kind_in_a_mixed_fleet(tmp_path: Path, fleet_factory: Any) -> None:
    """SGLang and vLLM answer; a third server is still loading, so its kind is unknown. Under --token-ids on
    it would join later and stream without ids: the run stops at start instead, naming it."""
    ready = fleet_factory([_sim()]).urls[0]
    loading = fleet_factory([SimServerSpec(startup_delay=600.0)], wait_ready=False).urls[0]
    prompts = make_prompts(tmp_path / "p.jsonl", 3)
    with ServerGroup(tmp_path) as group:
        vllm = group.oddserver(extra=("--owned-by", "vllm"))
        result = run_client(["--endpoints", ",".join([ready, vllm.url, loading]), "--prompts", str(prompts),
                             "--out", str(tmp_path / "out"), "--token-ids", "on"])
        posts = [r for r in vllm.log_records() if r.get("method") == "POST"]
    assert result.code == 2, result.stderr[-3000:]
    assert not posts, "refused before any request, the preflight's included"
    assert f"--token-ids on: {loading} was not ready at start, and this fleet mixes server kinds" in result.stderr
    assert "Traceback" not in result.stderr
    assert not read_results(tmp_path / "out")


def test_a_server_that_stops_giving_ids_fails_the_attempts_instead_of_writing_records_without(
        tmp_path: Path) -> None:
    """--token-ids on, and the server gave ids at the preflight and none afterwards: no record without ids is
    written (each attempt fails as MissingTokenIds, retried, then goes to the failures file), and the
    run says so with exit 1; nothing is silently kept."""
    prompts = make_prompts(tmp_path / "p.jsonl", 4)
    out = tmp_path / "out"
    with ServerGroup(tmp_path) as group:
        server = group.oddserver("ids_once")
        result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                             "--token-ids", "on", "--max-attempts", "2", "--max-tokens", "64"])
    assert "preflight: 1 of 1 answering endpoint(s) took the run's request shape" in result.stderr
    assert result.code == 1, result.stderr[-3000:]
    assert read_results(out) == []
    failures = read_failures(out)
    assert sorted({f["id"] for f in failures}) == [f"p{i:06d}" for i in range(4)]
    assert {f["error_class"] for f in failures} == {"MissingTokenIds"}
    assert all(f["attempts"] == 2 for f in failures)
    assert "answered without the token ids --token-ids on asked for" in failures[0]["last_error"]
