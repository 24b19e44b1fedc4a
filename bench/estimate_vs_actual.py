"""Estimate from a small sample, then run the whole set, on the same simulated fleet: how close is it? And
how true is the run's ETA over the last 20% of a run, before and after client.core.eta's rule?

    python bench/estimate_vs_actual.py [--part estimate|eta|both] [--prompts 20000] [--sample 2%] [--servers 2]
        [--max-running 16] [--speed 10] [--tokens-per-chunk 8] [--mean-tokens 100] [--max-tokens 300]
        [--shape mixed|chat|reasoning|tools] [--tokenizer none|tiny]
        [--eta-prompts 1500] [--eta-mean-tokens 150] [--eta-max-tokens 2000] [--seed 0]
        [--sampling-plan FILE] [--follow-advice] [--json]

--shape picks the prompt set and the servers' reply shape: `mixed` (the four sources below, the default),
`chat` (short chat replies, no tools), `reasoning` (long thinking with a heavy Pareto tail:
--think-tail-rate 0.3, max_tokens 10x --max-tokens) or `tools` (every prompt offers a tool, most replies
call it). --sampling-plan runs both steps under that plan (the estimate with `--run-seed`, the run with
`--seed`, both --seed's value, so they draw alike) and adds, per setting, the tokens projected against the
tokens the run's records of that setting hold. --tokenizer tiny serves replies in the tiny tokenizer's ids
(the simulator's default), where a server that paced word pieces but counted ids would throw the estimate
off. --follow-advice calibrates a second time when the first calibration's note advises a larger sample
(its output tokens' 90% interval wider than +-5%), with the sample it names, and holds both to the run.

Estimate: both steps are the real CLIs as subprocesses (`client.estimate --endpoints ...`, then
`client.run`) on one fleet of `simulator` servers. The servers answer GET /sim/clock, so the estimate is
timed on their modelled clock (the modelled GPU's busy seconds at speed 1, which the host's load does not
stretch), and so is the run it is compared with: the actual time is the longest busy time any server added
during the full run (each server is busy from the run's start to its last reply; its idle waits for a
starved client do not count), like with like. The run's wall time (the span of its results, from the first
request sent to the last result written) is reported beside it, times the speed, for reference. The output
lengths of the simulated servers are heavy-tailed and deterministic in the request, so the error of the
estimate comes from the sample and the throughput measurement only.

ETA (bench/eta_tail.py): one `client.run` in this process on its own simulated fleet (longer, heavier-
tailed replies, so the tail is a real part of the run), with a companion that reads the run's stats
snapshot four times a second and computes, from the same snapshot, the ETA of the rule before (the tokens
still expected over the 5-minute rate, less what the requests in flight had streamed) and after
(client.core.eta). Both are compared with the time the run actually still took, as ratios
predicted / actual, over the samples of the last 20% of the run. Prints tables, or JSON with --json.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from bench.eta_tail import eta_tail, print_eta  # noqa: E402
from client.results.reader import iter_records  # noqa: E402
from simulator.fleet import SimFleet, SimServerSpec  # noqa: E402

SOURCES = ("chat", "code", "tools", "multiturn")
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}


# Per --shape: (the sources drawn from, extra flags of the servers, factor on --max-tokens).
SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...], int]] = {
    "mixed": (SOURCES, (), 1),
    "chat": (("chat",), ("--tool-call-rate", "0"), 1),
    "reasoning": (("chat", "code"), ("--think-tail-rate", "0.3", "--tool-call-rate", "0"), 10),
    "tools": (("tools",), ("--tool-call-rate", "0.9"), 1),
}


def write_prompts(path: Path, count: int, sources: tuple[str, ...] = SOURCES) -> Path:
    """`count` prompts over four sources of unequal size (or only `sources`); the tool source offers a tool."""
    with path.open("w") as handle:
        for i in range(count):
            source = SOURCES[0] if i % 10 < 4 else SOURCES[1] if i % 10 < 7 else SOURCES[2] if i % 10 < 9 \
                else SOURCES[3]
            if source not in sources:
                source = sources[i % len(sources)]
            messages: list[dict[str, Any]] = [{"role": "user", "content": f"{source} question {i}: explain {i % 97}."}]
            if source == "multiturn":
                messages += [{"role": "assistant", "content": "Sure."},
                             {"role": "user", "content": f"And then what about {i % 13}?"}]
            record: dict[str, Any] = {"id": f"{source}-{i:07d}", "messages": messages, "meta": {"source": source}}
            if source == "tools":
                record["tools"] = [TOOL]
            handle.write(json.dumps(record) + "\n")
    return path


def run_span(out: Path) -> tuple[float, int, int]:
    """(seconds from the first request sent to the last result written, records, completion tokens)."""
    first, last, records, tokens = float("inf"), 0.0, 0, 0
    for _, record in iter_records(str(out)):
        first = min(first, record["created"] - record["timings"]["total_s"])
        last = max(last, record["created"])
        records += 1
        tokens += record["usage"]["completion_tokens"]
    return last - first, records, tokens


def modelled_clocks(urls: list[str]) -> list[float]:
    """Each server's modelled clock now: GET /sim/clock busy_s (seconds at speed 1)."""
    clocks = []
    for url in urls:
        with urllib.request.urlopen(url.rstrip("/") + "/sim/clock", timeout=10) as reply:
            clocks.append(float(json.loads(reply.read())["busy_s"]))
    return clocks


