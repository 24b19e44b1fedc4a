"""`--turns all` end to end against real simulated servers: regenerated histories, spliced and diverging
tool trajectories, sticky routing, and a kill -9 in the middle of conversations."""

from __future__ import annotations

import collections
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import REPO, client_command, read_results, run_client, wait_for_records

FAST = ("--mean-tokens", "60", "--tokens-per-chunk", "2")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}


def chat3(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": f"{conversation_id}: first question"},
        {"role": "assistant", "content": "SOURCE answer one"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "SOURCE answer two"},
        {"role": "user", "content": "third question"},
        {"role": "assistant", "content": "SOURCE answer three"}]}


def parallel_tools(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Oslo and Rome? [[sim:calls get_weather,get_weather]]"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "src_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"id": "src_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "src_1", "content": "Oslo: rain, 4C"},
        {"role": "tool", "tool_call_id": "src_2", "content": "Rome: sun, 19C"},
        {"role": "assistant", "content": "SOURCE summary"}]}


def diverging(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "tools": [WEATHER, SEARCH], "messages": [
        {"role": "user", "content": "Weather in Oslo? [[sim:calls web_search]]"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "src_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "src_1", "content": "Oslo: rain"},
        {"role": "assistant", "content": "SOURCE: it rains"}]}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def by_id(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    counts = collections.Counter(r["id"] for r in records)
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1]
    return {r["id"]: r for r in records}


def assert_chat3_histories(events: dict[str, dict[str, Any]], cid: str) -> None:
    first, second, third = events[f"{cid}#1"], events[f"{cid}#2"], events[f"{cid}#3!"]
    assert [e["turn"] for e in (first, second, third)] == [1, 2, 3]
    assert {e["conversation_id"] for e in (first, second, third)} == {cid}
    assert second["messages"][2] == {"role": "assistant", "content": first["content"]}
    assert third["messages"][2] == {"role": "assistant", "content": first["content"]}
    assert third["messages"][4] == {"role": "assistant", "content": second["content"]}
    assert "SOURCE" not in orjson.dumps(third["messages"]).decode()


def test_every_turn_is_regenerated_on_the_models_own_history(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)] * 2)
    prompts = write(tmp_path / "p.jsonl", [chat3("chat"), parallel_tools("par"), diverging("div")])
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         "--turns", "all"])
    assert result.code == 0, result.stderr[-3000:]
    events = by_id(read_results(out))
    assert set(events) == {"chat#1", "chat#2", "chat#3!", "par#1", "par#2!", "div#1!"}
    assert_chat3_histories(events, "chat")

    calls = events["par#1"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_weather"]
    history = events["par#2!"]["messages"]
    assert history[1]["tool_calls"] == calls
    assert history[2:] == [{"role": "tool", "tool_call_id": calls[0]["id"], "content": "Oslo: rain, 4C"},
                           {"role": "tool", "tool_call_id": calls[1]["id"], "content": "Rome: sun, 19C"}]

    assert events["div#1!"]["diverged"] == "called web_search where the source called get_weather"
    assert "diverged" not in events["par#2!"]
    assert "conversations: inputs 3 = worked on 3" in result.stderr
    assert "1 ended early" in result.stderr

    audit = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--prompts", str(prompts), "--json"],
                           cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    report = orjson.loads(audit.stdout)
    findings = "\n".join(f["message"] for f in report["findings"])
    assert "1 conversation(s) ended early" in findings
    assert "not in the prompt set" not in findings
    assert "have no result" not in findings, "every conversation is finished, diverged or not"
    assert report["counts"]["diverged"] == 1

    again = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                        "--turns", "all"])
    assert again.code == 0, again.stderr[-2000:]
    assert "already-finished 3" in again.stderr
    assert len(read_results(out)) == 6


def test_turns_of_a_conversation_stay_on_one_endpoint(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=4, speed=20.0, extra_args=FAST)] * 3)
    prompts = write(tmp_path / "p.jsonl", [chat3(f"c{i:03d}") for i in range(45)])
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         "--turns", "all"])
    assert result.code == 0, result.stderr[-3000:]
    records = read_results(out)
    assert len(records) == 135
    endpoints: dict[str, set[str]] = collections.defaultdict(set)
    for record in records:
        endpoints[record["conversation_id"]].add(record["endpoint"])
    assert all(len(used) == 1 for used in endpoints.values()), endpoints
    starts = collections.Counter(next(iter(used)) for used in endpoints.values())
    assert len(starts) == 3, "the balancer still spreads new conversations over the fleet"


@pytest.mark.slow
def test_kill_9_mid_conversation_then_rerun_continues(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=3.0, extra_args=FAST)] * 2)
    prompts = write(tmp_path / "p.jsonl", [chat3(f"c{i:03d}") for i in range(60)])
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out), "--turns", "all"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out, 40, timeout=90, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    before = written_ids(out)
    cut_off = {i.split("#")[0] for i in before} - {i.split("#")[0] for i in before if i.endswith("!")}
    assert cut_off, "the kill should have left some conversations in the middle"
    result = run_client(args, timeout=240)
    assert result.code == 0, result.stderr[-3000:]
    events = by_id(read_results(out))
    assert len(events) == 180
    for i in range(60):
        assert_chat3_histories(events, f"c{i:03d}")
    assert f"{len(cut_off):,} to continue at their next turn" in result.stderr


def written_ids(out: Path) -> set[str]:
    """Ids of the complete lines a killed run left (a torn last line is not a written event)."""
    ids = set()
    for segment in (out / "segments").glob("*.jsonl"):
        for line in segment.read_bytes().split(b"\n"):
            try:
                ids.add(orjson.loads(line)["id"])
            except orjson.JSONDecodeError:
                continue
    return ids


def test_a_turn_cut_by_max_tokens_ends_its_conversation_and_is_no_failure(tmp_path: Path,
                                                                           fleet_factory: Any) -> None:
    """A turn cut by max_tokens is not continued: its conversation ends there, marked `!` with an
    `ended_early` reason, counted apart in the summary, and the run is not a failure. (Before, the cut
    reply was sent as the next turn's history: every later turn was generated on it, and a call cut inside
    its arguments made the server refuse the next turn, HTTP 400, and the conversation count as failed.)"""
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)])
    prompts = write(tmp_path / "p.jsonl", [chat3("chat"), parallel_tools("par")])
    out = tmp_path / "out"
    result = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                         "--turns", "all", "--max-tokens", "8"])
    assert result.code == 0, result.stderr[-3000:]
    events = by_id(read_results(out))
    assert set(events) == {"chat#1!", "par#1!"}
    for event in events.values():
        assert event["finish_reason"] == "length"
        assert "did not end by itself (finish_reason length)" in event["ended_early"]
        assert "diverged" not in event
    assert not (out / "failures").exists() or not any(
        line for path in (out / "failures").glob("*") for line in path.read_bytes().splitlines())
    assert "2 at a turn that did not end by itself" in result.stderr
    again = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out),
                        "--turns", "all", "--max-tokens", "8"])
    assert again.code == 0 and "already-finished 2" in again.stderr
