"""End to end: the real CLI against real simulated servers, with faults, crashes and dead servers."""

from __future__ import annotations

import collections
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from client.fleet.balancer import target_depth
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

FAST = ("--mean-tokens", "120", "--tokens-per-chunk", "3")
FAULTS = ("--fail-500", "0.03", "--fail-429", "0.03", "--drop-stream", "0.03", "--stall-stream", "0.02",
          "--error-event", "0.03", "--retry-after", "1")
CLIENT_FAST = ("--max-in-flight", "24", "--idle-timeout", "2", "--max-attempts", "8", "--grace", "5")


def assert_complete_once(records: list[dict[str, Any]], expected_ids: set[str]) -> None:
    counts = collections.Counter(r["id"] for r in records)
    duplicates = {i: n for i, n in counts.items() if n > 1}
    assert not duplicates, f"ids written more than once: {list(duplicates)[:5]}"
    assert set(counts) == expected_ids, f"missing {sorted(expected_ids - set(counts))[:5]}"
    for record in records:
        assert record["finish_reason"] in ("stop", "length", "tool_calls"), record["id"]
        assert record["usage"]["completion_tokens"] > 0, record["id"]
        assert record["reasoning"] or record["content"] or record["tool_calls"], record["id"]
        assert record["messages"], record["id"]
        assert record["sampling"]["enable_thinking"] is True


@pytest.mark.slow
def test_four_servers_500_prompts_with_faults(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=16, speed=40.0, extra_args=FAST + FAULTS)] * 4)
    prompts = make_prompts(tmp_path / "p.jsonl", 500)
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         *CLIENT_FAST])
    records = read_results(out)
    failures = read_failures(out)
    done_ids = {r["id"] for r in records}
    for failure in failures:
        assert failure["error_class"] and failure["last_error"] and failure["attempts"] >= 1
        assert failure["id"] not in done_ids
    assert result.code == (1 if failures else 0), result.stderr[-3000:]
    assert_complete_once(records, {f"p{i:06d}" for i in range(500)} - {f["id"] for f in failures})
    assert len(failures) <= 2, failures
    assert sum(1 for r in records if r["tool_calls"]) > 20
    assert {r["endpoint"] for r in records} == set(fleet.urls)
    assert sum(r["attempts"] > 1 for r in records) > 10, "faults were injected, so some prompts needed retries"
    assert "reconciliation: inputs 500 = done" in result.stderr
    # Run again: nothing left to send (apart from failures, which are retried).
    again = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                        *CLIENT_FAST])
    assert again.code == 0, again.stderr[-2000:]
    assert_complete_once(read_results(out), {f"p{i:06d}" for i in range(500)})


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=8.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 300)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST,
            "--idle-timeout", "30"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out, 60, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    first = read_whole_results(out)
    assert 0 < len(first) < 300, "killed mid-run, with whole records written"
    # The kill may or may not have cut a line short; the resume must cope with one, so there always is one:
    # the segment the kill left open (no .ids sidecar yet) gets a torn half line when its tail is whole.
    [open_segment] = [p for p in (out / "segments").glob("*.jsonl") if not p.with_suffix(".ids").exists()]
    data = open_segment.read_bytes()
    torn = len(data) - (data.rfind(b"\n") + 1)
    if torn == 0:
        with open_segment.open("ab") as handle:
            torn = handle.write(b'{"id": "p000299", "messages": [{"role": "user", "con')
    result = run_client(args)
    assert result.code == 0, result.stderr[-3000:]
    assert f"resuming: {len(first):,} done id(s)" in result.stderr
    assert f"repaired a torn tail of {torn} bytes" in result.stderr
    final = read_results(out)
    assert_complete_once(final, {f"p{i:06d}" for i in range(300)})
    kept = {r["id"]: r for r in final}
    assert all(kept[r["id"]] == r for r in first), "the killed run's records are kept as they were"


