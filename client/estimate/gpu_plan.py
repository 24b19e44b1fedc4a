"""Which GPU kind the estimate was measured on, and onto which kinds and counts it is projected.

The kind comes from the servers (`/v1/loads` `accelerator`, read during the calibration by the
dispatcher, client.fleet.device) when they all name one kind the table knows; else from --gpu-kind
(a simulated fleet names "Simulated GPU" unless it plays a kind, and results read back with --from-results
name none). The targets are --project, else every kind of the table at the fleet's GPU count and at 8. The
arithmetic is client.estimate.hardware's; this module only decides its inputs and says why when it cannot.
"""

from __future__ import annotations

import argparse
from typing import Any

from client.core.errors import ConfigError
from client.estimate.hardware import (
    GpuKind,
    HardwareProjection,
    HardwareTable,
    default_targets,
    load_table,
    parse_targets,
    project_hardware,
)
from client.estimate.measure import Measurements
from client.estimate.project import Projection, set_lengths


def check_options(args: argparse.Namespace) -> None:
    """--gpu-kind and --project name kinds of the table: refused before anything is sent (ConfigError)."""
    if args.gpu_kind is None and args.project is None:
        return
    table = load_table()
    if args.gpu_kind is not None and table.kind(args.gpu_kind) is None:
        raise ConfigError(f"--gpu-kind {args.gpu_kind!r}: not a kind in {table.path} (known: {_keys(table)})")
    if args.project is not None and not parse_targets(args.project, table):
        raise ConfigError(f"--project {args.project!r} names no GPU kind (known: {_keys(table)})")


def _keys(table: HardwareTable) -> str:
    return ", ".join(kind.key for kind in table.kinds)


def measured_kind(table: HardwareTable, names: tuple[str, ...], option: str | None,
                  notes: list[str]) -> tuple[GpuKind | None, str]:
    """(the kind measured on, where that came from); notes say why not, or what was set aside."""
    known = [table.kind(name) for name in names]
    if len(names) == 1 and known[0] is not None:
        if option and table.kind(option) != known[0]:
            notes.append(f"--gpu-kind {option} is set aside: the servers name their GPUs {names[0]!r}")
        return known[0], f"servers ({names[0]})"
    if option:
        kind = table.kind(option)
        if names:
            notes.append(f"the servers name their GPUs {', '.join(map(repr, names))}; the kind measured on is taken "
                         f"from --gpu-kind {option}")
        return kind, "--gpu-kind"
    if len(names) > 1:
        notes.append(f"the servers name several GPU kinds ({', '.join(map(repr, names))}): no projection onto other "
                     "GPUs from a mixed fleet; calibrate on one kind, or pass --gpu-kind KIND")
    elif names:
        notes.append(f"the servers name their GPUs {names[0]!r}, which {table.path} does not know: pass --gpu-kind "
                     f"KIND ({_keys(table)}) to project onto other GPUs")
    else:
        notes.append(f"no GPU kind is known for these figures (the servers name none): pass --gpu-kind KIND "
                     f"({_keys(table)}) to project onto other GPUs")
    return None, ""


def hardware_projection(args: argparse.Namespace, info: dict[str, Any], projection: Projection, found: Measurements,
                        strata: dict[str, int], gpus: int) -> tuple[HardwareProjection | None, list[str]]:
    """The rows of the whole set on other GPU kinds and counts, or None and the reason."""
    table = load_table()
    notes: list[str] = []
    measured, source = measured_kind(table, tuple(info.get("accelerators") or ()), args.gpu_kind, notes)
    if measured is None or not projection.targets:
        return None, notes
    targets = parse_targets(args.project, table) if args.project else default_targets(table, measured, gpus)
    lengths, weights = set_lengths(strata, found)
    whole = projection.targets[0]
    served = found.models.most_common(1)[0][0] if found.models else args.model
    hardware = project_hardware(
        table=table, measured=measured, measured_from=source, measured_gpus=gpus, rate=projection.throughput,
        tokens=whole.output_tokens, jobs=whole.prompts, lengths=lengths, weights=weights, slots=projection.slots,
        seed=args.seed, served=served, targets=targets, precision=args.precision, weights_gb=args.weights_gb)
    return hardware, notes + list(hardware.notes)
