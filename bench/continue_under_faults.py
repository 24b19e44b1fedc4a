"""The must-show of `--continue-replies`: a simulated run of N prompts through K kill -9 of the client and R
restarts of a server, once on the chat path (a broken or killed reply generated again from token 0) and once
with `--continue-replies` (continued from its ids: those delivered, and across a kill those saved in
OUT/partials), each on a fresh fleet of simulated SGLang servers with ids and the same seeds and schedule.

The schedule is by records written: a kill -9 of the client at every N/(K+1) records (the same command is
started again at once), a server restart spread among them (its streams break; its memory of the replies
goes, so what it continues goes on by the simulator's Markov rule). The cost is the servers' own
`sglang:generation_tokens_total` (read before each restart, which zeroes it) over the ids written; every id
must be written exactly once, with its exact ids.

    python -m bench.continue_under_faults [--count 2000] [--kills 10] [--restarts 3] [--servers 2]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from bench.prompt_file import write_prompts
from simulator.api import SimFleet, SimServerSpec, tiny_tokenizer_dir

_COUNTER = re.compile(r"^sglang:generation_tokens_total\S* (\S+)$", re.M)
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}}, "required": ["city"]}}}


def _counter(url: str) -> float:
    return sum(float(v) for v in _COUNTER.findall(httpx.get(url + "/metrics", timeout=10).text))


def _written(out: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in (out / "segments").glob("*.jsonl"))


def _check(out: Path, count: int) -> int:
    """Every id exactly once with its exact ids; the ids written."""
    ids: list[str] = []
    tokens = 0
    for segment in sorted((out / "segments").glob("*.jsonl")):
        for line in segment.read_bytes().splitlines():
            record = orjson.loads(line)
            ids.append(record["id"])
            assert record["completion_token_ids"] and record["prompt_token_ids"], record["id"]
            assert record["usage"]["completion_tokens"] == len(record["completion_token_ids"])
            tokens += len(record["completion_token_ids"])
    assert len(ids) == len(set(ids)) == count, (len(ids), len(set(ids)), count)
    return tokens


def run_path(prompts: Path, count: int, kills: int, restarts: int, servers: int, native: bool,
             work: Path) -> dict[str, float]:
    spec = SimServerSpec(max_running=32, speed=60.0, extra_args=(
        "--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "300", "--incremental-streaming-output"))
    out = work / "out"
    args = [sys.executable, "-m", "client.run", "--plain", "--prompts", str(prompts), "--out", str(out),
            "--token-ids", "on", "--max-attempts", "20", *(["--continue-replies"] if native else [])]
    steps = kills + restarts
    marks = [count * (i + 1) // (steps + 1) for i in range(steps)]
    restart_at = {marks[round((j + 0.5) * steps / restarts) - 1] for j in range(restarts)} if restarts else set()
    started = time.monotonic()
    with SimFleet([spec] * servers, seed=0, log_dir=work / "logs") as fleet:
        urls = list(fleet.urls)
        generated = -sum(_counter(u) for u in urls)
        killed = restarted = 0
        proc = subprocess.Popen([*args, "--endpoints", ",".join(urls)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        for mark in marks:
            while _written(out) < mark and proc.poll() is None:
                time.sleep(0.05)
            if mark in restart_at:
                index = restarted % servers
                generated += _counter(urls[index])
                fleet.restart(index)
                generated -= _counter(urls[index])
                restarted += 1
            elif proc.poll() is None:
                proc.kill()
                proc.wait()
                killed += 1
                proc = subprocess.Popen([*args, "--endpoints", ",".join(urls)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        while proc.poll() is None:
            time.sleep(0.2)
        if proc.returncode != 0:  # the last run ended with something left to do: the same command again
            done = subprocess.run([*args, "--endpoints", ",".join(urls)], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                sys.exit(f"client.run failed ({done.returncode}): {done.stderr[-2000:]}")
        generated += sum(_counter(u) for u in urls)
    written = _check(out, count)
    partials = list((out / "partials").glob("*.json"))
    return {"written": written, "generated": generated, "kills": killed, "restarts": restarted,
            "left_partials": len(partials), "seconds": time.monotonic() - started}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--servers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        prompts = write_prompts(Path(tmp) / "prompts.jsonl", args.count, tool=WEATHER, tools_every=4)
        rows = {name: run_path(prompts, args.count, args.kills, args.restarts, args.servers, native,
                               Path(tmp) / name.replace(" ", "-"))
                for name, native in (("chat path", False), ("--continue-replies", True))}
    print(f"{args.count:,} prompts, {args.servers} simulated servers, {args.kills} kill -9 of the client, "
          f"{args.restarts} server restarts; every id written exactly once, with its exact ids, on both paths")
    print("| path | kill -9 | restarts | ids written | tokens generated | generated again | generated / written |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        again = row["generated"] - row["written"]
        print(f"| {name} | {row['kills']:.0f} | {row['restarts']:.0f} | {row['written']:,.0f} | "
              f"{row['generated']:,.0f} | {again:,.0f} | {row['generated'] / row['written']:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
