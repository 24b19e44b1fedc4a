"""launch/k8s/: every manifest validates against the Kubernetes API schemas (offline, the schemas that
`kubernetes-validate` ships), and the wiring holds: GPU requests, health probes with a long start-up,
/dev/shm, the headless Service in front of the StatefulSet, the Indexed Job's shard index and count,
the endpoints each shard drives (the Job's own shell, run here), and the Secret references."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO

K8S = REPO / "launch" / "k8s"
# A Kubernetes release most clusters run or have passed; the manifests use nothing newer.
K8S_VERSION = "1.30.0"
MANIFESTS = ["sglang.yaml", "service.yaml", "client-job.yaml", "secret.example.yaml"]


def load(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def one(name: str, kind: str) -> dict[str, Any]:
    docs = [d for d in load(name) if d["kind"] == kind]
    assert len(docs) == 1, f"{name}: expected one {kind}"
    return docs[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


@pytest.mark.parametrize("name", MANIFESTS)
def test_validates_against_the_api_schemas(name: str) -> None:
    for doc in load(name):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_a_broken_manifest_is_caught() -> None:
    """The validator is not a no-op: a misspelt field and a wrong type both fail."""
    job = one("client-job.yaml", "Job")
    job["spec"]["completion"] = job["spec"].pop("completions")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)
    sts = one("sglang.yaml", "StatefulSet")
    sts["spec"]["replicas"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSION, strict=True)


def test_kustomization_lists_the_workloads_and_not_the_secret() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["sglang.yaml", "service.yaml", "client-job.yaml"]


def test_sglang_servers_gpus_probes_and_shm() -> None:
    sts = one("sglang.yaml", "StatefulSet")
    c = container(sts)
    assert c["image"].startswith("lmsysorg/sglang:")
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1" == c["resources"]["limits"]["nvidia.com/gpu"]
    port = next(p for p in c["ports"] if p["name"] == "http")["containerPort"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health", probe
        assert c[probe]["httpGet"]["port"] in ("http", port), probe
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800, "loading a 27B model takes minutes"
    volumes = {v["name"]: v for v in sts["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert sts["spec"]["podManagementPolicy"] == "Parallel"


def test_sglang_args_are_the_planners() -> None:
    """The server command line is the one launch.plan writes for one B200 replica (port and all)."""
    plan = subprocess.run([sys.executable, "-m", "launch.plan", "--preset", "b200-8x", "--format", "commands"],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    first = shlex.split(plan.stdout.splitlines()[0])
    planned = first[first.index("sglang.launch_server") + 1:]
    c = container(one("sglang.yaml", "StatefulSet"))
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    assert c["args"] == planned


def test_headless_service_fronts_the_statefulset() -> None:
    sts = one("sglang.yaml", "StatefulSet")
    svc = one("service.yaml", "Service")
    assert svc["spec"]["clusterIP"] == "None", "headless: one DNS name per server, never a load balancer"
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["ports"][0]["port"] == 30000


def shard_urls(job: dict[str, Any], index: int) -> list[str]:
    """Run the Job's own shell with `python` swapped for a printer: the --endpoints pod `index` gets."""
    c = container(job)
    script = c["args"][0].replace("exec python -m client.run", "printf '%s\\n'")
    env = {name: e["value"] for name, e in env_of(c).items() if "value" in e}
    proc = subprocess.run(["sh", "-c", script], env={**env, "JOB_COMPLETION_INDEX": str(index),
                                                     "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30, check=True)
    words = proc.stdout.split("\n")
    return words[words.index("--endpoints") + 1].split(",")


def test_indexed_job_shards_and_endpoints() -> None:
    job = one("client-job.yaml", "Job")
    sts = one("sglang.yaml", "StatefulSet")
    svc = one("service.yaml", "Service")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    c = container(job)
    env = env_of(c)
    count = int(env["REGEN_SHARD_COUNT"]["value"])
    assert spec["completions"] == count == spec["parallelism"], "the shard count is the Job's completions"
    assert "--shard auto" in c["args"][0]
    assert spec["template"]["spec"]["restartPolicy"] == "Never" and spec["backoffLimitPerIndex"] > 0
    (rule,) = spec["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailIndex" and rule["onExitCodes"]["values"] == [2, 3], "bad options are not retried"
    per_shard = int(env["SERVERS_PER_SHARD"]["value"])
    assert count * per_shard == sts["spec"]["replicas"], "every server is driven by exactly one shard"
    name, service, port = sts["metadata"]["name"], svc["metadata"]["name"], svc["spec"]["ports"][0]["port"]
    seen = [url for k in range(count) for url in shard_urls(job, k)]
    assert seen == [f"http://{name}-{i}.{service}:{port}" for i in range(sts["spec"]["replicas"])]


def test_s3_credentials_come_from_the_secret() -> None:
    job = one("client-job.yaml", "Job")
    secret = one("secret.example.yaml", "Secret")
    env = env_of(container(job))
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        ref = env[key]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] == key
        assert key in secret["stringData"]
    assert all("value" not in env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")), "never inline"
    assert env["S3_PREFIX"]["value"].startswith("s3://") and '--s3 "$S3_PREFIX"' in container(job)["args"][0]


def test_every_manifest_is_covered() -> None:
    assert sorted(p.name for p in K8S.glob("*.yaml")) == sorted([*MANIFESTS, "kustomization.yaml"])


def test_validation_needs_no_network(tmp_path: Path) -> None:
    """The schemas ship with the package: validating in a process with no network at all works."""
    unshare = subprocess.run(["sh", "-c", "command -v unshare"], capture_output=True, text=True, check=False)
    code = ("import sys, yaml, kubernetes_validate as kv\n"
            "for doc in yaml.safe_load_all(open(sys.argv[1])):\n"
            f"    kv.validate(doc, {K8S_VERSION!r}, strict=True)\n"
            "print('ok')\n")
    command = [sys.executable, "-c", code, str(K8S / "sglang.yaml")]
    if unshare.returncode == 0:
        probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
        if probe.returncode == 0:
            command = ["unshare", "-rn", *command]
    env = {"PATH": "/usr/bin:/bin", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "NO_PROXY": ""}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_the_client_image_copies_every_package_it_installs() -> None:
    """`pip install .` in the image finds only what was copied: every package pyproject.toml includes."""
    import tomllib

    included = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {line.split()[1] for line in (REPO / "launch" / "k8s" / "Dockerfile.client").read_text().splitlines()
              if line.startswith("COPY ")}
    assert {pattern.rstrip("*") for pattern in included} <= copied
