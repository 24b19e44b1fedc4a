"""One figure, one answer, at a stop: the Ctrl-C summary counts the tokens the progress line counts (those of
written replies, then those streamed that no record holds), names the requests cancelled in flight and
counts them apart from the prompts never sent; the resume that follows has an ETA from the records done,
never 0 while prompts are left; and the live MTP accept length is the servers' tokens per verify step,
which the audit's per-step figure of the same records matches. Real simulated servers."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.fleet import SimServerSpec
from simulator.tokens import MEAN_ACCEPT_LENGTH
from tests.conftest import REPO, client_command, make_prompts, read_results, wait_for_records

_WRITTEN = re.compile(r"([\d,]+) completion tokens written")
_UNWRITTEN = re.compile(r"([\d,]+) more token\(s\) were streamed but are in no written record: ([\d,]+) request\(s\) "
                        r"cancelled in flight")
_CANCELLED = re.compile(r"cancelled in flight \(sent again by the next run\): (.+)")
_RECONCILED = re.compile(r"\+ cancelled-in-flight ([\d,]+)")
_PROGRESS = re.compile(r"tokens (\S+)(?: \(\+(\S+) in flight\))? tok/s")


def number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.slow
def test_ctrl_c_summary_counts_what_the_progress_line_counts(tmp_path: Path, fleet_factory: Any) -> None:
    # Long replies at a slow pace: at the stop, most requests are mid-stream.
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=2.0, extra_args=("--mean-tokens", "400"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 200)
    out = tmp_path / "out"
    command = client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                              "--grace", "0", "--max-tokens", "2000"])
    command[command.index("--progress-every") + 1] = "0.5"
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_records(out, 3, proc=proc, timeout=120)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    records = read_results(out)
    written = sum(r["usage"]["completion_tokens"] for r in records)
    assert number(_WRITTEN.search(stderr).group(1)) == written  # type: ignore[union-attr]
    unwritten = _UNWRITTEN.search(stderr)
    assert unwritten is not None, stderr[-3000:]
    cancelled = number(unwritten.group(2))
    assert cancelled >= 1 and number(unwritten.group(1)) > 0
    names = _CANCELLED.search(stderr)
    assert names is not None
    ids = [json.loads(part) for part in names.group(1).split(", ")]
    assert len(ids) == min(cancelled, 20) and not {r["id"] for r in records} & set(ids)
    reconciled = _RECONCILED.search(stderr)
    assert reconciled is not None and number(reconciled.group(1)) == cancelled
    # The progress line split its tokens the same way: written, then "+N in flight" while requests streamed.
    lines = [m for m in (_PROGRESS.search(line) for line in stdout.splitlines()) if m]
    assert any(m.group(2) for m in lines), stdout[-2000:]


@pytest.mark.slow
def test_live_accept_length_and_the_audit_agree(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=20.0,
                                         extra_args=("--mean-tokens", "200", "--tokens-per-chunk", "4"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 60)
    out = tmp_path / "out"
    command = client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out)])
    command[command.index("--progress-every") + 1] = "0.3"
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    live = {float(x) for x in re.findall(r"accept-len ([\d.]+) tok/step", run.stdout)}
    assert live and all(x == pytest.approx(MEAN_ACCEPT_LENGTH, abs=0.005) for x in live), run.stdout[-1000:]
    records = read_results(out)
    steps = sum(r["spec"]["verify_ct"] for r in records)
    per_step = sum(r["usage"]["completion_tokens"] for r in records) / steps
    assert per_step == pytest.approx(MEAN_ACCEPT_LENGTH, rel=0.05)  # the same average, over these replies
    audit = subprocess.run([sys.executable, "-m", "client.audit", str(out)], cwd=REPO, capture_output=True,
                           text=True, timeout=120, check=False)
    table = audit.stdout[audit.stdout.index("MTP accept length"):]
    assert "tokens/step" in table and "mean/request" in table, table[:600]
    assert f"{per_step:.2f}" in table


_LINE = re.compile(r"done (\d+)/(\d+) .* eta (\S+)")


@pytest.mark.slow
def test_a_resume_shows_an_eta_from_the_records_done_and_never_0_while_work_is_left(tmp_path: Path,
                                                                                     fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=4.0, extra_args=("--mean-tokens", "200"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 40)
    out = tmp_path / "out"
    command = client_command(["--endpoints", fleet.urls[0], "--prompts", str(prompts), "--out", str(out),
                              "--grace", "0", "--max-tokens", "1500"])
    command[command.index("--progress-every") + 1] = "0.5"
    first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_records(out, 10, proc=first, timeout=120)
    first.send_signal(signal.SIGINT)
    _, stderr = first.communicate(timeout=60)
    assert first.returncode == 130, stderr[-2000:]
    resumed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    lines = [m for m in (_LINE.search(line) for line in resumed.stdout.splitlines()) if m]
    under_way = [m for m in lines if int(m.group(1)) < int(m.group(2))]
    assert under_way, resumed.stdout[-2000:]
    assert all(m.group(3) != "0s" for m in under_way), "ETA 0 while prompts were left"
    assert any(re.match(r"\d", m.group(3)) for m in under_way), "the resume's ETA was never known"
