"""The estimate before the hardware: the projection onto other GPU kinds (its arithmetic against a table of
known inputs, the data file's figures and sources, the seeds' own check), the GPU kind and count read from
the servers' /v1/loads, `client.estimate --simulate N`, and --set-size. The CLI runs on real simulated
servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.estimate.hardware import (
    DATA_FILE,
    LABEL,
    Ratio,
    default_targets,
    load_table,
    parse_targets,
    project_hardware,
    ratio,
)
from client.estimate.model import Interval, Throughput, tail_seconds
from client.fleet.device import Device, parse_device
from tests.conftest import REPO

KNOWN = """
[defaults]
mem_fraction_static = 0.8

[[kinds]]
key = "a"
name = "Kind A"
match = ["kind", "a"]
memory_gb = 100
memory_bandwidth_tb_s = 1.0
bf16_dense_tflops = 100
fp8_dense_tflops = 200
source = "test"

[[kinds]]
key = "b"
name = "Kind B"
match = ["kind", "b"]
memory_gb = 200
memory_bandwidth_tb_s = 4.0
bf16_dense_tflops = 300
fp8_dense_tflops = 600
source = "test"

[[kinds]]
key = "c"
name = "Kind C"
match = ["kind", "c"]
memory_gb = 60
memory_bandwidth_tb_s = 2.0
bf16_dense_tflops = 400
fp8_dense_tflops = 800
source = "test"

