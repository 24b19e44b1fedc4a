"""`client.run --extend FROM` on the simulated SGLang server (client/extend/): only the replies FROM's window cut
are continued, from their exact ids, and nothing else is generated; the extended replies read as the same
prompts made under the wide window in one go; the server's own generation counter says what it cost; misuse
and resume. The policy of which record is continued is a table (client.extend.select)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.extend.select import Limits, Verdict, decide
from simulator.api import SimServerSpec
from tests.conftest import read_results, run_client
from tests.tokenizer_fixture import load_tiny, tiny_tokenizer_dir

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "prompts" / "sample.jsonl"
OLD, NEW = 1024, 4096

# -- which record, with what budget ---------------------------------------------------------------------------


def _record(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "a", "finish_reason": "length", "prompt_token_ids": [1] * 100,
                            "completion_token_ids": [2] * 900, "sampling": {"max_tokens": 8192},
                            "train_window": {"size": 1000, "prompt_tokens": 100, "max_tokens": 900}}
    return {**base, **fields}


@pytest.mark.parametrize(("record", "limits", "verdict", "budget"), [
    (_record(), Limits(4096, 8192), Verdict.CONTINUE, 3996),
    (_record(), Limits(None, 8192), Verdict.NO_ROOM, 0),  # the record's own window still binds
    (_record(sampling={"max_tokens": 900}, train_window=None), Limits(None, 2000), Verdict.CONTINUE, 2000),
    (_record(sampling={"max_tokens": 900}), Limits(4096, 2000), Verdict.CONTINUE, 2000),
    (_record(sampling={"max_tokens": 9000}), Limits(20000, 2000), Verdict.CONTINUE, 9000),  # never narrower
    (_record(finish_reason="stop"), Limits(4096, 8192), Verdict.ENDED, 0),
    (_record(finish_reason="tool_calls"), Limits(4096, 8192), Verdict.ENDED, 0),
    (_record(completion_token_ids=None), Limits(4096, 8192), Verdict.NO_IDS, 0),
    (_record(prompt_token_ids=[]), Limits(4096, 8192), Verdict.NO_IDS, 0),
    (_record(conversation_id="c"), Limits(4096, 8192), Verdict.CONVERSATION, 0),
    (_record(), Limits(1000, 8192), Verdict.NO_ROOM, 0),
])
def test_which_records_are_continued_and_with_what_budget(record: dict[str, Any], limits: Limits,
                                                          verdict: Verdict, budget: int) -> None:
    decision = decide(record, limits)
    assert (decision.verdict, decision.budget) == (verdict, budget)


# -- on the simulated server -----------------------------------------------------------------------------------


def _generated(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = re.search(r"^sglang:generation_tokens_total\S* (\S+)$", text, re.MULTILINE)
    assert found, text[:500]
    return float(found.group(1))


def _by_id(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_results(out)}


def _calls(record: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in record["tool_calls"]]


@pytest.fixture
def server(fleet_factory: Any) -> str:
    # One server: the simulator's memory of a reply (what a real model has in its weights) is per process.
    spec = SimServerSpec(max_running=32, speed=200.0,
                         extra_args=("--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "900"))
    return str(fleet_factory([spec]).urls[0])


def _run(url: str, out: Path, window: int) -> None:
    result = run_client(["--endpoints", url, "--prompts", str(PROMPTS), "--out", str(out), "--plain",
                         "--train-window", str(window), "--token-ids", "on"], timeout=600)
    assert result.code == 0, result.stderr


@pytest.mark.timeout(400)  # whole runs; far longer on a busy machine
def test_only_the_cut_replies_are_continued_and_they_read_as_made_whole(tmp_path: Path, server: str) -> None:
    narrow, extended, wide = tmp_path / "narrow", tmp_path / "extended", tmp_path / "wide"
    _run(server, narrow, OLD)
    before = _generated(server)
    result = run_client(["--endpoints", server, "--extend", str(narrow), "--out", str(extended), "--plain",
                         "--train-window", str(NEW)], timeout=600)
    assert result.code == 0, result.stderr
    generated_now = _generated(server) - before
    old, new = _by_id(narrow), _by_id(extended)
    assert new.keys() == old.keys()  # every record of FROM, exactly once, and no other
    cut = {i for i, r in old.items() if r["finish_reason"] == "length"}
    assert len(cut) > 20 and len(old) - len(cut) > 20
    for record_id, record in old.items():
        if record_id not in cut:
            assert new[record_id] == record  # carried over as it was
            continue
        ext = new[record_id]
        k = len(record["completion_token_ids"])
        assert ext["completion_token_ids"][:k] == record["completion_token_ids"], record_id
        assert ext["prompt_token_ids"] == record["prompt_token_ids"]
        assert ext["continued"] == [{"attempt": 1, "tokens": k},
                                    {"attempt": 2, "tokens": len(ext["completion_token_ids"]) - k}]
        assert ext["usage"]["completion_tokens"] == len(ext["completion_token_ids"])
        assert ext["train_window"] == {"size": NEW, "prompt_tokens": len(record["prompt_token_ids"]),
                                       "max_tokens": min(8192, NEW - len(record["prompt_token_ids"]))}
        assert len(ext["prompt_token_ids"]) + len(ext["completion_token_ids"]) <= NEW
    # What the server generated for the extension is the continued part of the cut replies, and nothing else.
    new_tokens = sum(len(new[i]["completion_token_ids"]) - len(old[i]["completion_token_ids"]) for i in cut)
    assert generated_now == new_tokens
    assert f"continued {len(cut)} repl(ies)" in result.stderr and f"{new_tokens:,} generated now" in result.stderr

    # The same prompts made under the wide window in one go: the same text, split the same way, for every
    # continued reply (the simulator tokenizes a cut reply's text itself, so at the cut its ids may differ).
    _run(server, wide, NEW)
    whole = _by_id(wide)
    tokenizer = load_tiny()
    ended = 0
    for record_id in cut:
        ext, one_go = new[record_id], whole[record_id]
        texts = [tokenizer.decode(r["completion_token_ids"]).rstrip("\ufffd") for r in (ext, one_go)]
        if one_go["finish_reason"] == "length":  # cut again by the wide window, each where its ids ran out
            assert ext["finish_reason"] == "length", record_id
            shorter, longer = sorted(texts, key=len)
            assert longer.startswith(shorter) and len(longer) - len(shorter) < 8, record_id
            continue
        ended += 1
        assert texts[0] == texts[1], record_id
        # The edges of a content before a call are SGLang's non-streaming parser's (the stream's can hold more
        # blank lines); the template trims them.
        assert (ext["reasoning"], ext["content"].strip(), _calls(ext), ext["finish_reason"]) == (
            one_go["reasoning"], one_go["content"].strip(), _calls(one_go), one_go["finish_reason"]), record_id
    assert ended > 20
    generated_whole = sum(len(whole[i]["completion_token_ids"]) for i in cut)
    assert new_tokens < generated_whole

    # The audit counts the continued replies and their tokens, and fails a record whose shares do not add up.
    audit = _audit(extended)
    kept = sum(len(old[i]["completion_token_ids"]) for i in cut)
    assert audit["continued"] == {"records": len(cut), "tokens_kept": kept, "tokens_generated": new_tokens,
                                  "broken": 0, "broken_examples": []}
    assert audit["verdict"] == "healthy" and audit["exit"] == 0, audit["findings"]

    # The same command again: nothing left to do, nothing generated.
    before = _generated(server)
    again = run_client(["--endpoints", server, "--extend", str(narrow), "--out", str(extended), "--plain",
                        "--train-window", str(NEW)], timeout=600)
    assert again.code == 0, again.stderr
    assert _generated(server) == before
    assert _by_id(extended) == new
    history = orjson.loads((extended / "run.json").read_bytes())["history"]
    assert history[-1]["extended_from"] == str(narrow) and history[-1]["train_window"] == NEW


def _audit(out: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    report: dict[str, Any] = orjson.loads(done.stdout)
    report["exit"] = done.returncode
    return report


def test_a_continued_record_whose_shares_do_not_add_up_fails_the_audit(tmp_path: Path) -> None:
    segments = tmp_path / "run" / "segments"
    segments.mkdir(parents=True)
    record = {"id": "a", "messages": [{"role": "user", "content": "hi"}], "sampling": {}, "reasoning": "r",
              "content": "an answer of some words", "tool_calls": [], "finish_reason": "stop",
              "usage": {"prompt_tokens": 3, "completion_tokens": 40}, "model": "m", "endpoint": "e",
              "timings": {"queued_s": 0, "ttft_s": 0, "total_s": 1}, "attempts": 2, "created": 0.0,
              "continued": [{"attempt": 1, "tokens": 30}, {"attempt": 2, "tokens": 5}]}
    (segments / "s-00001.jsonl").write_bytes(orjson.dumps(record) + b"\n")
    report = _audit(tmp_path / "run")
    assert report["exit"] == 1 and report["continued"]["broken"] == 1
    assert any(f["level"] == "fail" and "`continued`'s shares add up to 35 tokens, the reply has 40" in f["message"]
               for f in report["findings"]), report["findings"]


def test_misuse_is_refused_before_anything_is_sent(tmp_path: Path, server: str) -> None:
    narrow = tmp_path / "narrow"
    _run(server, narrow, OLD)
    before = _generated(server)
    cases = [
        (["--extend", str(narrow), "--prompts", str(PROMPTS), "--train-window", "4096"], "it takes no --prompts"),
        (["--extend", str(narrow), "--train-window", "512"], "is not wider than"),
        (["--extend", str(narrow)], "--extend needs a new limit"),
        (["--extend", str(tmp_path / "nothing"), "--train-window", "4096"], "not a run folder"),
        (["--extend", str(narrow), "--train-window", "4096", "--turns", "all"], "--extend runs on one host"),
    ]
    for extra, message in cases:
        result = run_client(["--endpoints", server, "--out", str(tmp_path / "x"), "--plain", *extra])
        assert result.code == 2 and message in result.stderr, (extra, result.stderr)
        assert "Traceback" not in result.stderr
    ext = tmp_path / "ext"
    first = run_client(["--endpoints", server, "--extend", str(narrow), "--out", str(ext), "--plain",
                        "--train-window", "2048"], timeout=600)
    assert first.code == 0, first.stderr
    other = run_client(["--endpoints", server, "--extend", str(narrow), "--out", str(ext), "--plain",
                        "--train-window", "4096"])
    assert other.code == 2 and "give a new --out for this extension" in other.stderr, other.stderr
    assert _generated(server) > before  # the 2048 extension ran; the refusals sent nothing of their own
