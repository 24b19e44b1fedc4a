"""A sampling plan end to end: the real CLI on a simulated fleet, with four settings and a source rule. Every
record's `sampling` is its draw recomputed from (plan, seed, id); the realised shares are within a binomial
bound of the plan's; a kill -9 and resume, and two shards, draw the same; run.json keeps the plan, and a
resume with another plan is refused; a field the run does not send is refused at start, named."""

from __future__ import annotations

import collections
import math
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from statistics import NormalDist
from typing import Any

import orjson
import pytest

from client.core.payload import FieldPolicy, RequestShape
from client.core.plan_file import read_plan
from client.core.records import Prompt
from client.local.run_settings import RUN_FILE
from client.run.cli import build_parser, settings_from
from simulator.fleet import SimFleet, SimServerSpec
from tests.conftest import (
    REPO,
    client_command,
    make_prompts,
    read_results,
    read_whole_results,
    run_client,
    wait_for_records,
)
from tests.servers.harness import ServerGroup

# The size of the set; the closing measurement runs the same tests at 3,000 (PLAN_E2E_PROMPTS=3000).
PROMPTS = int(os.environ.get("PLAN_E2E_PROMPTS", "360"))
SEED = "11"
SOURCES = ("chat", "agentic", "reasoning")
PLAN = """
name = "e2e mix"
[defaults]
max_tokens = 200
[settings.think-cool]
enable_thinking = true
temperature = 0.6
top_p = 0.95
[settings.think-warm]
enable_thinking = true
temperature = 1.0
top_p = 0.95
[settings.chat-cool]
enable_thinking = false
temperature = 0.7
top_p = 0.8
[settings.chat-warm]
enable_thinking = false
temperature = 1.0
top_p = 0.8
presence_penalty = 0.5
[[rules]]
name = "short chat"
match = { source = "chat" }
use = ["chat-cool", "chat-warm"]
[[rules]]
name = "agentic and reasoning"
match = { source = ["agentic", "reasoning"] }
use = { think-cool = 3, think-warm = 1 }
"""
FAST = ("--mean-tokens", "60", "--tokens-per-chunk", "4")
CLIENT = ("--max-in-flight", "24", "--idle-timeout", "10", "--max-attempts", "8", "--grace", "5", "--seed", SEED)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    sim = SimFleet([SimServerSpec(max_running=16, speed=10.0, extra_args=FAST)] * 2,
                   log_dir=tmp_path_factory.mktemp("sim-logs"))
    sim.start()
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("plan-input")
    lines = [orjson.dumps({"id": f"p{i:06d}", "messages": [{"role": "user", "content": f"Question {i}: why {i % 13}?"}],
                           "meta": {"source": SOURCES[i % 3], "n": i}}) for i in range(PROMPTS)]
    (folder / "prompts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (folder / "plan.toml").write_text(PLAN)
    return folder / "prompts.jsonl", folder / "plan.toml"


def args_for(fleet: SimFleet, files: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    return ["--endpoints", ",".join(fleet.urls), "--prompts", str(files[0]), "--out", str(out),
            "--sampling-plan", str(files[1]), *CLIENT, *extra]


def expected_shape(args: list[str]) -> RequestShape:
    """The shape the run settles, rebuilt from the same command line: SGLang takes every extension field."""
    parsed = build_parser().parse_args(args)
    base = settings_from(parsed)
    return RequestShape("m", base, FieldPolicy.everything(), plan=read_plan(parsed.sampling_plan, base))


def check_draws(records: list[dict[str, Any]], shape: RequestShape) -> None:
    """Every record's sampling is its draw, recomputed from (plan, seed, id) and its meta."""
    for record in records:
        prompt = Prompt(id=record["id"], messages=record["messages"], tools=None, meta=record["meta"], source="",
                        line=0)
        assert record["sampling"] == shape.recorded(prompt), record["id"]


def check_once(records: list[dict[str, Any]], ids: set[str]) -> None:
    counts = collections.Counter(r["id"] for r in records)
    assert not [i for i, n in counts.items() if n > 1] and set(counts) == ids


@pytest.mark.slow
def test_every_record_is_its_draw_and_the_shares_are_the_plans(fleet: SimFleet, files: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = args_for(fleet, files, out)
    result = run_client(args)
    assert result.code == 0, result.stderr[-3000:]
    assert "sampling plan e2e mix (" in result.stderr
    records = read_results(out)
    check_once(records, {f"p{i:06d}" for i in range(PROMPTS)})
    shape = expected_shape(args)
    check_draws(records, shape)
    thinking = {r["sampling"]["plan"]["setting"]: r["sampling"]["enable_thinking"] for r in records}
    assert thinking == {"think-cool": True, "think-warm": True, "chat-cool": False, "chat-warm": False}
    assert all(not r["reasoning"] for r in records if not r["sampling"]["enable_thinking"])

    # Shares per rule: each setting's count within a two-sided binomial bound (alpha 1e-3, Bonferroni over
    # the settings of the rule) of the plan's share.
    plan = shape.the_plan
    for source in SOURCES:
        group = [r for r in records if r["meta"]["source"] == source]
        asked = plan.shares({"source": source})
        got = collections.Counter(r["sampling"]["plan"]["setting"] for r in group)
        assert set(got) <= set(asked)
        z = NormalDist().inv_cdf(1 - 1e-3 / (2 * len(asked)))
        for name, p in asked.items():
            n = len(group)
            assert abs(got[name] - n * p) <= z * math.sqrt(n * p * (1 - p)), (source, name, dict(got), asked)

    # The audit shows the mix per source, asked (the plan in run.json) vs obtained, none outside chance.
    audit = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], cwd=REPO, capture_output=True,
                           check=False)
    # (Exit 1 is the audit judging the simulated replies short, which is not this test's business.)
    assert audit.returncode in (0, 1), audit.stderr[-2000:]
    report = orjson.loads(audit.stdout)
    rows = {(r["source"], r["setting"]): r for r in report["sampling_plan"]}
    assert set(rows) == {(s, n) for s in SOURCES for n in plan.shares({"source": s})}
    for (source, name), row in rows.items():
        assert row["asked"] == plan.shares({"source": source})[name] and row["outside_chance"] is False
        assert row["records"] == sum(r["meta"]["source"] == source and r["sampling"]["plan"]["setting"] == name
                                     for r in records)
    assert not [f for f in report["findings"] if "settings" in f["message"] or "plan" in f["message"]]

    # run.json keeps the plan; a resume with another plan is refused, and allowed when asked for.
    recorded = orjson.loads((out / RUN_FILE).read_bytes())["settings"]
    assert recorded["sampling_plan"]["sha256"] == plan.sha256 and recorded["sampling_plan"]["seed"] == int(SEED)
    assert "sampling" not in recorded
    other = files[1].with_name("other.toml")
    other.write_text(PLAN.replace("think-cool = 3, think-warm = 1", "think-cool = 1, think-warm = 1"))
    changed = [a if a != str(files[1]) else str(other) for a in args]
    refused = run_client(changed)
    assert refused.code == 2, refused.stderr[-2000:]
    assert "sampling_plan.rules" in refused.stderr and "sampling_plan.sha256" in refused.stderr
    allowed = run_client([*changed, "--allow-settings-change"])
    assert allowed.code == 0, allowed.stderr[-2000:]


@pytest.mark.slow
def test_a_killed_run_and_two_shards_draw_the_same(fleet: SimFleet, files: tuple[Path, Path], tmp_path: Path) -> None:
    ids = {f"p{i:06d}" for i in range(PROMPTS)}
    out = tmp_path / "killed"
    args = args_for(fleet, files, out)
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_records(out, 60, proc=proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    first = read_whole_results(out)
    assert 0 < len(first) < PROMPTS
    resumed = run_client(args)
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert f"resuming: {len(first):,} done id(s)" in resumed.stderr
    records = read_results(out)
    check_once(records, ids)
    shape = expected_shape(args)
    check_draws(records, shape)

    sharded: list[dict[str, Any]] = []
    for k in (0, 1):
        shard = run_client(args_for(fleet, files, tmp_path / f"shard{k}", "--shard", f"{k}/2"))
        assert shard.code == 0, shard.stderr[-3000:]
        sharded += read_results(tmp_path / f"shard{k}")
    check_once(sharded, ids)
    check_draws(sharded, shape)
    by_id = {r["id"]: r["sampling"] for r in records}
    assert all(by_id[r["id"]] == r["sampling"] for r in sharded), "a shard draws what one run draws"


def test_a_plan_field_the_servers_do_not_take_is_refused_at_start(fleet: SimFleet, files: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_client(args_for(fleet, files, out, "--compat", "openai"))
    assert result.code == 2, result.stderr[-2000:]
    assert (f"the sampling plan {files[1]} asks for enable_thinking (setting 'think-cool', 'think-warm', "
            "'chat-cool', 'chat-warm')") in result.stderr
    assert "--compat sglang" in result.stderr
    assert not (out / "segments").exists() or not read_results(out)


def test_a_bad_plan_exits_2_naming_file_and_key(files: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(PLAN.replace("top_p = 0.8\npresence_penalty", "top_p = 2\npresence_penalty"))
    result = run_client(["--simulate", "1", "--prompts", str(files[0]), "--out", str(tmp_path / "o"),
                         "--sampling-plan", str(bad)])
    assert result.code == 2
    assert f"--sampling-plan: {bad}: settings.chat-warm.top_p: must be a number in (0, 1], got 2" in result.stderr


@pytest.mark.parametrize("mode", ["strict400", "strict422"])
def test_a_server_that_refuses_a_plans_field_stops_the_preflight(mode: str, servers: ServerGroup,
                                                                 tmp_path: Path) -> None:
    """The preflight carries every field any setting sends (here one setting's `extra`), so a server that
    refuses it stops the run at start, the field named, nothing dispatched."""
    server = servers.oddserver(mode)
    plan = tmp_path / "plan.toml"
    plan.write_text("[settings.plain]\nweight = 9\n[settings.penalised]\nextra = { repetition_penalty = 1.05 }\n")
    prompts = make_prompts(tmp_path / "p.jsonl", 6)
    refused = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                          "--compat", "sglang", "--sampling-plan", str(plan)])
    assert refused.code == 2, refused.stderr
    assert "refused the run's request before any prompt was sent" in refused.stderr
    assert "repetition_penalty" in refused.stderr.split("Refused field(s): ")[1].split(".")[0]
    posts = [r["json"] for r in server.log_records() if r.get("method") == "POST"]
    assert len(posts) == 1 and posts[0]["repetition_penalty"] == 1.05 and posts[0]["max_tokens"] == 1
