"""Text forms of a plan: the human summary, `--explain`, shell commands, the endpoints file, the variables
that start_servers.sh evaluates, and JSON. Owns quoting and the masking of the API key in anything shown."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from launch.plan.layout import Instance, Plan
from launch.plan.memory import GIB

MASK = "***"


def masked(argv: Sequence[str]) -> list[str]:
    """The argv with the value of --api-key hidden, for anything printed or logged."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--api-key":
            out[i + 1] = MASK
    return [f"--api-key={MASK}" if a.startswith("--api-key=") else a for a in out]


def command_line(inst: Instance, *, mask: bool = True) -> str:
    argv = masked(inst.argv) if mask else list(inst.argv)
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in inst.env)
    return (env + " " if env else "") + shlex.join(argv)


def _layout_line(plan: Plan) -> str:
    kind = "simulated servers" if plan.preset.simulated else "SGLang servers"
    per = plan.tp * plan.dp
    shape = "one replica per GPU" if per == 1 else f"{per} GPUs per instance"
    mtp = plan.request.mtp
    spec = (f"MTP {mtp.algorithm} steps={mtp.steps} topk={mtp.topk} draft={mtp.resolved_draft_tokens()}"
            if mtp.enabled else "MTP off")
    return (f"{len(plan.instances)} {kind}, TP={plan.tp} DP={plan.dp} ({shape}), {spec}, "
            f"model {plan.request.model.path} ({plan.request.model.dtype}) as {plan.request.model.served_name}")


def render_text(plan: Plan) -> str:
    lines = [f"preset {plan.preset.name}: {plan.preset.description}", _layout_line(plan)]
    for inst in plan.instances:
        gpus = "-" if plan.preset.simulated else ",".join(map(str, inst.gpus))
        lines.append(f"  {inst.name}  gpus={gpus}  {inst.url}")
        lines.append(f"    {command_line(inst)}")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def render_explain(plan: Plan) -> str:
    req = plan.request
    lines = [f"Memory per GPU ({plan.node_gpus} GPU node, {plan.gpu_memory_gib:g} GiB each, "
             f"{len(plan.instances) * plan.tp * plan.dp} in use):"]
    for mem in plan.tried:
        lines += mem.explain()
    m = plan.memory
    if req.tp is not None:
        why = f"TP={plan.tp} as asked (--tp)"
    elif plan.tp == 1:
        why = "TP=1 fits, so every GPU runs its own replica (no all-reduce; a crash costs one replica)"
    else:
        why = f"TP={plan.tp} is the smallest degree that fits"
    lines.append(f"Choice: {why}: {_layout_line(plan)}.")
    lines.append(f"Per replica: weights {m.weights * plan.tp / GIB:.1f} GiB, KV cache "
                 f"{m.kv_tokens:,} tokens" + (f", ~{m.running_requests} running requests"
                                             if m.running_requests is not None else "") + ".")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"


def render_commands(plan: Plan) -> str:
    return "".join(f"{command_line(inst)}\n" for inst in plan.instances)


def render_endpoints(plan: Plan) -> str:
    return "".join(f"{inst.url}\n" for inst in plan.instances)


def render_bash(plan: Plan) -> str:
    """Variables for `eval` in start_servers.sh; plain indexed names so that bash 3.2 (macOS) reads them."""
    q = shlex.quote
    out = [f"PLAN_COUNT={len(plan.instances)}", f"PLAN_PRESET={q(plan.preset.name)}",
           f"PLAN_SIMULATED={1 if plan.preset.simulated else 0}", f"PLAN_TP={plan.tp}", f"PLAN_DP={plan.dp}"]
    for inst in plan.instances:
        i = inst.index
        devices = ",".join(map(str, inst.gpus))
        out += [f"PLAN_NAME_{i}={q(inst.name)}", f"PLAN_PORT_{i}={inst.port}",
                f"PLAN_GPUS_{i}={q(devices)}", f"PLAN_URL_{i}={q(inst.url)}",
                f"PLAN_HEALTH_{i}={q(inst.health_url)}",
                f"PLAN_ENV_{i}=({' '.join(q(f'{k}={v}') for k, v in inst.env)})",
                f"PLAN_ARGV_{i}=({' '.join(q(a) for a in inst.argv)})",
                f"PLAN_SHOWN_{i}={q(command_line(inst))}"]
    out += [f"PLAN_NOTE_{k}={q(n)}" for k, n in enumerate(plan.notes)]
    out.append(f"PLAN_NOTES={len(plan.notes)}")
    return "\n".join(out) + "\n"


def render_json(plan: Plan) -> str:
    m = plan.memory
    doc = {
        "preset": plan.preset.name, "simulated": plan.preset.simulated, "tp": plan.tp, "dp": plan.dp,
        "model": {"path": plan.request.model.path, "served_name": plan.request.model.served_name,
                  "dtype": plan.request.model.dtype, "params_b": plan.request.model.params_b},
        "memory_per_gpu_gib": {"total": round(m.total / GIB, 2), "weights": round(m.weights / GIB, 2),
                               "static": round(m.static / GIB, 2), "pool": round(m.pool / GIB, 2),
                               "kv_cache": round(m.kv_pool / GIB, 2), "state": round(m.state_pool / GIB, 2)},
        "kv_tokens_per_replica": m.kv_tokens, "running_requests_estimate": m.running_requests,
        "instances": [{"name": i.name, "gpus": list(i.gpus), "port": i.port, "url": i.url,
                       "health_url": i.health_url, "env": dict(i.env), "argv": masked(i.argv)}
                      for i in plan.instances],
        "idle_gpus": list(plan.idle_gpus), "notes": list(plan.notes),
    }
    return json.dumps(doc, indent=2) + "\n"
