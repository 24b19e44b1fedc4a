"""A server's Retry-After is honoured only up to --max-retry-after (default 300 s), and a request waiting
for its next attempt shows in the progress line with its wake time.

The server is oddserver's `retry_after_once` (one 429 with `Retry-After: 100000`, then normal answers).
The tests wait on what the client prints or writes, never on wall time.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
from pathlib import Path

from client.core.stats import RunStats
from client.engine.retry import DEFAULT_MAX_RETRY_AFTER_S
from client.run.console import progress_line
from tests.conftest import REPO, client_command, make_prompts, read_results, run_client
from tests.servers.harness import ServerGroup


def test_waits_show_in_the_progress_line() -> None:
    stats = RunStats()
    first = stats.begin_wait(12.5)
    stats.begin_wait(299.5)
    assert "waiting 2 (wake in 12s-4m59s)" in progress_line(stats.snapshot())
    stats.end_wait(first)
    assert "waiting 1 (wake in 4m59s)" in progress_line(stats.snapshot())


def test_a_long_retry_after_is_cut_to_the_option(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("retry_after_once")
    prompts = make_prompts(tmp_path / "prompts.jsonl", 1, with_tools_every=0)
    out = tmp_path / "out"
    result = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(out),
                         "--max-retry-after", "1"], timeout=120)
    assert result.code == 0, result.stderr
    [record] = read_results(out)
    assert record["attempts"] == 2


def test_the_default_cap_shows_as_a_waiting_request(servers: ServerGroup, tmp_path: Path) -> None:
    """Without the option, the wait is the default cap (not 28 hours), and the progress line says so."""
    server = servers.oddserver("retry_after_once")
    prompts = make_prompts(tmp_path / "prompts.jsonl", 1, with_tools_every=0)
    args = ["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
            "--progress-every", "0.2"]
    proc = subprocess.Popen(client_command(args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    waiting = None
    try:
        for _ in range(1000):  # bounded: one progress line every 0.2 s
            line = lines.get(timeout=60)
            if line is None or "waiting" in line:
                waiting = line
                break
    finally:
        proc.send_signal(signal.SIGINT)  # a stop ends the wait at once
        proc.wait(timeout=60)
    assert waiting is not None, "the run ended without showing a waiting request"
    assert DEFAULT_MAX_RETRY_AFTER_S == 300.0
    assert "waiting 1 (wake in 4m" in waiting or "waiting 1 (wake in 5m00s)" in waiting, waiting
