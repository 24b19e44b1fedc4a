"""The GPU-node layout planner: hardware + model + wishes -> TP/DP, instances, ports and SGLang flags.

Modules: `model` (architecture numbers and their byte counts), `presets` (node types from
launch/presets/*.toml), `memory` (per-GPU arithmetic behind `--explain`), `layout` (the choice and the
command lines), `render` and `compose` (text forms), `cli` (`python -m launch.plan`), `sglang_flags`
(SGLang's spellings of the options). For launch/start_servers.sh: `settings` and `envfile` (its options
and env files) and `start` (`python -m launch.plan.start`, the plan as shell variables for the script).
"""

from __future__ import annotations

from launch.plan.errors import PlanError
from launch.plan.layout import Instance, MtpSettings, Plan, PlanRequest, make_plan, parse_gpu_list
from launch.plan.model import MODELS, QWEN36_27B, QWEN36_27B_FP8, ModelSpec, default_model
from launch.plan.presets import Preset, load_preset, preset_names

__all__ = [
    "MODELS", "QWEN36_27B", "QWEN36_27B_FP8", "Instance", "ModelSpec", "MtpSettings", "Plan", "PlanError",
    "PlanRequest", "Preset", "default_model", "load_preset", "make_plan", "parse_gpu_list", "preset_names",
]
