"""docker-compose.yml: in sync with the planner, valid YAML, one service per planned instance per preset
profile, the GPU/network/health settings SGLang needs, and a CPU-only sim profile with an S3 store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch.plan import load_preset, make_plan, preset_names
from launch.plan.cli import build_parser, request_from_args, run

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "docker-compose.yml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert doc["name"] == "regen-swarm"
    assert set(doc["volumes"]) >= {"model-cache"}
    return dict(doc["services"])


def planned(preset: str) -> Any:
    args = build_parser().parse_args(["--preset", preset])
    return make_plan(request_from_args(args, load_preset(preset)))


def test_checked_in_file_matches_the_planner() -> None:
    proc = subprocess.run([sys.executable, "-m", "launch.plan", "--compose"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert proc.stdout == COMPOSE.read_text(), \
        "docker-compose.yml is stale: regenerate it with  python -m launch.plan --compose > docker-compose.yml"


def by_profile(services: dict[str, Any], profile: str) -> dict[str, Any]:
    return {name: s for name, s in services.items() if s.get("profiles") == [profile]}


@pytest.mark.parametrize("preset", [p for p in preset_names() if p != "sim"])
def test_one_gpu_service_per_planned_instance(services: dict[str, Any], preset: str) -> None:
    plan = planned(preset)
    mine = by_profile(services, preset)
    assert len(mine) == len(plan.instances)
    for inst in plan.instances:
        svc = mine[f"{preset}-{inst.index}"]
        assert svc["image"].startswith("lmsysorg/sglang:")
        assert svc["network_mode"] == "host" and svc["ipc"] == "host"
        assert svc["entrypoint"] == ["python3", "-m", "sglang.launch_server"]
        assert svc["command"] == list(inst.argv[3:])
        (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert device["device_ids"] == [str(g) for g in inst.gpus]
        health = svc["healthcheck"]
        assert health["test"][-1] == f"http://127.0.0.1:{inst.port}/health"
        assert health["start_period"] == "30m"
        assert any(v.endswith(":/root/.cache/huggingface") and "model-cache" in v for v in svc["volumes"])


def test_sim_profile_runs_the_simulator_and_an_s3_store(services: dict[str, Any]) -> None:
    plan = planned("sim")
    sim = by_profile(services, "sim")
    assert set(sim) == {f"sim-{i.index}" for i in plan.instances} | {"sim-s3"}
    for inst in plan.instances:
        svc = sim[f"sim-{inst.index}"]
        assert "deploy" not in svc  # CPU only
        script = svc["command"][-1]
        assert f"python -m simulator --host 0.0.0.0 --port {inst.port} " in script
        assert svc["ports"] == [f"{inst.port}:{inst.port}"]
        assert ".:/app:ro" in svc["volumes"]
    s3 = sim["sim-s3"]
    assert "moto_server -H 0.0.0.0 -p 5000" in s3["command"][-1]
    assert s3["ports"] == ["5000:5000"]


def test_single_preset_compose_keeps_the_sim_profile() -> None:
    doc = yaml.safe_load(run(["--preset", "b200-8x", "--compose"]))
    profiles = {s["profiles"][0] for s in doc["services"].values()}
    assert profiles == {"b200-8x", "sim"}
    assert len(doc["services"]) == 8 + 4 + 1


def test_secrets_and_dollars_are_left_to_compose() -> None:
    doc = yaml.safe_load(run(["--preset", "blackwell-4x", "--compose", "--api-key", "s3cret",
                              "--served-model-name", "cost$1"]))
    command = doc["services"]["blackwell-4x-0"]["command"]
    assert "s3cret" not in str(doc)
    assert command[command.index("--api-key") + 1].startswith("${SGLANG_API_KEY")
    assert command[command.index("--served-model-name") + 1] == "cost$$1"
