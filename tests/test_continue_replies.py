"""`client.run --continue-replies` on the simulated SGLang server (client/engine/native_reply.py): replies made
on `/generate` from the prompt's exact ids, a broken stream continued from the ids it delivered rather than
generated again. Judged by the servers' own `sglang:generation_tokens_total` against the ids written; every
record has its exact ids, and a continued one says which attempt made how many. Refusals at start."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.local.partials import PartialStore
from simulator.api import SimServerSpec
from tests.conftest import client_command, make_prompts, read_results, run_client, wait_until
from tests.tokenizer_fixture import tiny_tokenizer_dir

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "prompts" / "sample.jsonl"
NATIVE = ("--incremental-streaming-output",)


def _spec(*extra: str) -> SimServerSpec:
    return SimServerSpec(max_running=32, speed=200.0,
                         extra_args=("--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "300", *extra))


def _generated(urls: list[str]) -> float:
    total = 0.0
    for url in urls:
        found = re.search(r"^sglang:generation_tokens_total\S* (\S+)$", httpx.get(url + "/metrics", timeout=10).text,
                          re.MULTILINE)
        assert found
        total += float(found.group(1))
    return total


@pytest.mark.slow
@pytest.mark.timeout(400)  # whole runs; far longer on a busy machine
def test_broken_streams_are_continued_not_generated_again(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([_spec(*NATIVE, "--drop-stream", "0.15")] * 2)
    urls = list(fleet.urls)
    before = _generated(urls)
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(urls), "--prompts", str(PROMPTS), "--out", str(out), "--plain",
                         "--token-ids", "on", "--continue-replies", "--max-attempts", "10"], timeout=600)
    assert result.code == 0, result.stderr
    generated = _generated(urls) - before
    records = read_results(out)
    assert len(records) == len({r["id"] for r in records}) == 264
    written = 0
    continued = 0
    for record in records:
        ids = record["completion_token_ids"]
        assert ids and record["prompt_token_ids"] and record["usage"]["completion_tokens"] == len(ids)
        written += len(ids)
        if "continued" in record:
            continued += 1
            parts = record["continued"]
            assert len(parts) >= 2 and sum(p["tokens"] for p in parts) == len(ids)
            assert [p["attempt"] for p in parts] == sorted({p["attempt"] for p in parts})
    assert continued > 10, "the dropped streams were continued"
    kept = sum(sum(p["tokens"] for p in r["continued"][:-1]) for r in records if "continued" in r)
    assert f"{continued:,} continued from their ids ({kept:,} tokens not generated again)" in result.stderr
    # What the servers generated is what was written, but for the ids a server made in the step it was cut
    # in and never sent: the broken streams' ids were not generated again. (The chat path generates some 10%
    # more here: docs/benchmarks.md.)
    assert written <= generated <= written * 1.01


def test_a_rendered_prompt_generates_the_chat_reply(fleet_factory: Any) -> None:
    """The simulator's `/generate` of the ids its `/v1/tokenize` rendered for a chat request is that request's
    chat reply, streamed a step at a time (`--incremental-streaming-output`)."""
    url = str(fleet_factory([_spec(*NATIVE)]).urls[0])
    body = {"messages": [{"role": "user", "content": "Which rivers meet the sea at a delta?"}],
            "chat_template_kwargs": {"enable_thinking": True}}
    with httpx.Client(base_url=url, timeout=60) as client:
        chat = client.post("/v1/chat/completions", json={**body, "model": "default", "return_token_ids": True,
                                                          "max_tokens": 2000}).json()["choices"][0]
        prompt = client.post("/v1/tokenize", json=body).json()["tokens"]
        assert prompt == chat["prompt_token_ids"]
        stream = client.post("/generate", json={"input_ids": prompt, "stream": True,
                                                "sampling_params": {"max_new_tokens": 2000}}).text
    events = [orjson.loads(e[len("data: "):]) for e in stream.split("\n\n") if e.startswith("data: {")]
    ids = [i for event in events for i in event["output_ids"]]
    assert len(events) > 1 and ids == chat["response_token_ids"]
    assert [e["meta_info"]["completion_tokens"] for e in events][-1] == len(ids)


def test_what_the_path_needs_is_refused_at_start(tmp_path: Path, fleet_factory: Any) -> None:
    plain = str(fleet_factory([_spec()]).urls[0])
    native = str(fleet_factory([_spec(*NATIVE)]).urls[0])
    cases = [
        (native, [], "add --token-ids on"),
        (plain, ["--token-ids", "on"], "without --incremental-streaming-output"),
    ]
    for url, extra, message in cases:
        out = tmp_path / f"out-{len(extra)}"
        result = run_client(["--endpoints", url, "--prompts", str(PROMPTS), "--out", str(out), "--plain",
                             "--continue-replies", *extra])
        assert result.code == 2 and message in result.stderr, result.stderr
        assert not out.exists() or not any((out / "segments").glob("*.jsonl"))


@pytest.mark.slow
@pytest.mark.timeout(400)  # whole runs; far longer on a busy machine
def test_a_kill_9_leaves_the_replies_in_flight_to_the_next_run(tmp_path: Path, fleet_factory: Any) -> None:
    """The replies in flight are saved to OUT/partials as they stream; after kill -9 the next run continues each
    from the ids saved (its `continued` begins with the killed run's shares) and removes the files."""
    url = str(fleet_factory([SimServerSpec(max_running=32, speed=5.0, extra_args=(
        "--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "300", *NATIVE))]).urls[0])
    prompts = make_prompts(tmp_path / "p.jsonl", 40, with_tools_every=4)
    out = tmp_path / "out"
    partials = out / "partials"
    args = ["--endpoints", url, "--prompts", str(prompts), "--out", str(out), "--token-ids", "on",
            "--continue-replies"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(list(partials.glob("*.jsonl"))) >= 5, "5 replies saved in flight", timeout=120,
                   proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    done_before = {r["id"] for r in read_results(out)}
    saved, _ = PartialStore(out).load(set())  # what the next run will read
    pending = {i: {"ids": s.ids, "prompt_ids": s.prompt_ids, "parts": s.parts} for i, s in saved.items()
               if i not in done_before}
    assert len(pending) >= 3
    resumed = run_client(args, timeout=600)
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert f"continuing {len(pending)} repl(ies) an earlier run left in flight" in resumed.stderr
    records = {r["id"]: r for r in read_results(out)}
    assert sorted(records) == sorted(f"p{i:06d}" for i in range(40)) and len(read_results(out)) == 40
    continued = 0
    for prompt_id, doc in pending.items():
        record = records[prompt_id]
        assert record["completion_token_ids"][:len(doc["ids"])] == doc["ids"], prompt_id
        assert record["prompt_token_ids"] == doc["prompt_ids"]
        parts = record.get("continued") or [{"attempt": 1, "tokens": len(record["completion_token_ids"])}]
        assert parts[:len(doc["parts"])] == doc["parts"], (prompt_id, parts, doc["parts"])
        assert sum(p["tokens"] for p in parts) == len(record["completion_token_ids"])
        continued += len(parts) > len(doc["parts"])
    assert continued >= 3, "the next run continued them, in attempts numbered after the killed run's"
    assert not list(partials.glob("*.jsonl")), "a written reply's file goes"


@pytest.mark.slow
@pytest.mark.timeout(400)  # whole runs; far longer on a busy machine
def test_ctrl_c_keeps_the_replies_it_cancels_for_the_next_run(tmp_path: Path, fleet_factory: Any) -> None:
    """A stop (SIGINT, no grace) cancels the replies in flight and saves what they received; the next run
    continues them."""
    url = str(fleet_factory([SimServerSpec(max_running=32, speed=5.0, extra_args=(
        "--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "300", *NATIVE))]).urls[0])
    prompts = make_prompts(tmp_path / "p.jsonl", 20, with_tools_every=4)
    out = tmp_path / "out"
    args = ["--endpoints", url, "--prompts", str(prompts), "--out", str(out), "--token-ids", "on",
            "--continue-replies", "--grace", "0"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(list((out / "partials").glob("*.jsonl"))) >= 3, "3 replies saved in flight",
                   timeout=120, proc=proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    done = {r["id"] for r in read_results(out)}
    saved, _ = PartialStore(out).load(done)
    assert len(saved) >= 3
    resumed = run_client(args, timeout=600)
    assert resumed.code == 0, resumed.stderr[-3000:]
    records = {r["id"]: r for r in read_results(out)}
    assert len(records) == 20
    for prompt_id, reply in saved.items():
        record = records[prompt_id]
        assert record["completion_token_ids"][:len(reply.ids)] == reply.ids
        parts = record.get("continued") or [{"attempt": 1, "tokens": len(record["completion_token_ids"])}]
        assert parts[:len(reply.parts)] == reply.parts


@pytest.mark.slow
@pytest.mark.timeout(400)  # two runs of 120 prompts; far longer on a busy machine
def test_continued_replies_are_as_long_as_the_undisturbed_ones(tmp_path: Path, fleet_factory: Any) -> None:
    """The length distribution of continued replies is that of replies made in one go: one server dropping 30%
    of its streams, and one that drops none, make the same prompts; the two-sample Kolmogorov-Smirnov
    statistic of the continued replies' lengths against the same prompts' undisturbed lengths is 0 (each
    continued reply is as long as its undisturbed twin: the simulator's reply is a function of its ids)."""
    dropping = str(fleet_factory([_spec(*NATIVE, "--drop-stream", "0.3")]).urls[0])
    steady = str(fleet_factory([_spec(*NATIVE)]).urls[0])
    prompts = make_prompts(tmp_path / "p.jsonl", 120, with_tools_every=4)
    lengths = {}
    for name, url in (("dropping", dropping), ("steady", steady)):
        out = tmp_path / name
        result = run_client(["--endpoints", url, "--prompts", str(prompts), "--out", str(out), "--plain",
                             "--token-ids", "on", "--continue-replies", "--max-attempts", "20"], timeout=600)
        assert result.code == 0, result.stderr
        lengths[name] = {r["id"]: (len(r["completion_token_ids"]), "continued" in r) for r in read_results(out)}
    continued = [i for i, (_, was) in lengths["dropping"].items() if was]
    assert len(continued) > 15
    broken = sorted(lengths["dropping"][i][0] for i in continued)
    whole = sorted(lengths["steady"][i][0] for i in continued)
    assert _ks_statistic(broken, whole) == 0.0
    assert not any(was for _, was in lengths["steady"].values())


def _ks_statistic(a: list[int], b: list[int]) -> float:
    """The largest gap between the two samples' empirical distribution functions."""
    values = sorted(set(a) | set(b))
    return max(abs(sum(x <= v for x in a) / len(a) - sum(x <= v for x in b) / len(b)) for v in values)
