"""What the trainers' rows are judged by, for the tests against the trainers' own code
(tests/test_trainer_fidelity.py) and for the table of docs/export.md (`python -m tests.engines.trainer_table`).

- `make_runs`: the two simulated runs (`--turns last`, `--turns all`) of prompts/sample.jsonl plus a few
  content-part prompts, served with the tiny tokenizer, `--token-ids on`, `--max-tokens 300`.
- `server_rows`: each record's server ids as the row the model generated: `input_ids` the prompt's and the
  reply's ids, `loss_mask` 0 on the prompt and 1 on the reply.
- `judge`: each row a trainer made (SpecForge's conversation path shuffles its rows and keeps no id) against
  the server row it begins with: its loss mask must be the server's split, and nothing past the reply may be
  supervised but the template's newline after an `<|im_end|>` the model generated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from client.export.render import ChatTokenizer
from simulator.config import DEFAULT_CHAT_TEMPLATE, ChatTemplateName
from simulator.tiny_tokenizer import tiny_tokenizer_dir as template_tokenizer_dir
from tests.conftest import REPO, read_results

Row = dict[str, Any]

SAMPLE = REPO / "prompts" / "sample.jsonl"
CONTENT_PARTS = [
    {"id": f"parts-{i}", "messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                                      {"role": "user", "content": [{"type": "text", "text": f"Question {i}:"},
                                                                   {"type": "text", "text": "what is the weather?"}]}]}
    for i in range(6)]


def _run(out: Path, prompts: Path, *extra: str, chat_template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> None:
    command = [sys.executable, "-m", "client.run", "--plain", "--simulate", "2", "--sim-speed", "400",
               f"--sim-arg=--tokenizer={template_tokenizer_dir(chat_template=chat_template)}",
               f"--sim-arg=--chat-template={chat_template}", "--sim-arg=--mean-tokens=150", "--token-ids", "on",
               "--max-tokens", "300",
               "--prompts", str(prompts), "--out", str(out), *extra]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 and chat_template != "qwen3":
        # Qwen3.6's own template refuses some of the sample's conversations (a system message after the
        # first: "Unexpected message role."), and a server answers those 400: failed prompts, not a failed run.
        refused = [json.loads(line) for path in (out / "failures").glob("*.jsonl") for line in path.open()]
        assert refused and all(r["error_class"] == "RequestRejected" for r in refused), done.stderr[-3000:]
        return
    assert done.returncode == 0, done.stderr[-3000:]


def make_runs(root: Path, chat_template: ChatTemplateName = DEFAULT_CHAT_TEMPLATE) -> dict[str, Path]:
    """The two simulated runs the trainers are held to, `--turns last` and `--turns all`, under `root`, the
    simulated fleet playing `chat_template`'s model with its template in the tiny tokenizer."""
    root.mkdir(parents=True, exist_ok=True)
    prompts = root / "prompts.jsonl"
    prompts.write_bytes(SAMPLE.read_bytes() + b"".join(json.dumps(p).encode() + b"\n" for p in CONTENT_PARTS))
    made = {"last": root / "last", "all": root / "all"}
    _run(made["last"], prompts, chat_template=chat_template)
    _run(made["all"], prompts, "--turns", "all", chat_template=chat_template)
    return made


def make_mixed_run(root: Path, plan: str) -> Path:
    """A `--turns last` simulated run under the sampling plan `plan` (inline or a file), under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    out = root / "mixed"
    _run(out, SAMPLE, "--sampling-plan", plan, "--seed", "3")
    return out


def server_rows(run: Path) -> dict[str, tuple[list[int], list[int]]]:
    """Each record's server ids as (input_ids, loss_mask): 0 on the prompt, 1 on what was generated."""
    rows = {}
    for record in read_results(run):
        prompt, completion = record["prompt_token_ids"], record["completion_token_ids"]
        rows[record["id"]] = (prompt + completion, [0] * len(prompt) + [1] * len(completion))
    return rows


def judge(rows: list[Row], server: dict[str, tuple[list[int], list[int]]], tok: ChatTokenizer) -> list[str]:
    """Each SpecForge row (shuffled, without ids) against the server row it begins with; the problems."""
    newline = tok.encode("\n")
    by_length = sorted(server.items(), key=lambda item: -len(item[1][0]))
    problems = []
    for row in rows:
        match = next(((rid, ids, mask) for rid, (ids, mask) in by_length if row["input_ids"][:len(ids)] == ids),
                     None)
        if match is None:
            problems.append(f"a row begins with no server row: {row['input_ids'][:12]}...")
            continue
        rid, ids, mask = match
        if row["loss_mask"][:len(ids)] != mask:
            problems.append(f"{rid}: the loss mask differs from the server's split of prompt and reply")
        tail = row["input_ids"][len(ids):]
        supervised_tail = [t for t, m in zip(tail, row["loss_mask"][len(ids):], strict=True) if m]
        if supervised_tail and (supervised_tail != newline or tok.decode(ids[-1:]) != tok.eos):
            problems.append(f"{rid}: supervises {tok.decode(supervised_tail)!r} past the reply")
    return problems


