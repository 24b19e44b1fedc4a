"""Start-up at scale: 1,000,000 prompts with all of them already done, and with none done.

Measures, for the real CLI as a subprocess, the time from process start to "nothing to do" (all done) or
to the first chat request arriving at the server (none done), and the client's peak memory (max RSS).
The server is a minimal local stand-in that time-stamps the first chat request it receives; what it
returns does not matter here, since the run is stopped as soon as that request arrives.

    python -m bench.scale [--prompts 1000000] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson
from aiohttp import web

from bench.report import emit

REPO = Path(__file__).resolve().parent.parent


def write_prompts(path: Path, count: int) -> None:
    with path.open("wb") as handle:
        for start in range(0, count, 10_000):
            handle.write(b"".join(
                orjson.dumps({"id": f"p{i:08d}", "messages": [{"role": "user", "content": f"Question {i}?"}],
                              "meta": {"source": "scale"}}) + b"\n"
                for i in range(start, min(count, start + 10_000))))


def write_done_segments(out: Path, count: int, per_segment: int = 100_000) -> None:
    """Closed segments as a previous run leaves them: records plus their `.ids` sidecars."""
    segments = out / "segments"
    segments.mkdir(parents=True, exist_ok=True)
    (out / "failures").mkdir(exist_ok=True)
    for number, start in enumerate(range(0, count, per_segment)):
        ids = [f"p{i:08d}" for i in range(start, min(count, start + per_segment))]
        name = segments / f"bench-0of1-previous-{number:05d}"
        name.with_suffix(".jsonl").write_bytes(b"".join(
            orjson.dumps({"id": i, "content": "x", "finish_reason": "stop", "usage": {"completion_tokens": 1}})
            + b"\n" for i in ids))
        name.with_suffix(".ids").write_bytes("".join(i + "\n" for i in ids).encode())


class StandIn:
    """Answers the start-up checks and time-stamps the first chat request, in a thread."""

    def __init__(self) -> None:
        self.first_request: float | None = None
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def _serve(self) -> None:
        async def health(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        async def models(_: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "sglang"}]})

        async def chat(request: web.Request) -> web.Response:
            if self.first_request is None:
                self.first_request = time.monotonic()
            await request.read()
            return web.Response(status=503, text="stand-in")

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> StandIn:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def run_client(url: str, prompts: Path, out: Path, stand_in: StandIn, *,
               until_first_request: bool) -> tuple[float, float]:
    """(seconds to the milestone, peak RSS in MB) of one client process."""
    command = [sys.executable, "-m", "client.run", "--endpoints", url, "--prompts", str(prompts), "--out", str(out),
               "--plain", "--max-in-flight", "4"]
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if until_first_request:
        while stand_in.first_request is None and proc.poll() is None and time.monotonic() - started < 120:
            time.sleep(0.005)
        milestone = (stand_in.first_request or time.monotonic()) - started
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    else:
        proc.wait(120)
        milestone = time.monotonic() - started
        if proc.returncode != 0:
            detail = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
            raise SystemExit(f"client exited {proc.returncode}: {detail}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return milestone, peak_kb / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, help="append the markdown table to this file")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        prompts = base / "prompts.jsonl"
        write_prompts(prompts, args.prompts)
        write_done_segments(base / "all-done", args.prompts)
        # Each case in its own process so RUSAGE_CHILDREN's peak is that case's client alone.
        for case in ("all done", "none done"):
            result = subprocess.run(
                [sys.executable, "-c", "import sys; from bench.scale import _case; _case(*sys.argv[1:])",
                 case, str(prompts), str(base)], cwd=REPO, capture_output=True, text=True, check=True,
                env={**os.environ, "PYTHONPATH": str(REPO)})
            rows.append(result.stdout.strip().split("\t"))
    lines = [f"Start-up at scale: {args.prompts:,} prompt records.", "",
             "| case | milestone | seconds | peak RSS (MB) |", "|---|---|---:|---:|"]
    lines += [f"| {case} | {milestone} | {float(seconds):.2f} | {float(rss):.0f} |"
              for case, milestone, seconds, rss in rows]
    emit(lines, args.out)
    return 0


def _case(case: str, prompts: str, base: str) -> None:
    with StandIn() as stand_in:
        url = f"http://127.0.0.1:{stand_in.port}"
        if case == "all done":
            seconds, rss = run_client(url, Path(prompts), Path(base) / "all-done", stand_in, until_first_request=False)
            print(f"{case}\t'nothing to do' exit\t{seconds}\t{rss}")
        else:
            seconds, rss = run_client(url, Path(prompts), Path(base) / "none-done", stand_in, until_first_request=True)
            print(f"{case}\tfirst request at the server\t{seconds}\t{rss}")


if __name__ == "__main__":
    sys.exit(main())
