"""The estimate as a person reads it: rich tables of the sample, the throughput, the projection and
the what-ifs, the projection onto other GPUs (each row labelled a model), and what the trainer would not
use. Reads plain data only (the `info` dict and the frozen Projection)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from client.core.durations import format_duration
from client.estimate.hardware import HardwareProjection
from client.estimate.model import Interval
from client.estimate.project import Projection
from client.estimate.purpose import Purpose


def tokens(value: float) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.2f}{unit}"
    return f"{value:.0f}"


def duration(seconds: float) -> str:
    """Seconds with a decimal under a minute (calibration runs are short), else as the console shows."""
    return f"{seconds:.1f}s" if seconds < 60 else format_duration(seconds)


def _span(value: Interval, show: Any) -> str:
    return f"{show(value.point)}  [{show(value.low)} .. {show(value.high)}]"


def _hours(value: float) -> str:
    return f"{value:,.1f}" if value >= 10 else f"{value:.3g}"


def _optional(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def render(info: dict[str, Any], projection: Projection | None, console: Console) -> None:
    _header(info, console)
    _input_problems(info, console)
    console.print(_sample_table(info))
    if projection is None:
        return
    _throughput(projection, console)
    console.print(_projection_table(info, projection))
    console.print(_caps_table(projection))
    console.print(_fleet_table(projection))
    _hardware(projection.hardware, console)
    for note in info.get("hardware_notes", []):
        console.print(f"[yellow]note:[/yellow] {note}")
    _purpose(projection, console)
    _extension(projection, console)
    for warning in projection.warnings:
        console.print(f"[yellow]note:[/yellow] {warning}")


def _header(info: dict[str, Any], console: Console) -> None:
    """Where the figures come from: the simulated fleet if any, the set, the sample or results, the model."""
    simulated = info.get("simulated")
    if simulated:
        speed = simulated["speed"]
        speeds = f"{speed:g}" if isinstance(speed, int | float) else "/".join(f"{s:g}" for s in speed)
        console.print(f"[yellow]simulated fleet: {simulated['servers']} simulated server(s) at speed {speeds}; the "
                      "throughput and times below are on the modelled GPU's clock (its busy time at speed 1, read "
                      "from GET /sim/clock, which the host's load does not stretch), not a real GPU's, and the "
                      "lengths the simulator's[/yellow]")
    size = (f"{info['prompts']:,} prompts (--set-size, shaped like the {info['prompts_in_files']:,} in --prompts)"
            if info.get("set_size") else f"{info['prompts']:,} prompts")
    head = f"{size} in {len(info['strata'])} strata; {info['measured']:,} results measured"
    if info.get("mode") == "calibration":
        head += (f" from a calibration sample of {info['sample_size']:,} ({info['failed']} failed) in "
                 f"{duration(info['elapsed_s'])}; "
                 + (f"sample and results kept in {info['out']} (sample.jsonl, segments/; --from-results "
                    f"{info['out']} re-reads them)" if info["out"] else "results not kept (--out DIR keeps them)"))
    else:
        head += f" from {info['results']}"
    console.print(head)
    models = ", ".join(info["models"]) or "?"
    plan = info.get("sampling_plan")
    if plan:  # thinking is each setting's, not the run's: name the mix instead
        mix = ", ".join(f"{name} {count:,}" for name, count in plan["prompts"].items())
        sampling = f"sampling plan {plan['name']} (prompts per setting: {mix})"
    else:
        sampling = f"thinking {'on' if info['thinking'] else 'off'}"
    console.print(f"model {models}; {sampling}; {len(info['endpoints'])} endpoint(s)")


def _input_problems(info: dict[str, Any], console: Console) -> None:
    """What was left out of the measurement, with examples, so a short sample is not a mystery."""
    if info.get("outside_set"):
        console.print(f"[yellow]{info['outside_set']:,} result(s) have ids that are not in --prompts; "
                      "they are not used[/yellow]")
    if info["invalid_prompts"] or info["duplicate_prompts"]:
        console.print(f"[yellow]{info['invalid_prompts']:,} invalid and {info['duplicate_prompts']:,} duplicate "
                      "prompt record(s) are not counted (client.run would skip them too), e.g.:[/yellow]")
        for problem in info.get("prompt_problems", []):
            console.print(f"  {problem}", markup=False)
    if info.get("unreadable_results") or info.get("torn_results"):
        console.print(f"[yellow]{info['unreadable_results']:,} unreadable result line(s) and "
                      f"{info['torn_results']:,} torn segment tail(s) are not measured, e.g.:[/yellow]")
        for bad in info.get("unreadable_examples", []):
            console.print(f"  {bad}", markup=False)


def _sample_table(info: dict[str, Any]) -> Table:
    sample = Table(title="Output length per stratum (completion tokens)", title_justify="left")
    for column in ("stratum", "prompts", "measured", "mean", "p50", "p90", "max", "truncated",
                   "reasoning", "content", "tool calls"):
        sample.add_column(column, justify="left" if column == "stratum" else "right")
    for row in info["sample"]:
        sample.add_row(row["stratum"], f"{row['prompts']:,}", f"{row['measured']:,}", _optional(row["mean"]),
                       _optional(row["p50"]), _optional(row["p90"]), _optional(row["max"]),
                       _optional(row["truncated_share"], "{:.1%}"), _optional(row["reasoning_mean"]),
                       _optional(row["content_mean"]), _optional(row["tool_mean"]))
    return sample


def _throughput(projection: Projection, console: Console) -> None:
    rate = projection.throughput
    console.print(f"sustained throughput {rate.tokens_per_s:,.0f} output tok/s, measured over {rate.window_s:.1f}s "
                  f"of {rate.span_s:.1f}s while the fleet was saturated: {rate.concurrency:.1f} requests decoding "
                  f"on average, {rate.per_slot:,.1f} tok/s each")


def _gpus(info: dict[str, Any]) -> str:
    """The GPU count with where it came from, since an assumed count changes how far to trust the times."""
    plan = info["plan"]
    reported = info.get("server_gpus")
    if plan["gpus_assumed"]:
        source = " (assumed one per endpoint; pass --gpus)"
    elif info.get("gpus_from") == "servers":
        source = " (as the servers report them)"
    elif info.get("gpus_from") == "run.json":
        source = " (as the run's servers reported them, recorded in run.json)"
    elif reported and reported != plan["gpus"]:
        # The rate was measured on the servers' GPUs: a different --gpus scales every GPU-hour by the ratio.
        source = f" (from --gpus; the servers measured report {reported}: GPU-hours scale by {plan['gpus']}/{reported})"
    else:
        source = ""
    return f"{plan['gpus']} GPU(s)" + source


def _projection_table(info: dict[str, Any], projection: Projection) -> Table:
    table = Table(title=f"Projection on {_gpus(info)}, max_tokens {info['plan']['max_tokens']} (90% intervals)",
                  title_justify="left")
    for column in ("target", "prompts", "output tokens", "wall time", "GPU-hours", "reasoning / content / tools",
                   "prompt tokens"):
        table.add_column(column, justify="left" if column == "target" else "right")
    for target in projection.targets:
        if target.prompts == 0:
            continue
        table.add_row(target.label, f"{target.prompts:,}", _span(target.output_tokens, tokens),
                      _span(target.wall_s, duration), _span(target.gpu_hours, _hours),
                      f"{tokens(target.reasoning_tokens)} / {tokens(target.content_tokens)} / "
                      f"{tokens(target.tool_tokens)}", tokens(target.prompt_tokens))
    return table


def _caps_table(projection: Projection) -> Table:
    caps = Table(title="What if max_tokens were ...", title_justify="left")
    for column in ("max_tokens", "output tokens", "saved", "truncated", "wall time", "GPU-hours"):
        caps.add_column(column, justify="right")
    for row in projection.caps:
        # A cap above every sampled length can only be bounded: the sample never saw what it would cut.
        mark = "≥ " if row.beyond_sample else ""
        caps.add_row(f"{row.max_tokens:,}", mark + tokens(row.output_tokens),
                     "?" if row.beyond_sample else f"{row.saved_share:.1%}",
                     ("≤ " if row.beyond_sample else "") + f"{row.truncated_share:.1%}",
                     mark + duration(row.wall_s), mark + _hours(row.gpu_hours))
    return caps


def _fleet_table(projection: Projection) -> Table:
    fleet = Table(title="What if the fleet had ... GPUs", title_justify="left")
    for column in ("GPUs", "wall time", "GPU-hours"):
        fleet.add_column(column, justify="right")
    for gpu_row in projection.gpu_rows:
        fleet.add_row(str(gpu_row.gpus), duration(gpu_row.wall_s), _hours(gpu_row.gpu_hours))
    return fleet


def _hardware(found: HardwareProjection | None, console: Console) -> None:
    if found is None:
        return
    measured, model = found.measured, found.model
    table = Table(title=f"On other GPUs: a MODEL from public figures, not a measurement. Measured on "
                        f"{measured['gpus']}x {measured['name']} (kind from {measured['from']}): "
                        f"{measured['tokens_per_s_per_gpu']:,.0f} output tok/s per GPU", title_justify="left")
    for column in ("GPUs", "per-GPU ratio (bandwidth; range)", "output tok/s", "wall time", "GPU-hours", "row"):
        table.add_column(column, justify="left" if column in ("GPUs", "row") else "right")
    for row in found.rows:
        where = f"{row.gpus}x {row.name}"
        if row.ratio is None or row.wall_s is None or row.gpu_hours is None or row.tokens_per_s is None:
            table.add_row(where, "-", "-", "-", "-", f"does not fit one GPU ({model['weights_gb']:.0f} GB of weights)")
            continue
        ratio = row.ratio
        table.add_row(where, f"{ratio.point:.2f}  [{ratio.low:.2f} .. {ratio.high:.2f}]",
                      _span(row.tokens_per_s, lambda x: f"{x:,.0f}"), _span(row.wall_s, duration),
                      _span(row.gpu_hours, _hours), "measured kind, by count" if row.measured_kind else "model")
    console.print(table)
    weights = "unknown" if model["weights_gb"] is None else f"{model['weights_gb']:.1f} GB"
    console.print(f"model inputs: per-GPU memory bandwidth and dense {model['precision'].upper()} compute and memory "
                  f"from {model['table']} (sources there and in --json); weights {weights} ({model['precision']}), "
                  f"mem-fraction-static {model['mem_fraction_static']}. The range runs from the lower of the bandwidth "
                  "and compute ratios (times the KV cache's room, where smaller) to the higher, and includes the "
                  "sample's 90% interval of the tokens")


def _share(value: Interval) -> str:
    return _span(value, lambda x: f"{x:.1%}")


def _option(name: str, window: int | None) -> str:
    return f"--train-window {window:,}" if name == "train window" else name


def _purpose_lines(found: Purpose, console: Console) -> None:
    where = f" ({found.label})" if found.label != "whole set" else ""  # the whole set is the default target
    if found.window is not None and found.past_window is not None:
        over = found.prompts_over_window or 0.0
        alone = (f"; {over:,.0f} prompt(s) ({over / found.prompts:.1%}) fill it alone and would not be sent"
                 if over else "")
        console.print(f"training window {found.window:,} tokens, prompt included{where}: {_share(found.past_window)} "
                      f"of the output tokens are past it{alone}")
    if not found.looping_replies:
        console.print(f"loops{where}: no reply of the sample loops")
        return
    stopped = f", {found.stopped_replies:.1%} already stopped by a loop stop" if found.stopped_replies else ""
    console.print(f"loops{where}: {found.looping_replies:.1%} of the replies loop{stopped}; they hold "
                  f"{_share(found.loop_tokens)} of the output tokens")


def _purpose(projection: Projection, console: Console) -> None:
    if not projection.purpose:
        return
    _purpose_lines(projection.purpose[0], console)  # the shares; the savings table has every target
    table = Table(title="What stopping them would save (90% intervals)", title_justify="left")
    for column in ("target", "option", "output tokens saved", "share", "wall time saved", "GPU-hours saved"):
        table.add_column(column, justify="left" if column in ("target", "option") else "right")
    for found in projection.purpose:
        for saving in found.savings:
            if saving.option != "train window" and not found.looping_replies:
                continue  # nothing loops: the loop stop saves nothing, and both is the window alone
            table.add_row(found.label, _option(saving.option, found.window), _span(saving.output_tokens, tokens),
                          _share(saving.share), _span(saving.wall_s, duration), _span(saving.gpu_hours, _hours))
    if table.row_count:
        console.print(table)
    if projection.purpose[0].window is None:
        console.print("pass --train-window N (4096 for the DFlash recipe) for the tokens past the trainer's window "
                      "and what client.run --train-window would save")


def _extension(projection: Projection, console: Console) -> None:
    if not projection.extension:
        return
    first = projection.extension[0]
    table = Table(title=f"client.run --extend from --train-window {first.from_window:,} to {first.to_window:,} "
                        "(90% intervals)", title_justify="left")
    for column in ("target", "cut replies", "tokens continued", "GPU-hours", "tokens regenerated", "GPU-hours",
                   "new prompts"):
        table.add_column(column, justify="left" if column == "target" else "right")
    for cost in projection.extension:
        table.add_row(cost.label, _span(cost.cut_replies, lambda x: f"{x:,.0f}"),
                      _span(cost.continued_tokens, tokens), _span(cost.continued_gpu_hours, _hours),
                      _span(cost.regenerated_tokens, tokens), _span(cost.regenerated_gpu_hours, _hours),
                      f"{cost.new_prompts:,.0f}")
    console.print(table)
    console.print("continued: what the extension generates for the replies the narrow window cut; regenerated: "
                  "generating the same replies again from token 0. New prompts fill the narrow window alone: they "
                  "have no record to continue and are generated whole either way. The wall time is a floor (the "
                  "tail of long replies is not modelled).")
