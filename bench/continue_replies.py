"""What `client.run --continue-replies` saves in a whole run: the tokens the servers generate for a prompt set
when a share of the streams break (the simulator's `--drop-stream`), the chat path (a broken reply sent again
from token 0) against `--continue-replies` (continued from the ids it delivered), each on a fresh fleet of
simulated SGLang servers with ids (`--tokenizer`, `--incremental-streaming-output`) and the same seeds. The
cost is the growth of the servers' own `sglang:generation_tokens_total` over the ids the run wrote.

    python -m bench.continue_replies [--prompts prompts/sample.jsonl] [--servers 2] [--drop-stream 0.15]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import orjson

from simulator.api import SimFleet, SimServerSpec, tiny_tokenizer_dir

_COUNTER = re.compile(r"^sglang:generation_tokens_total\S* (\S+)$", re.M)


def _generated(urls: list[str]) -> float:
    return sum(float(v) for url in urls for v in _COUNTER.findall(httpx.get(url + "/metrics", timeout=10).text))


def _written(out: Path) -> tuple[int, int, int]:
    """(records, completion ids written, records continued)."""
    records = ids = continued = 0
    for segment in sorted((out / "segments").glob("*.jsonl")):
        for line in segment.read_bytes().splitlines():
            record = orjson.loads(line)
            records += 1
            ids += len(record["completion_token_ids"])
            continued += "continued" in record
    return records, ids, continued


def measure(prompts: Path, servers: int, drop: float, continue_replies: bool, work: Path) -> dict[str, float]:
    spec = SimServerSpec(max_running=32, speed=200.0, extra_args=(
        "--tokenizer", str(tiny_tokenizer_dir()), "--mean-tokens", "300", "--incremental-streaming-output",
        "--drop-stream", str(drop)))
    with SimFleet([spec] * servers, seed=0, log_dir=work / "logs") as fleet:
        urls = list(fleet.urls)
        before = _generated(urls)
        out = work / ("continued" if continue_replies else "chat")
        done = subprocess.run([sys.executable, "-m", "client.run", "--endpoints", ",".join(urls), "--prompts",
                               str(prompts), "--out", str(out), "--plain", "--token-ids", "on", "--max-attempts",
                               "10", *(["--continue-replies"] if continue_replies else [])],
                              capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode != 0:
            sys.exit(f"client.run failed ({done.returncode}): {done.stderr[-2000:]}")
        generated = _generated(urls) - before
    records, ids, continued = _written(out)
    retries = re.search(r"(\d[\d,]*) retries", done.stderr)
    return {"records": records, "written": ids, "generated": generated, "continued": continued,
            "retries": float(retries.group(1).replace(",", "")) if retries else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=Path("prompts/sample.jsonl"))
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--drop-stream", type=float, default=0.15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-continue-") as tmp:
        rows = {name: measure(args.prompts, args.servers, args.drop_stream, flag, Path(tmp) / name)
                for name, flag in (("chat (sent again)", False), ("--continue-replies", True))}
    print(f"{args.servers} simulated servers, --drop-stream {args.drop_stream}, {args.prompts}")
    print("| path | records | retries | replies continued | ids written | tokens generated | generated / written |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in rows.items():
        print(f"| {name} | {row['records']:,.0f} | {row['retries']:,.0f} | {row['continued']:,.0f} | "
              f"{row['written']:,.0f} | {row['generated']:,.0f} | {row['generated'] / row['written']:.4f} |")
    chat, native = rows["chat (sent again)"], rows["--continue-replies"]
    print(f"tokens generated again: {chat['generated'] - chat['written']:,.0f} on the chat path, "
          f"{native['generated'] - native['written']:,.0f} with --continue-replies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
