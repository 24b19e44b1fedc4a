"""The GPUs behind a server, as SGLang's `/v1/loads` names them: the device's name and how many.

SGLang 0.5.23 (`entrypoints/v1_loads.py`) puts `accelerator` (the device's marketing name, e.g. "NVIDIA
B200"; null on a CPU) and `num_accelerators` (the GPUs behind ONE DP rank: tp x pp, divided by the DP
ranks under attention DP) beside the per-rank `loads`. The server's GPUs are therefore
`num_accelerators` times its DP ranks (the entries of an unfiltered document). A server that names no
device (SGLang on a CPU answers null) or the CPU has no GPUs to count. Pure parsing; the
dispatcher calls it on the documents it polls anyway, and the run's GPU-hours and the estimate's
hardware projection read the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Device:
    """What one server says of its hardware; either part may be unknown (None)."""

    accelerator: str | None
    gpus: int | None  # num_accelerators x DP ranks


def parse_device(body: bytes) -> Device | None:
    """The device of a `/v1/loads` document (unfiltered by dp_rank); None when it names neither part."""
    try:
        document: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(document, dict):
        return None
    name = document.get("accelerator")
    accelerator = name.strip() if isinstance(name, str) and name.strip() else None
    per_rank = document.get("num_accelerators")
    ranks = document.get("loads")
    gpus = None
    on_gpu = accelerator is not None and accelerator.lower() != "cpu"
    if on_gpu and type(per_rank) is int and per_rank > 0 and isinstance(ranks, list) and ranks:
        gpus = per_rank * len(ranks)
    if accelerator is None and gpus is None:
        return None
    return Device(accelerator, gpus)