[[models]]
key = "m"
match = ["m-25b"]
params_b = 25
source = "test"
"""


@pytest.fixture
def known(tmp_path: Path) -> Any:
    path = tmp_path / "gpus.toml"
    path.write_text(KNOWN)
    return load_table(path)


# Weights 50 GB (25B in BF16); 80% of memory for weights and cache: KV room A 30 GB, B 110 GB, C -2 GB.
@pytest.mark.parametrize(("measured", "target", "precision", "expected"), [
    # bandwidth 4x, compute 3x: the point is the bandwidth ratio, the range down to compute; B has more cache.
    ("a", "b", "bf16", Ratio(4.0, 3.0, 4.0, 4.0, 3.0, 1.0)),
    # the other way: bandwidth 1/4, compute 1/3; B's 110 GB of cache down to A's 30 scales the low end.
    ("b", "a", "bf16", Ratio(0.25, 0.25 * 30 / 110, 1 / 3, 0.25, 1 / 3, 30 / 110)),
    # FP8 weights (25 GB): compute ratio from the FP8 column; the cache rooms change (55 and 135 GB).
    ("b", "a", "fp8", Ratio(0.25, 0.25 * 55 / 135, 1 / 3, 0.25, 1 / 3, 55 / 135)),
    # 50 GB of weights do not fit 80% of C's 60 GB: not projected.
    ("a", "c", "bf16", None),
    # ... but 25 GB of FP8 weights do (23 GB of cache, under A's 55: the low end shrinks).
    ("a", "c", "fp8", Ratio(2.0, 2.0 * 23 / 55, 4.0, 2.0, 4.0, 23 / 55)),
], ids=["up", "down", "down-fp8", "does-not-fit", "fits-in-fp8"])
def test_ratio_arithmetic(known: Any, measured: str, target: str, precision: Any, expected: Ratio | None) -> None:
    weights = 25 * (2 if precision == "bf16" else 1)
    got = ratio(known.kind(measured), known.kind(target), precision, weights, known.mem_fraction)
    if expected is None:
        assert got is None
        return
    assert got is not None
    for name in ("point", "low", "high", "bandwidth", "compute", "kv"):
        assert getattr(got, name) == pytest.approx(getattr(expected, name)), name


def rate(tokens_per_s: float, slots: float = 16.0) -> Throughput:
    return Throughput(tokens_per_s=tokens_per_s, concurrency=slots, peak_concurrency=slots, window_s=100.0,
                      span_s=120.0, typical_s=10.0, blocks=((tokens_per_s * 100, 100.0),))


def test_projection_rows(known: Any) -> None:
    lengths, weights = [100, 300] * 50, [1.0] * 100
    measured = rate(1000.0)  # on 2 GPUs of kind A: 500 tok/s per GPU
    tokens = Interval(1e6, 9e5, 1.1e6)
    found = project_hardware(table=known, measured=known.kind("a"), measured_from="servers (Kind A)", measured_gpus=2,
                             rate=measured, tokens=tokens, jobs=5000, lengths=lengths, weights=weights, slots=16,
                             seed=0, served="org/M-25B", targets=parse_targets("bx4,c,a", known))
    b, c, a = found.rows
    assert found.label == LABEL and all(row.label == LABEL for row in found.rows)
    assert found.model["weights_gb"] == 50 and found.model["precision"] == "bf16"
    assert found.measured["tokens_per_s_per_gpu"] == 500
    # B x4: 500 tok/s per GPU x ratio 4 (3 to 4) x 4 GPUs; the tail at 4x the pace on twice the slots.
    assert (b.gpus, b.tokens_per_s) == (4, Interval(8000.0, 6000.0, 8000.0))
    tail = tail_seconds(lengths, weights, 5000, 32, measured.per_slot, 0, 0.0)
    assert b.wall_s == Interval(pytest.approx(1e6 / 8000 + tail / 4), pytest.approx(9e5 / 8000 + tail / 4),
                                pytest.approx(1.1e6 / 6000 + tail / 3))
    assert b.gpu_hours is not None and b.gpu_hours.point == pytest.approx(b.wall_s.point * 4 / 3600)
    assert b.inputs["memory_bandwidth_tb_s"] == 4.0 and b.inputs["dense_tflops"] == 300 and b.inputs["source"]
    # C (no count: the measured one) does not fit; A is the kind measured on, scaled by count only.
    assert c.ratio is None and c.wall_s is None and c.kv_room_gb == pytest.approx(-2.0)
    assert a.measured_kind and a.ratio == Ratio(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert a.tokens_per_s == Interval(1000.0, 1000.0, 1000.0)


@pytest.mark.parametrize(("text", "key"), [
    ("NVIDIA B200", "b200"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 PCIe", None),  # 2 TB/s, not the SXM part
    ("NVIDIA H200", "h200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
    ("NVIDIA RTX 6000 Ada Generation", None),
    ("NVIDIA GB200", None),
    ("Simulated GPU", None),
    ("rtx-pro-6000", "rtx-pro-6000"),  # --gpu-kind and --project take the keys and aliases
    ("B200", "b200"),
])
def test_the_table_knows_the_names_servers_report(text: str, key: str | None) -> None:
    kind = load_table().kind(text)
    assert (kind.key if kind else None) == key


def test_the_data_file_holds_the_designs_figures_with_sources() -> None:
    table = load_table()
    figures = {k.key: (k.bandwidth_tb_s, k.memory_gb) for k in table.kinds}
    assert figures == {"b200": (8.0, 180), "h200": (4.8, 141), "h100": (3.35, 80), "rtx-pro-6000": (1.792, 96)}
    for kind in table.kinds:
        assert "datasheet" in kind.source and "dense" in kind.source and "sparsity" in kind.source, kind.key
        assert kind.fp8_tflops == pytest.approx(2 * kind.bf16_tflops, rel=0.001), kind.key
    assert table.model("Qwen/Qwen3.6-27B") is not None and table.path == "client/estimate/gpus.toml"
    assert DATA_FILE.name == "gpus.toml"
    assert [k.key for k, _ in default_targets(table, table.kinds[3], 4)][:2] == ["rtx-pro-6000", "rtx-pro-6000"]


def seeds_check() -> Any:
    """The seeds' figures: ~400 output tok/s per GPU measured on 4x RTX PRO 6000; projected onto 7x B200 for the
    1.64B tokens the job generated (no tail: at this scale it is minutes of a day)."""
    table = load_table()
    tokens = 1.64e9
    return project_hardware(table=table, measured=table.kind("rtx-pro-6000"), measured_from="seeds",  # type: ignore
                            measured_gpus=4, rate=rate(1600.0), tokens=Interval(tokens, tokens, tokens), jobs=914_000,
                            lengths=[], weights=[], slots=256, seed=0, served="Qwen/Qwen3.6-27B",
                            targets=parse_targets("b200x7", table)).rows[0]


def test_the_seeds_check_in_the_docs() -> None:
    row = seeds_check()
    assert row.tokens_per_s.point == pytest.approx(12_500, rel=0.001)  # 400 x 8.0/1.792 x 7
    assert row.tokens_per_s.high == pytest.approx(12_600, rel=0.001)  # the compute ratio, 4.5
    hours = row.wall_s.point / 3600
    assert hours == pytest.approx(36.4, abs=0.05)
    assert 24 <= hours <= 48, "inside the 1-2 days the job took"
    assert row.tokens_per_s.point / 30_000 == pytest.approx(0.417, abs=0.001)
    assert row.tokens_per_s.point / 15_000 == pytest.approx(0.833, abs=0.001)
    text = (REPO / "docs" / "estimate.md").read_text()
    for figure in ("12,500", "36.4 h", "0.42", "0.83", "4.46"):
        assert figure in text, figure


@pytest.mark.parametrize(("body", "device"), [
    (b'{"accelerator": "NVIDIA B200", "num_accelerators": 1, "loads": [{}, {}]}', Device("NVIDIA B200", 2)),
    (b'{"accelerator": "NVIDIA B200", "num_accelerators": 2, "loads": [{}]}', Device("NVIDIA B200", 2)),  # TP=2
    (b'{"accelerator": null, "num_accelerators": 1, "loads": [{}]}', None),  # SGLang on a CPU: no GPU to count
    (b'{"accelerator": "cpu", "num_accelerators": 1, "loads": [{}]}', Device("cpu", None)),
    (b'{"accelerator": "", "loads": [{}]}', None),
    (b'[1, 2]', None),
    (b'not json', None),
], ids=["dp2", "tp2", "cpu-null", "cpu", "nothing", "not-an-object", "not-json"])
def test_device_from_v1_loads(body: bytes, device: Device | None) -> None:
    assert parse_device(body) == device


def estimate(*args: str, timeout: float = 300) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run([sys.executable, "-m", "client.estimate", *args, "--progress-every", "60"],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)
    data = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else {}
    return proc.returncode, data, proc.stderr if "--json" in args else proc.stdout + proc.stderr


def prompts(path: Path, count: int) -> Path:
    lines = [orjson.dumps({"id": f"{s}-{i}", "messages": [{"role": "user", "content": f"q {i}"}],
                           "meta": {"source": s}}) for i in range(count) for s in ("chat", "code")]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


SMALL = ("--sim-max-running", "8", "--sim-arg=--mean-tokens", "--sim-arg=60", "--sample", "40", "--rounds", "50",
         "--max-tokens", "300")


@pytest.mark.slow
def test_simulate_with_a_set_size_reads_the_gpus_from_the_servers(tmp_path: Path) -> None:
    # Two simulated servers that name an RTX PRO 6000 and two GPUs each (TP=2): the kind and count come from
    # their /v1/loads, the set is 914,000 prompts shaped like the 120 in the file.
    code, data, stderr = estimate(
        "--simulate", "2", "--prompts", str(prompts(tmp_path / "p.jsonl", 60)), "--set-size", "914000",
        "--out", str(tmp_path / "cal"), "--json", *SMALL,
        "--sim-arg=--accelerator", "--sim-arg=NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "--sim-arg=--num-accelerators", "--sim-arg=2", "--project", "b200x8,h100x8")
    assert code == 0, stderr[-3000:]
    info, projection = data["input"], data["projection"]
    assert info["simulated"]["servers"] == 2 and info["simulated"]["speed"] == 20.0
    assert info["prompts"] == 914_000 and info["prompts_in_files"] == 120
    assert info["strata"] == {"chat": 457_000, "code": 457_000}
    assert info["accelerators"] == ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    assert info["server_gpus"] == 4 and info["plan"]["gpus"] == 4 and info["gpus_from"] == "servers"
    assert projection["targets"][0]["prompts"] == 914_000
    hardware = projection["hardware"]
    assert hardware["label"] == LABEL and hardware["measured"]["kind"] == "rtx-pro-6000"
    assert hardware["measured"]["from"].startswith("servers")
    rows = {(r["kind"], r["gpus"]): r for r in hardware["rows"]}
    assert set(rows) == {("b200", 8), ("h100", 8)}
    b200 = rows[("b200", 8)]
    assert b200["label"] == LABEL and b200["inputs"]["memory_bandwidth_tb_s"] == 8.0 and b200["inputs"]["source"]
    per_gpu = hardware["measured"]["tokens_per_s_per_gpu"]
    assert b200["tokens_per_s"]["point"] == pytest.approx(per_gpu * 8 * 8.0 / 1.792)
    assert b200["ratio"]["low"] <= b200["ratio"]["point"] <= b200["ratio"]["high"]


@pytest.mark.slow
def test_simulate_without_a_known_kind_says_how_to_project(tmp_path: Path) -> None:
    code, _, out = estimate("--simulate", "1", "--prompts", str(prompts(tmp_path / "p.jsonl", 30)),
                            "--out", str(tmp_path / "cal"), *SMALL)
    assert code == 0, out[-3000:]
    assert "simulated fleet: 1 simulated server(s) at speed 20; the throughput and times below are on the modelled" \
           " GPU's clock" in out
    assert "'Simulated GPU', which client/estimate/gpus.toml does not know: pass --gpu-kind" in out
    assert "On other GPUs" not in out


@pytest.mark.parametrize(("args", "says"), [
    (["--simulate", "2", "--endpoints", "http://127.0.0.1:9"], "exactly one of --endpoints"),
    (["--endpoints", "http://127.0.0.1:9", "--sim-arg=--speed"], "--sim-arg is passed to the simulated servers"),
    (["--simulate", "1", "--gpu-kind", "tpu-v5"], "--gpu-kind 'tpu-v5': not a kind in client/estimate/gpus.toml"),
    (["--simulate", "1", "--project", "b200x8,a100"], "--project 'a100': no GPU kind 'a100'"),
    (["--simulate", "1", "--set-size", "0"], "--set-size: must be at least 1"),
])
def test_refusals_before_anything_starts(tmp_path: Path, args: list[str], says: str) -> None:
    code, _, out = estimate("--prompts", str(prompts(tmp_path / "p.jsonl", 2)), *args, timeout=60)
    assert code == 2 and says in out, out[-2000:]
    assert "starting" not in out and not (tmp_path / "cal").exists()
