"""The estimate under a sampling plan: strata of source and drawn setting (pure: the draw is by id, so each
setting's count in the set is exact), and end to end on simulated servers: the sample is sent with each
prompt's draw, as the run sends it, and the projection has one row per setting beside the whole set's,
which they add up to. A plan that cannot be read is refused before anything is sent."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.core.payload import SamplingSettings
from client.core.plan_file import read_plan
from client.core.records import Prompt
from client.estimate.main import per_setting
from client.estimate.sample import by_setting, census, setting_of, stratum_of
from tests.conftest import REPO

PROMPTS = 360
SEED = 11
SOURCES = ("chat", "agentic", "reasoning")
PLAN = """
name = "estimate mix"
[defaults]
max_tokens = 300
[settings.think-cool]
enable_thinking = true
temperature = 0.6
[settings.think-warm]
enable_thinking = true
temperature = 1.0
[settings.chat-cool]
enable_thinking = false
temperature = 0.7
[settings.chat-warm]
enable_thinking = false
temperature = 1.0
[[rules]]
name = "short chat"
match = { source = "chat" }
use = ["chat-cool", "chat-warm"]
[[rules]]
name = "agentic and reasoning"
use = { think-cool = 3, think-warm = 1 }
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    lines = [orjson.dumps({"id": f"p{i:06d}", "messages": [{"role": "user", "content": f"Question {i}: why {i % 13}?"}],
                           "meta": {"source": SOURCES[i % 3]}}) for i in range(PROMPTS)]
    (tmp_path / "prompts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "plan.toml").write_text(PLAN)
    return tmp_path / "prompts.jsonl", tmp_path / "plan.toml"


def drawn(prompts: Path, plan_path: Path, seed: int | None) -> collections.Counter[str]:
    plan = read_plan(str(plan_path), SamplingSettings())
    counts: collections.Counter[str] = collections.Counter()
    for line in prompts.read_bytes().splitlines():
        record = orjson.loads(line)
        counts[plan.draw(seed, record["id"], record["meta"]).setting.name] += 1
    return counts


@pytest.mark.parametrize(("stratum", "setting"), [
    ("chat \u00b7 setting think-cool", "think-cool"),
    ("chat", None),  # no plan: a source alone
    ("a \u00b7 setting b \u00b7 setting c", "c"),  # a source whose own name holds the mark: the last one counts
])
def test_setting_of(stratum: str, setting: str | None) -> None:
    assert setting_of(stratum) == setting


@pytest.mark.parametrize("seed", [None, SEED])
def test_each_setting_counts_the_sets_own_draws(files: tuple[Path, Path], seed: int | None) -> None:
    plan = read_plan(str(files[1]), SamplingSettings())
    counted = census([files[0]], stratifier=by_setting(plan, seed))
    rows = dict(per_setting(plan, counted.strata))
    assert {label.removeprefix("setting "): sum(c.values()) for label, c in rows.items()} == drawn(*files, seed)
    # The source stays in the stratum: chat draws only the chat settings.
    assert all(name.startswith("chat ") == (setting_of(name) or "").startswith("chat-") for name in counted.strata)
    assert sum(counted.strata.values()) == PROMPTS


def test_without_a_plan_a_stratum_is_its_source() -> None:
    prompt = Prompt(id="x", messages=[], tools=None, meta={"source": "chat"}, source="f.jsonl", line=1)
    assert stratum_of(prompt) == "chat"


def _estimate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "client.estimate", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.slow
def test_the_projection_has_a_row_per_setting_and_the_sample_its_draws(files: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "calibration"
    done = _estimate("--simulate", "2", "--sample", "120", "--prompts", str(files[0]), "--sampling-plan",
                     str(files[1]), "--run-seed", str(SEED), "--out", str(out), "--progress-every", "60",
                     "--sim-arg=--mean-tokens", "--sim-arg=60", "--sim-arg=--tokens-per-chunk", "--sim-arg=4",
                     "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    expected = drawn(*files, SEED)
    assert report["input"]["sampling_plan"]["prompts"] == dict(expected)
    targets = {t["label"]: t for t in report["projection"]["targets"]}
    assert set(targets) == {"whole set"} | {f"setting {name}" for name in expected}
    rows = [t for label, t in targets.items() if label != "whole set"]
    assert sum(t["prompts"] for t in rows) == targets["whole set"]["prompts"] == PROMPTS
    whole = targets["whole set"]["output_tokens"]["point"]
    assert sum(t["output_tokens"]["point"] for t in rows) == pytest.approx(whole, rel=1e-9)
    # Thinking off is priced as thinking off: no reasoning tokens in the chat settings' rows.
    for label, target in targets.items():
        if label.startswith("setting chat-"):
            assert target["reasoning_tokens"] == 0
        elif label.startswith("setting think-"):
            assert target["reasoning_tokens"] > 0
    # The sample went out with each prompt's own draw, as client.run sends it.
    plan = read_plan(str(files[1]), SamplingSettings())
    records = [orjson.loads(line) for path in sorted((out / "segments").rglob("*.jsonl")) for line in
               path.read_bytes().splitlines() if line.strip()]
    assert len(records) == 120
    for record in records:
        draw = plan.draw(SEED, record["id"], record["meta"])
        assert record["sampling"]["plan"]["setting"] == draw.setting.name, record["id"]
        assert record["sampling"]["enable_thinking"] == draw.setting.values.enable_thinking


def test_a_plan_that_cannot_be_read_is_refused_before_anything_is_sent(files: tuple[Path, Path]) -> None:
    done = _estimate("--endpoints", "http://127.0.0.1:9", "--prompts", str(files[0]), "--sampling-plan",
                     "hot = {temprature = 0.6}")
    assert done.returncode == 2, done.stderr
    assert "temprature: unknown key" in done.stderr and "Traceback" not in done.stderr
