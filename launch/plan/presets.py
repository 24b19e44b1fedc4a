"""Hardware presets: one small TOML file per node type under launch/presets/, loaded into a frozen record.

Owns the preset schema and its validation. Adding a node type means adding one file; the keys are those
of `Preset` below (unknown keys are rejected so a typo fails loudly instead of being ignored).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from launch.plan.errors import PlanError

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"
DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.23-cu130"


@dataclass(frozen=True)
class Preset:
    """A node type and the SGLang settings that suit it. Memory is what nvidia-smi reports, in GiB."""

    name: str
    description: str
    gpu: str
    gpu_count: int
    gpu_memory_gib: float
    mem_fraction_static: float = 0.85
    attention_backend: str = ""
    speculative_algorithm: str = "EAGLE"
    host: str = "0.0.0.0"
    image: str = DEFAULT_IMAGE
    extra_args: tuple[str, ...] = ()
    # A simulated preset runs `python -m simulator` per instance instead of SGLang (no GPU involved).
    simulated: bool = False
    sim_speed: float = 1.0
    sim_startup_delay: float = 1.0
    sim_max_running: int = 64

    def __post_init__(self) -> None:
        if self.gpu_count < 1:
            raise PlanError(f"preset {self.name}: gpu_count must be at least 1, got {self.gpu_count}")
        if self.gpu_memory_gib <= 0:
            raise PlanError(f"preset {self.name}: gpu_memory_gib must be positive, got {self.gpu_memory_gib}")
        if not 0.3 <= self.mem_fraction_static <= 0.95:
            raise PlanError(f"preset {self.name}: mem_fraction_static must be in [0.3, 0.95]")


_FIELDS = {f.name for f in fields(Preset)} - {"name"}


def preset_names(directory: Path = PRESET_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_preset(name: str, directory: Path = PRESET_DIR) -> Preset:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(preset_names(directory)) or "none"
        raise PlanError(f"unknown preset {name!r}; known presets: {known} "
                        f"(one TOML file each in launch/presets/; copy one to add a node type)")
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"preset file {path.name} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise PlanError(f"preset file {path.name}: unknown key(s) {', '.join(unknown)}; "
                        f"allowed: {', '.join(sorted(_FIELDS))}")
    if "extra_args" in data:
        data["extra_args"] = tuple(str(a) for a in data["extra_args"])
    try:
        return Preset(name=name, **data)
    except TypeError as exc:  # a required key is missing
        raise PlanError(f"preset file {path.name}: {exc}") from exc
