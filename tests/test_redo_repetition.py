"""`client.run --redo-repetition`: results an older, eager loop stop ended (finish_reason `repetition`) are
taken out of the local segments and generated again (client/run/stopped_loops.py); the audit names the
option. The scan is table-tested on synthetic segments, the redo end to end against a simulated server."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.run.stopped_loops import stopped_prompts
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, read_results, run_client
from tests.results_fixture import result, write_segment


@pytest.mark.parametrize(("records", "expected"), [
    ([result("a"), result("b", finish_reason="length")], set()),
    ([result("a", finish_reason="repetition"), result("b")], {"a"}),
    # The word in the text is not the finish reason.
    ([result("a", content='"repetition"'), result("b", finish_reason="repetition")], {"b"}),
    # --turns all: the conversation is the prompt.
    ([result("c-1", conversation_id="c", finish_reason="repetition")], {"c"}),
], ids=["none", "one", "word-in-text", "conversation"])
def test_the_stopped_prompts_are_found_by_their_finish_reason(tmp_path: Path, records: list[dict[str, Any]],
                                                              expected: set[str]) -> None:
    write_segment(tmp_path, records)
    assert stopped_prompts(tmp_path / "segments") == expected


def _audit_messages(out: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    return " ".join(f["message"] for f in orjson.loads(proc.stdout)["findings"])


def test_results_an_eager_stop_ended_are_generated_again(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "150", "--tokens-per-chunk", "8"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    out = tmp_path / "out"
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(out)]
    first = run_client(args)
    assert first.code == 0, first.stderr[-2000:]
    # What an older rule left: two results cut and ended as loops.
    (segment,) = sorted((out / "segments").glob("*.jsonl"))
    lines = []
    for raw in segment.read_bytes().splitlines():
        record = orjson.loads(raw)
        if record["id"] in ("p000002", "p000007"):
            record["finish_reason"] = "repetition"
            record["content"] = record["content"][:10]
        lines.append(orjson.dumps(record))
    segment.write_bytes(b"\n".join(lines) + b"\n")
    assert "--redo-repetition" in _audit_messages(out)

    kept = run_client(args)
    assert kept.code == 0, kept.stderr[-2000:]
    assert sum(r["finish_reason"] == "repetition" for r in read_results(out)) == 2, "kept until asked"

    redone = run_client([*args, "--redo-repetition"])
    assert redone.code == 0, redone.stderr[-2000:]
    assert "2 prompt(s) had a result stopped as a loop" in redone.stderr
    records = read_results(out)
    assert collections.Counter(r["id"] for r in records) == {f"p{i:06d}": 1 for i in range(12)}
    assert not any(r["finish_reason"] == "repetition" for r in records)


def test_redo_repetition_is_refused_with_s3(tmp_path: Path) -> None:
    prompts = make_prompts(tmp_path / "p.jsonl", 1)
    refused = run_client(["--simulate", "1", "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                          "--s3", "s3://bucket/prefix", "--redo-repetition"])
    assert refused.code == 2 and "--redo-repetition rewrites local segments" in refused.stderr
