"""An extended run trained by the trainers' own data code (SpecForge 0.2.0, speculators 0.9.0): a simulated run
under `--train-window 1024` (the tiny tokenizer, `--token-ids on`), extended to `--train-window 4096` with
`client.run --extend`, exported for SpecForge's `data.prompts_path` (`specforge-tokenized --require-exact-ids
--max-length 4096`) and for speculators. Every row the trainers read is the server's ids and the server's
split of prompt and reply, the extended rows included; none is longer than the window, so the trainer cuts
no extended reply.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simulator.api import SimFleet, SimServerSpec
from tests.conftest import REPO, read_results, run_client
from tests.engines.trainer_checks import server_rows
from tests.engines.trainers import specforge_tokenized, speculators_rows
from tests.tokenizer_fixture import tiny_tokenizer_dir

pytestmark = [pytest.mark.trainers, pytest.mark.usefixtures("specforge_venv", "speculators_venv")]

PROMPTS = REPO / "prompts" / "sample.jsonl"
OLD, NEW = 1024, 4096


@pytest.fixture(scope="module")
def extended(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("extend-trainers")
    spec = SimServerSpec(max_running=32, speed=200.0,
                         extra_args=("--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "900"))
    with SimFleet([spec], log_dir=tmp / "sim-logs") as fleet:
        yield _extend(str(fleet.urls[0]), tmp)


def _extend(url: str, tmp: Path) -> dict[str, Any]:
    narrow, wide = tmp / "narrow", tmp / "extended"
    first = run_client(["--endpoints", url, "--prompts", str(PROMPTS), "--out", str(narrow), "--plain",
                        "--train-window", str(OLD), "--token-ids", "on"], timeout=600)
    assert first.code == 0, first.stderr
    second = run_client(["--endpoints", url, "--extend", str(narrow), "--out", str(wide), "--plain",
                         "--train-window", str(NEW)], timeout=600)
    assert second.code == 0, second.stderr
    records = read_results(wide)
    continued = {r["id"] for r in records if "continued" in r}
    assert len(continued) > 20
    return {"run": wide, "records": records, "continued": continued, "tmp": tmp}


def _export(run: Path, out: Path, fmt: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "client.export", str(run), "--tokenizer", str(tiny_tokenizer_dir()),
                           "--format", fmt, "--require-exact-ids", "--max-length", str(NEW), "--out", str(out),
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("fmt", ["specforge-tokenized", "speculators"])
def test_the_trainers_train_every_extended_row_on_the_server_ids(extended: dict[str, Any], fmt: str) -> None:
    out = extended["tmp"] / f"{fmt}.jsonl"
    report = _export(extended["run"], out, fmt)
    written = [json.loads(line) for line in out.read_text().splitlines()]
    server = server_rows(extended["run"])
    assert report["rows"] == len(written) == len(extended["records"])
    for line in written:
        assert (line["input_ids"], line["loss_mask"]) == server[line["id"]]
    assert extended["continued"] <= {line["id"] for line in written}
    reader = speculators_rows if fmt == "speculators" else specforge_tokenized
    trained = reader(out, tiny_tokenizer_dir(), NEW)
    # Rows in = rows out, each the server's ids and split; the trainer cut none of them at its window.
    assert sorted((r["input_ids"], r["loss_mask"]) for r in trained) == sorted(server.values())
    longest = max(len(ids) for ids, _ in server.values())
    assert OLD < longest <= NEW