def sim_spec(*, max_running: int, speed: float, tokens_per_chunk: int, mean_tokens: int,
             tokenizer: str = "none", extra: tuple[str, ...] = ()) -> SimServerSpec:
    return SimServerSpec(max_running=max_running, speed=speed,
                         extra_args=("--mean-tokens", str(mean_tokens), "--tokens-per-chunk", str(tokens_per_chunk),
                                     "--log-level", "warning", "--tokenizer", tokenizer, *extra))


def machine_busy_s() -> float:
    """CPU seconds every process of the machine has used since boot (from /proc/stat)."""
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds of this process tree: itself, finished children, and live ones (the servers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _estimate(work: Path, endpoints: str, data: Path, *, sample: str, max_tokens: int, seed: int, gpus: int,
              seeded: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One `client.estimate` calibration on the fleet, its --json answer."""
    estimate = subprocess.run(
        [sys.executable, "-m", "client.estimate", "--endpoints", endpoints, "--prompts", str(data),
         "--sample", sample, "--max-tokens", str(max_tokens), "--out", str(work),
         "--gpus", str(gpus), "--seed", str(seed), "--json",
         *([*seeded, "--run-seed", str(seed)] if seeded else [])],
        cwd=REPO, capture_output=True, text=True, env=env, check=False, timeout=900)
    if estimate.returncode != 0:
        raise RuntimeError(f"client.estimate exited {estimate.returncode}:\n{estimate.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(estimate.stdout)
    return answer


def _against(result: dict[str, Any], actual: float, tokens: int) -> dict[str, Any]:
    """An estimate's answer against the run: projected figures and their errors."""
    whole = result["projection"]["targets"][0]
    precision = result["projection"].get("precision") or {}
    return {
        "sample": result["input"]["sample_size"], "projected_tokens": whole["output_tokens"],
        "projected_wall_s": whole["wall_s"], "error": round(whole["wall_s"]["point"] / actual - 1, 4),
        "tokens_error": round(whole["output_tokens"]["point"] / tokens - 1, 4),
        # The time per token projected against the run's: the error of the clock and the throughput alone,
        # without the sample's error on the lengths (the tokens' error).
        "time_per_token_error": round((whole["wall_s"]["point"] / whole["output_tokens"]["point"])
                                      / (actual / tokens) - 1, 4),
        "tokens_precision": precision.get("share"), "advised_sample": precision.get("advised_sample"),
        "throughput": result["projection"]["throughput"]["tokens_per_s"],
    }


def compare(work: Path, urls: list[str], *, prompts: int, sample: str, max_tokens: int, seed: int,
            sources: tuple[str, ...] = SOURCES, plan: Path | None = None,
            follow_advice: bool = False) -> dict[str, Any]:
    """Estimate from a sample, then run the whole set, both on the fleet at `urls`; the figures side by side.
    With `follow_advice`, a second calibration takes the sample size the first one advised (when its output
    tokens' interval was wider than +-5%), as a user reading its note would, and is held to the same run.

    `cpu_used_elsewhere` is the share of the machine's CPU that other processes used meanwhile: the
    comparison needs the machine to itself (see docs/estimate.md)."""
    busy, ours = machine_busy_s(), own_cpu_s()
    data = write_prompts(work / "prompts.jsonl", prompts, sources)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    endpoints = ",".join(urls)
    seeded = ["--sampling-plan", str(plan)] if plan is not None else []
    started = time.monotonic()
    calibrate = functools.partial(_estimate, endpoints=endpoints, data=data, max_tokens=max_tokens, seed=seed,
                                  gpus=len(urls), seeded=seeded, env=env)
    result = calibrate(work / "calibration", sample=sample)
    advised = (result["projection"].get("precision") or {}).get("advised_sample")
    second = calibrate(work / "calibration-advised", sample=str(advised)) if follow_advice and advised else None
    estimate_s = time.monotonic() - started
    clocks_before = modelled_clocks(urls)
    started = time.monotonic()
    full = subprocess.run(
        [sys.executable, "-m", "client.run", "--endpoints", endpoints, "--prompts", str(data),
         "--out", str(work / "full"), "--max-tokens", str(max_tokens), "--plain", "--progress-every", "30",
         *([*seeded, "--seed", str(seed)] if seeded else [])],
        cwd=REPO, capture_output=True, text=True, env=env, check=False, timeout=1800)
    full_s = time.monotonic() - started
    if full.returncode != 0:
        raise RuntimeError(f"client.run exited {full.returncode}:\n{full.stderr[-3000:]}")
    modelled = max(after - before for before, after in zip(clocks_before, modelled_clocks(urls), strict=True))
    capacity = (time.monotonic() - started) * (os.cpu_count() or 1)
    elsewhere = (machine_busy_s() - busy - (own_cpu_s() - ours)) / capacity
    span, records, tokens = run_span(work / "full")
    settings = {t["label"].removeprefix("setting "): {"projected_tokens": t["output_tokens"], "prompts": t["prompts"],
                                                      "gpu_hours": t["gpu_hours"]}
                for t in result["projection"]["targets"] if t["label"].startswith("setting ")}
    for name, (count, made) in tokens_by_setting(work / "full").items():
        settings.setdefault(name, {}).update({"actual_records": count, "actual_tokens": made})
    # The estimate says which clock it timed the sample on: the modelled one on these servers (the wall
    # clock before it could read theirs); the run is read on the same one.
    clock = result["input"].get("clock", "wall")
    actual = modelled if clock == "modelled" else span
    return {
        "prompts": prompts, "servers": len(urls),
        "estimate_process_s": round(estimate_s, 2), "full_process_s": round(full_s, 2),
        "actual_tokens": tokens, "actual_records": records, "clock": clock, "actual_s": round(actual, 3),
        **_against(result, actual, tokens),
        **({"advised": _against(second, actual, tokens)} if second is not None else {}),
        "actual_wall_s": round(span, 3), "actual_modelled_s": round(modelled, 3),
        "actual_throughput": tokens / actual, "cpu_used_elsewhere": round(max(0.0, elsewhere), 3),
        **({"settings": settings} if plan is not None else {}),
    }


def tokens_by_setting(out: Path) -> dict[str, tuple[int, int]]:
    """Per sampling-plan setting the run's records name: (records, completion tokens)."""
    found: dict[str, tuple[int, int]] = {}
    for _, record in iter_records(str(out)):
        name = ((record.get("sampling") or {}).get("plan") or {}).get("setting")
        if isinstance(name, str):
            count, tokens = found.get(name, (0, 0))
            found[name] = (count + 1, tokens + record["usage"]["completion_tokens"])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["estimate", "eta", "both"], default="both")
    parser.add_argument("--eta-prompts", type=int, default=1_500)
    parser.add_argument("--eta-mean-tokens", type=int, default=150)
    parser.add_argument("--eta-max-tokens", type=int, default=2_000)
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--sample", default="2%")
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--max-running", type=int, default=16)
    parser.add_argument("--speed", type=float, default=10.0)
    parser.add_argument("--tokens-per-chunk", type=int, default=8)
    parser.add_argument("--mean-tokens", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=300)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="mixed")
    parser.add_argument("--tokenizer", choices=["none", "tiny"], default="none")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sampling-plan", type=Path)
    parser.add_argument("--follow-advice", action="store_true",
                        help="when the estimate advises a larger sample, calibrate again with it and compare both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    if args.part in ("estimate", "both"):
        report["estimate"] = estimate_part(args)
    if args.part in ("eta", "both"):
        spec = SimServerSpec(max_running=args.max_running, speed=args.speed,
                             extra_args=("--mean-tokens", str(args.eta_mean_tokens), "--log-level", "warning",
                                         "--tokenizer", "none"))
        with tempfile.TemporaryDirectory(prefix="eta-bench-") as tmp, \
                SimFleet([spec] * args.servers, seed=args.seed, log_dir=Path(tmp) / "sim-logs") as fleet:
            report["eta"] = eta_tail(Path(tmp), fleet.urls, prompts=args.eta_prompts,
                                     max_tokens=args.eta_max_tokens)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    if "estimate" in report:
        print_estimate(report["estimate"], args.seed)
    if "eta" in report:
        print_eta(report["eta"])
    return 0


def estimate_part(args: argparse.Namespace) -> dict[str, Any]:
    sources, extra, factor = SHAPES[args.shape]
    spec = sim_spec(max_running=args.max_running, speed=args.speed, tokens_per_chunk=args.tokens_per_chunk,
                    mean_tokens=args.mean_tokens, tokenizer=args.tokenizer, extra=extra)
    with tempfile.TemporaryDirectory(prefix="estimate-bench-") as tmp, \
            SimFleet([spec] * args.servers, seed=args.seed, log_dir=Path(tmp) / "sim-logs") as fleet:
        row = compare(Path(tmp), fleet.urls, prompts=args.prompts, sample=args.sample,
                      max_tokens=args.max_tokens * factor, seed=args.seed, sources=sources,
                      plan=args.sampling_plan, follow_advice=args.follow_advice)
    return {"shape": args.shape, "tokenizer": args.tokenizer, "speed": args.speed, **row}


def print_estimate(row: dict[str, Any], seed: int) -> None:
    wall, tokens = row["projected_wall_s"], row["projected_tokens"]
    print("| shape | tokenizer | speed | seed | clock | projected tokens (90%) | actual tokens | projected time (90%) "
          "| actual time | error | time per token error | run's wall time x speed | CPU used elsewhere |")
    print("| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {row['shape']} | {row['tokenizer']} | {row['speed']:g} | {seed} | {row['clock']} "
          f"| {tokens['point']:,.0f} ({tokens['low']:,.0f}-{tokens['high']:,.0f}) "
          f"| {row['actual_tokens']:,} | {wall['point']:.1f}s ({wall['low']:.1f}-{wall['high']:.1f}) "
          f"| {row['actual_s']:.1f}s | {row['error']:+.1%} | {row['time_per_token_error']:+.1%} "
          f"| {row['actual_wall_s'] * row['speed']:.1f}s "
          f"| {row['cpu_used_elsewhere']:.0%} |")
    if "advised" in row:
        advised = row["advised"]
        wall, tokens = advised["projected_wall_s"], advised["projected_tokens"]
        print(f"| ... the advised sample of {advised['sample']:,} | | | | "
              f"| {tokens['point']:,.0f} ({tokens['low']:,.0f}-{tokens['high']:,.0f}) "
              f"| {row['actual_tokens']:,} | {wall['point']:.1f}s ({wall['low']:.1f}-{wall['high']:.1f}) "
              f"| {row['actual_s']:.1f}s | {advised['error']:+.1%} | {advised['time_per_token_error']:+.1%} | | |")
    if "settings" in row:
        print("\n| setting | prompts | projected tokens (90%) | actual tokens | error |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, figures in row["settings"].items():
            projected, actual = figures.get("projected_tokens"), figures.get("actual_tokens")
            error = f"{projected['point'] / actual - 1:+.1%}" if projected and actual else "-"
            span = f"{projected['point']:,.0f} ({projected['low']:,.0f}-{projected['high']:,.0f})" if projected else "-"
            print(f"| {name} | {figures.get('prompts', '-')} | {span} | {actual if actual is not None else '-':,} "
                  f"| {error} |")


if __name__ == "__main__":
    sys.exit(main())
