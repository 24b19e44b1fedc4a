"""The audit reports replies that loop, in any run: how many, and what share of the completion tokens they
cost (client/audit/loops.py). On synthetic records, and on a run against simulated servers that loop a
seeded share of the prompts (`--loop-rate`)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.config import SimConfig
from simulator.fleet import SimServerSpec
from simulator.script import build_script
from tests.conftest import REPO, make_prompts, read_results, run_client
from tests.results_fixture import result, write_segment
from tests.test_audit import audit, messages

WORDS = ("we", "need", "to", "check", "the", "value", "again", "so", "let", "me", "think", "about", "cache")


def prose(seed: int, chars: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(chars // 3))[:chars]


def looping(seed: int, block_chars: int = 300, repeats: int = 40) -> str:
    return prose(seed, 2000) + ("\n\nWait, " + prose(seed + 1, block_chars - 8) + ".") * repeats


def test_loops_are_counted_with_their_tokens(tmp_path: Path) -> None:
    records = [result(f"ok{i}", reasoning=prose(i, 6000), content="The answer.", completion_tokens=1500)
               for i in range(16)]
    records += [result("loop-length", reasoning=looping(1), content="", completion_tokens=4000,
                       finish_reason="length"),
                result("loop-content", reasoning="Short.", content=looping(2, 120, 80), completion_tokens=2000,
                       finish_reason="length", thinking=False),
                # Stopped by a loop stop before the rule was met here: counted by its finish reason.
                result("stopped", reasoning=prose(3, 900), content="", completion_tokens=500,
                       finish_reason="repetition")]
    write_segment(tmp_path / "run", records)
    code, data, _ = audit(str(tmp_path / "run"))
    assert code == 0, messages(data)  # loops are a warning, not broken data
    loops = data["loops"]
    total = 16 * 1500 + 4000 + 2000 + 500
    assert (loops["records"], loops["completion_tokens"]) == (3, 6500)
    assert (loops["stopped"], loops["ran_to_the_cap"]) == (1, 2)
    assert loops["token_share"] == round(6500 / total, 4)
    # The repeated tails: most of each looping reply, nothing of the stopped one.
    assert 0.75 * 6000 < loops["repeated_tokens"] < 6000
    assert "3 reply(s) (15.8%) loop" in messages(data)
    assert "unusual finish reasons" not in messages(data)
    assert [e.split(": ")[1] for e in loops["examples"]] == ["loop-length", "loop-content", "stopped"]
    table = subprocess.run([sys.executable, "-m", "client.audit", str(tmp_path / "run")], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=False).stdout
    assert "3 record(s) (15.8%); 6,500 tokens" in table and "looping replies, e.g.:" in table


def test_a_run_without_loops_reports_none(tmp_path: Path) -> None:
    write_segment(tmp_path / "run", [result(f"p{i}", reasoning=prose(i, 9000)) for i in range(5)])
    _, data, _ = audit(str(tmp_path / "run"))
    assert data["loops"]["records"] == 0 and data["loops"]["examples"] == []
    assert "loop" not in messages(data)


@pytest.mark.slow
def test_a_simulated_run_with_a_loop_share(tmp_path: Path, fleet_factory: Any) -> None:
    """The servers loop a seeded share of the prompts to max_tokens; the run has no loop stop, and the audit
    finds exactly the replies the simulator's script says loop, with their tokens."""
    mean, cap = 400, 3000
    # Word pieces as tokens (no tokenizer): the script's loop spans are then the replies' token counts.
    settings = ("--tokens-per-chunk", "32", "--mean-tokens", str(mean), "--loop-rate", "0.25", "--tokenizer", "none")
    fleet = fleet_factory([SimServerSpec(max_running=32, speed=50.0, extra_args=settings)] * 2)
    prompts = make_prompts(tmp_path / "p.jsonl", 60, with_tools_every=3)
    run = run_client(["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts), "--out", str(tmp_path / "o"),
                      "--max-tokens", str(cap), "--loop-stop", "off"])
    assert run.code == 0, run.stderr[-2000:]
    code, data, stderr = audit(str(tmp_path / "o"), "--prompts", str(prompts))
    assert code == 0, (messages(data), stderr)
    config = SimConfig(mean_tokens=mean, loop_rate=0.25)
    records = read_results(tmp_path / "o")
    expected = [r for r in records if build_script({"messages": r["messages"], "tools": r.get("tools")},
                                                   r["sampling"]["enable_thinking"], config).loop]
    assert 5 <= len(expected) <= 30
    loops = data["loops"]
    assert loops["records"] == loops["ran_to_the_cap"] == len(expected)
    assert loops["completion_tokens"] == len(expected) * cap
    total = sum(r["usage"]["completion_tokens"] for r in records)
    assert loops["token_share"] == round(len(expected) * cap / total, 4)
    # Most of a looping reply is the loop: its onset is within the first half of a normal reply's length.
    assert loops["repeated_tokens"] > 0.6 * len(expected) * cap
    assert f"{len(expected):,} reply(s)" in messages(data)


def test_a_complete_reply_is_only_suspected_and_a_near_loop_is_counted(tmp_path: Path) -> None:
    from bench.loop_corpus import by_name

    checklist = by_name("runbook_450").text  # asked for: its tail repeats, with counters
    drift = by_name("drift_every_repeat").text  # a loop no exact rule finds, run to its cap
    records = [result("asked", reasoning="", content=checklist, completion_tokens=5600, thinking=False),
               result("asked-cut", reasoning="", content=checklist, completion_tokens=5600, finish_reason="length",
                      thinking=False),
               result("drift", reasoning=drift, content="", completion_tokens=16384, finish_reason="length"),
               result("drift-ended", reasoning=drift, content="Done.", completion_tokens=16384)]
    write_segment(tmp_path / "run", records)
    code, data, _ = audit(str(tmp_path / "run"))
    assert code == 0, messages(data)
    loops = data["loops"]
    # The complete runbook is a suspicion; cut at its cap, it reads as a loop (the text cannot tell). The
    # drifting loop that ended by itself is neither: the near-repeat finder reads only replies cut at a cap.
    assert (loops["records"], loops["suspected"], loops["near"]) == (2, 1, 1)
    assert loops["completion_tokens"] == 5600 + 16384
    assert [e.split(": ")[1] for e in loops["examples"]] == ["asked-cut", "drift"]
    assert [e.split(": ")[1] for e in loops["suspected_examples"]] == ["asked"]
    assert "1 reply(s) ended by themselves (finish_reason stop) with a repeating tail: only a suspicion" \
        in messages(data)
