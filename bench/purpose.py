"""What the drafter's purpose saves: the same prompts four times on one simulated fleet.

    python -m bench.purpose [--prompts 400] [--servers 4] [--max-running 16] [--speed 400] [--window 4096]
        [--max-tokens 16384] [--loop-rate 0.03] [--tail-rate 0.3] [--gpus 8] [--seed 0] [--json]

1. plain: `--loop-stop off`, no window (every reply until it stops or reaches --max-tokens);
2. loop stop: no window, the loop stop on (the default);
3. window: `--train-window N --loop-stop off`;
4. window + loop stop: `--train-window N` (the loop stop is on by default).

The fleet is `simulator` with a share of replies that loop until max_tokens (`--loop-rate`) and a heavy
thinking tail (`--think-tail-rate`), both seeded, so the three runs get the same replies up to where each
run cuts them. Prompts carry tool schemas of one to three thousand tokens (the simulator counts a token
per 4 bytes of the request's messages and tools). Each run is the real CLI as a subprocess with its own
--out; figures are read from its records and failures: tokens generated, wall time (first request to last
result), GPU-hours (--gpus x wall time), and whether every id is accounted for exactly once (a record, or a
`fills_window` failure). Ratios are against the plain run of the same invocation.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from client.results.reader import iter_records  # noqa: E402
from simulator.fleet import SimFleet, SimServerSpec  # noqa: E402

RUNS = (("plain", ["--loop-stop", "off"]), ("loop stop", []),
        ("window", ["--loop-stop", "off", "--train-window", "{window}"]),
        ("window + loop stop", ["--train-window", "{window}"]))


def _tool(i: int, size: int) -> dict[str, Any]:
    """A function whose schema is about `size` bytes: the enum of a long parameter pads it."""
    values = [f"option_{i}_{n}" for n in range(max(1, size // 14))]
    return {"type": "function", "function": {"name": f"tool_{i}", "description": "A tool of the agent's kit",
                                             "parameters": {"type": "object", "properties": {
                                                 "choice": {"type": "string", "enum": values}}}}}


def write_prompts(path: Path, count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    ids = []
    with path.open("wb") as handle:
        for i in range(count):
            prompt_tokens = rng.randint(1000, 3000)  # the tool schemas' share of the window
            record = {"id": f"p{i:05d}", "messages": [{"role": "user", "content": f"Task {i}: plan the next step."}],
                      "tools": [_tool(i, prompt_tokens * 4)]}
            handle.write(orjson.dumps(record) + b"\n")
            ids.append(record["id"])
    return ids


def one_run(name: str, extra: list[str], urls: list[str], prompts: Path, out: Path, args: argparse.Namespace,
            ids: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", "client.run", "--endpoints", ",".join(urls), "--prompts", str(prompts),
               "--out", str(out), "--plain", "--progress-every", "60", "--max-tokens", str(args.max_tokens),
               "--gpus", str(args.gpus), *[e.format(window=args.window) for e in extra]]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    records = [record for _, record in iter_records(str(out))]
    failures = [orjson.loads(line) for path in sorted((out / "failures").glob("*.jsonl"))
                for line in path.read_bytes().splitlines() if line.strip()]
    seen = [r["id"] for r in records] + [f["id"] for f in failures if f["error_class"] == "fills_window"]
    started = min(r["created"] - r["timings"]["total_s"] for r in records)
    wall = max(r["created"] for r in records) - started
    return {"run": name, "tokens": sum(int(r["usage"]["completion_tokens"]) for r in records), "wall_s": wall,
            "gpu_hours": args.gpus * wall / 3600, "records": len(records),
            "fills_window": sum(f["error_class"] == "fills_window" for f in failures),
            "loops_stopped": sum(r["finish_reason"] == "repetition" for r in records),
            "each_id_once": sorted(seen) == sorted(ids)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=400)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--max-running", type=int, default=16)
    parser.add_argument("--speed", type=float, default=400.0)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--mean-tokens", type=int, default=1800)
    parser.add_argument("--loop-rate", type=float, default=0.03)
    parser.add_argument("--tail-rate", type=float, default=0.3)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # docs/benchmarks.md's figures were measured on servers without a tokenizer (a token per word piece).
    sim = ("--loop-rate", str(args.loop_rate), "--think-tail-rate", str(args.tail_rate), "--mean-tokens",
           str(args.mean_tokens), "--context-length", str(args.max_tokens + 8192), "--tokenizer", "none")
    spec = SimServerSpec(max_running=args.max_running, speed=args.speed, extra_args=sim)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, SimFleet([spec] * args.servers, seed=args.seed) as fleet:
        prompts = Path(tmp) / "prompts.jsonl"
        ids = write_prompts(prompts, args.prompts, args.seed)
        for n, (name, extra) in enumerate(RUNS):
            rows.append(one_run(name, extra, fleet.urls, prompts, Path(tmp) / f"out{n}", args, ids))
    base = rows[0]
    for row in rows:
        row["tokens_ratio"] = row["tokens"] / base["tokens"]
        row["wall_ratio"] = row["wall_s"] / base["wall_s"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{args.prompts} prompts, {args.servers} simulated servers x {args.max_running} slots, window "
          f"{args.window}, max_tokens {args.max_tokens}, loop share {args.loop_rate}, tail share {args.tail_rate}")
    print(f"| run | tokens generated | ratio | wall time (s) | ratio | GPU-hours (x{args.gpus}) | fills_window | loops "
          "stopped | every id once |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        once = "yes" if r["each_id_once"] else "NO"
        print(f"| {r['run']} | {r['tokens']:,} | {r['tokens_ratio']:.3f} | {r['wall_s']:.1f} | {r['wall_ratio']:.3f} "
              f"| {r['gpu_hours']:.4f} | {r['fills_window']} | {r['loops_stopped']} | {once} |")
    return 0 if all(r["each_id_once"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
