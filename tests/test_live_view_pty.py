"""The live view as a person sees it: the client runs in a pseudo-terminal (pexpect), its output is played
into a terminal emulator (pyte), and the screen is read back as text.

`python -m tests.test_live_view_pty` captures one screen into docs/live-view.txt (docs/monitoring.md shows it).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from pathlib import Path

import pexpect
import pyte
import pytest

REPO = Path(__file__).resolve().parent.parent
ROWS, COLUMNS = 24, 170
DOC = REPO / "docs" / "live-view.txt"


def _prompts(path: Path, count: int) -> Path:
    lines = [f'{{"id": "q{i:04d}", "messages": [{{"role": "user", "content": "Question {i}"}}]}}' for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _endpoint_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"\s*http://127\.0\.0\.1:\d+\s+│", line)]


def _whole_frame_under_way(text: str, settle_done: int) -> bool:
    """The run under way with every figure the test reads on show, in a frame drawn to its end.

    A frame is larger than one read of the terminal, so a screen read between two reads can show the table's
    header with its rows not yet drawn (or drawn up to a column): the rows must carry every column."""
    done = re.search(r"done (\d[\d,]*)/", text)
    if not done or int(done.group(1).replace(",", "")) < settle_done:
        return False
    if not re.search(r"servers [\d.]+", text):  # the servers' rate comes with a load poll
        return False
    header = next((line for line in text.splitlines() if "endpoint" in line and "srv tok/s" in line), None)
    if header is None:
        return False
    rows = _endpoint_rows(text)
    return len(rows) == 2 and all(row.count("│") == header.count("┃") for row in rows)


def capture_screen(tmp: Path, *, settle_done: int = 8, timeout_s: float = 90.0) -> str:
    """Run a short job on two simulated servers in a terminal; the screen once `settle_done` results are
    written and a 15 s rate is on show."""
    prompts = _prompts(tmp / "prompts.jsonl", 400)
    args = ["-m", "client.run", "--simulate", "2", "--sim-speed", "4", "--sim-max-running", "16",
            "--prompts", str(prompts), "--out", str(tmp / "out"), "--gpus", "2", "--max-tokens", "400"]
    screen = pyte.Screen(COLUMNS, ROWS)
    stream = pyte.ByteStream(screen)
    child = pexpect.spawn(sys.executable, args, cwd=str(REPO), dimensions=(ROWS, COLUMNS),
                          env={**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS),
                               "LINES": str(ROWS), "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(pexpect.TIMEOUT):
                stream.feed(child.read_nonblocking(65536, timeout=0.5))
            text = "\n".join(line.rstrip() for line in screen.display)
            if _whole_frame_under_way(text, settle_done):
                return text
        raise AssertionError("the live view never showed the run under way:\n" + "\n".join(screen.display))
    finally:
        child.sendintr()
        child.sendintr()
        child.expect(pexpect.EOF, timeout=60)
        child.close()


@pytest.mark.slow
def test_live_view_shows_bar_rates_and_endpoints(tmp_path: Path) -> None:
    text = capture_screen(tmp_path)
    assert re.search(r"━{5,}", text), "no progress bar"  # rich's bar glyph
    assert re.search(r"done \d+/400 \d+\.\d%", text)
    assert re.search(r"tok/s [\d.]+K? now\s+[\d.]+K? 5-min\s+servers [\d.]+K?", text)
    assert re.search(r"ETA \S+", text) and "GPU-h" in text and "elapsed" in text
    header = next(line for line in text.splitlines() if "endpoint" in line and "srv tok/s" in line)
    for column in ("state", "in flight", "slots", "srv queue", "KV", "cache hit", "done", "errors"):
        assert column in header
    states = [re.match(r"\s*http://127\.0\.0\.1:\d+\s+│\s+(\w+)\s", row) for row in _endpoint_rows(text)]
    assert [state.group(1) if state else None for state in states] == ["up", "up"], text


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        captured = capture_screen(Path(tmp), settle_done=40)
    # Ports change from run to run; the doc shows them as they look.
    DOC.write_text(captured.rstrip() + "\n")
    print(f"wrote {DOC.relative_to(REPO)}")
