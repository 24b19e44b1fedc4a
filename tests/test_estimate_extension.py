"""`client.estimate --extend-from N0 --train-window N` (client/estimate/extension.py): what continuing the replies a
narrower window cut would cost, against generating them again. The per-record arithmetic is a table; on the
simulated server a calibration of the whole sample set projects exactly what `client.run --extend` then does:
the same cut replies, and the tokens the server generates for them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from client.estimate.extension import record_columns
from simulator.api import SimServerSpec
from tests.conftest import REPO, read_results, run_client
from tests.tokenizer_fixture import tiny_tokenizer_dir

PROMPTS = REPO / "prompts" / "sample.jsonl"


@pytest.mark.parametrize(("completion", "prompt", "max_tokens", "expected"), [
    (500, 100, 8192, (0, 0, 0, 0, 0)),  # fits the narrow window: FROM has it whole
    (2000, 100, 8192, (1, 2000 - 924, 2000, 0, 0)),  # cut at 924, ends by itself under the wide one
    (9000, 100, 8192, (1, 3996 - 924, 3996, 0, 0)),  # cut at 924, cut again at 3996
    (2000, 100, 1500, (1, 1500 - 924, 1500, 0, 0)),  # max_tokens binds before the wide window
    (700, 100, 800, (0, 0, 0, 0, 0)),  # max_tokens below the narrow room: never cut by the window
    (300, 1500, 8192, (0, 0, 0, 1, 300)),  # fills the narrow window alone: a new prompt, generated whole
    (9000, 1500, 8192, (0, 0, 0, 1, 4096 - 1500)),
    (300, 5000, 8192, (0, 0, 0, 0, 0)),  # fills both: sent by neither
    (924, 100, 8192, (0, 0, 0, 0, 0)),  # exactly the narrow room: not cut
    (925, 100, None, (1, 1, 925, 0, 0)),  # no max_tokens: the reply's own length
])
def test_what_an_extension_generates_per_record(completion: int, prompt: int, max_tokens: int | None,
                                                expected: tuple[int, ...]) -> None:
    assert record_columns(completion, prompt, 1024, 4096, max_tokens) == tuple(float(x) for x in expected)


def _estimate(tokenizer: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "client.estimate", "--simulate", "1",
                           f"--sim-arg=--tokenizer={tokenizer}", "--sim-arg=--mean-tokens=900", "--prompts",
                           str(PROMPTS), "--sample", "100%", "--train-window", "4096", "--extend-from", "1024",
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    extension: list[dict[str, Any]] = json.loads(done.stdout)["projection"]["extension"]
    assert len(extension) == 1
    return extension[0]


@pytest.mark.slow
@pytest.mark.timeout(400)  # whole runs; far longer on a busy machine
def test_the_projection_of_the_whole_set_is_what_the_extension_does(tmp_path: Path, fleet_factory: Any) -> None:
    tokenizer = tiny_tokenizer_dir()
    priced = _estimate(tokenizer)
    spec = SimServerSpec(max_running=32, speed=200.0,
                         extra_args=("--tokenizer", str(tokenizer), "--mean-tokens", "900"))
    url = str(fleet_factory([spec]).urls[0])
    narrow, extended = tmp_path / "narrow", tmp_path / "extended"
    first = run_client(["--endpoints", url, "--prompts", str(PROMPTS), "--out", str(narrow), "--plain",
                        "--train-window", "1024", "--token-ids", "on"], timeout=600)
    assert first.code == 0, first.stderr
    second = run_client(["--endpoints", url, "--extend", str(narrow), "--out", str(extended), "--plain",
                         "--train-window", "4096"], timeout=600)
    assert second.code == 0, second.stderr
    before = {r["id"]: r for r in read_results(narrow)}
    after = {r["id"]: r for r in read_results(extended)}
    cut = [i for i, r in before.items() if r["finish_reason"] == "length"]
    generated = sum(len(after[i]["completion_token_ids"]) - len(before[i]["completion_token_ids"]) for i in cut)
    regenerated = sum(len(after[i]["completion_token_ids"]) for i in cut)
    # Every prompt measured, replies a function of the request: the projection is the extension's own count.
    assert priced["cut_replies"]["point"] == pytest.approx(len(cut))
    # The simulator tokenizes a cut reply's text itself, so the ids at the cut may differ by a token or two.
    assert priced["continued_tokens"]["point"] == pytest.approx(generated, rel=0.01)
    assert priced["regenerated_tokens"]["point"] == pytest.approx(regenerated, rel=0.01)
    assert priced["new_prompts"] == pytest.approx(264 - len(before))