@pytest.mark.slow
def test_server_stopped_mid_run_still_completes(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=10.0, extra_args=FAST)] * 3)
    prompts = make_prompts(tmp_path / "p.jsonl", 240)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for_records(out, 40, proc=proc)
    fleet.kill(1)
    before_kill = sum(r["endpoint"] == fleet.urls[1] for r in read_whole_results(out))
    _, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    records = read_results(out)
    assert_complete_once(records, {f"p{i:06d}" for i in range(240)})
    from_killed = sum(r["endpoint"] == fleet.urls[1] for r in records)
    # After the kill, server 1 can only have finished what it had streamed whole before it and the client had
    # not yet written at the count above: at most the requests the client keeps there (its target depth);
    # everything else went to the other two.
    assert 0 < before_kill <= from_killed <= before_kill + target_depth(8), (before_kill, from_killed)
    assert {r["endpoint"] for r in records} == set(fleet.urls)


@pytest.mark.slow
def test_sigint_stops_gracefully_and_rerun_finishes(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=5.0, extra_args=FAST)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), *CLIENT_FAST]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    wait_for_records(out, 20, proc=proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "interrupted" in stderr
    partial = read_results(out)
    assert 0 < len(partial) < 200
    result = run_client(args)
    assert result.code == 0, result.stderr[-2000:]
    assert_complete_once(read_results(out), {f"p{i:06d}" for i in range(200)})


def test_unreachable_endpoint_fails_before_sending(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 5)
    dead = "http://127.0.0.1:9"  # discard port: nothing listens
    result = run_client(["--endpoints", f"{fleet.urls[0]},{dead}", "--prompts", str(prompts),
                         "--out", str(tmp_path / "out")])
    assert result.code == 2
    assert "cannot reach 1 of 2 endpoint(s): http://127.0.0.1:9" in result.stderr
    assert not list((tmp_path / "out" / "segments").glob("*.jsonl"))


def test_unknown_model_fails_before_sending(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 5)
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                         "--model", "no-such-model"])
    assert result.code == 2
    assert "no server serves model 'no-such-model'" in result.stderr
    assert not list((tmp_path / "out" / "segments").glob("*.jsonl"))


def test_unwritable_out_fails_before_sending(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 5)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(blocker / "out")])
    assert result.code == 2
    assert "cannot be written" in result.stderr


def test_strict_stops_on_bad_input_and_default_skips(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 10)
    with prompts.open("ab") as handle:
        handle.write(b'{"id": "bad", "messages": [{"role": "robot", "content": "x"}]}\n')
    strict = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "o1"),
                         "--strict"])
    assert strict.code == 3, strict.stderr
    assert f"{prompts}:11:" in strict.stderr
    lenient = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "o2")])
    assert lenient.code == 0, lenient.stderr
    assert f"{prompts}:11:" in lenient.stderr
    assert "skipped-invalid 1" in lenient.stderr
    assert len(read_results(tmp_path / "o2")) == 10


@pytest.mark.parametrize("thinking", [True, False])
def test_request_carries_settings(tmp_path: Path, fleet_factory: Any, thinking: bool) -> None:
    fleet = fleet_factory([SimServerSpec(speed=20.0, extra_args=FAST)])
    prompts = make_prompts(tmp_path / "p.jsonl", 8, with_tools_every=2)
    extra = [] if thinking else ["--no-thinking"]
    result = run_client(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                         "--max-tokens", "64", *extra])
    assert result.code == 0, result.stderr
    records = read_results(tmp_path / "o")
    assert all(r["sampling"]["enable_thinking"] is thinking for r in records)
    assert all(r["sampling"]["max_tokens"] == 64 for r in records)
    assert all(r["usage"]["completion_tokens"] <= 64 for r in records)
    if not thinking:
        assert all(r["reasoning"] == "" for r in records)
    assert all(r["meta"]["source"] == "test" for r in records)
    assert all("tools" in r for r in records if int(r["id"][1:]) % 2 == 0)
