"""Any JSON string is a valid id: ids with line breaks of every kind, quotes, backslashes, tabs, `#`, `!`
and 1,000 characters each give exactly one record (one per turn with --turns all) across three runs with
a kill -9 in between, read back through the real ledger on every resume."""

from __future__ import annotations

import collections
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from simulator.fleet import SimServerSpec
from tests.conftest import (
    REPO,
    client_command,
    read_failures,
    read_results,
    read_whole_results,
    run_client,
    wait_for_records,
)

pytestmark = pytest.mark.slow

AWKWARD = ["line\nfeed", "carriage\rreturn", "crlf\r\npair", "line\u2028separator", "next\u0085line",
           'double"quote', "back\\slash", "tab\there", "hash#1", "bang!", "both#2!", "x" * 1000, '"quoted"',
           "plain-id"]
FAST = ("--mean-tokens", "50", "--tokens-per-chunk", "2")


def conversation(prompt_id: str) -> dict[str, Any]:
    return {"id": prompt_id, "messages": [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "SOURCE one"},
        {"role": "user", "content": "second question"},
        {"role": "assistant", "content": "SOURCE two"}]}


def single(prompt_id: str) -> dict[str, Any]:
    return {"id": prompt_id, "messages": [{"role": "user", "content": "a question"}]}


@pytest.mark.parametrize("turns", ["last", "all"])
def test_awkward_ids_are_done_exactly_once_across_resumes(turns: str, tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=2, speed=1.0, extra_args=FAST)])
    make = conversation if turns == "all" else single
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps(make(i)) + b"\n" for i in AWKWARD))
    out = tmp_path / "out"
    args = ["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out), "--turns", turns,
            "--max-in-flight", "2", "--segment-age", "1"]

    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    wait_for_records(out, 3, proc=proc, timeout=90)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    partial = read_whole_results(out)
    assert 0 < len(partial) < len(AWKWARD) * (2 if turns == "all" else 1)

    # The slow server made the kill land mid-run; the resumes run on a fast one (the ids are the point).
    fast = fleet_factory([SimServerSpec(max_running=8, speed=20.0, extra_args=FAST)])
    args[1] = fast.urls[0]
    for _ in range(2):
        result = run_client(args, timeout=240)
        assert result.code == 0, result.stderr[-3000:]
    assert not read_failures(out)
    records = read_results(out)
    counts = collections.Counter(r["id"] for r in records)
    if turns == "last":
        assert counts == collections.Counter(AWKWARD)
    else:
        expected = collections.Counter([f"{i}#1" for i in AWKWARD] + [f"{i}#2!" for i in AWKWARD])
        assert counts == expected
        assert {r["conversation_id"] for r in records} == set(AWKWARD)
    # The third run found everything done: nothing was sent again.
    again = run_client(args, timeout=120)
    assert again.code == 0, again.stderr[-3000:]
    assert len(read_results(out)) == len(records)
