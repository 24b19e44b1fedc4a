"""The layout planner: TP/DP choice, GPU assignment, ports and flags per preset, memory arithmetic, and the
errors bad input gets. Table-driven; no network, no GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from launch.plan import PlanError, load_preset, make_plan, preset_names
from launch.plan.cli import build_parser, main, preset_from_args, request_from_args, run
from launch.plan.layout import Plan
from launch.plan.memory import GIB
from launch.plan.model import QWEN36_27B, QWEN36_27B_FP8

REPO = Path(__file__).resolve().parent.parent


def plan_of(*argv: str) -> Plan:
    args = build_parser().parse_args(list(argv))
    return make_plan(request_from_args(args, preset_from_args(args)))


def flag(plan: Plan, index: int, name: str) -> str | None:
    argv = plan.instances[index].argv
    return argv[argv.index(name) + 1] if name in argv else None


# id, arguments, TP, DP, CUDA_VISIBLE_DEVICES per instance
LAYOUTS = [
    ("blackwell-4x", ["--preset", "blackwell-4x"], 1, 1, ["0", "1", "2", "3"]),
    ("b200-8x", ["--preset", "b200-8x"], 1, 1, [str(g) for g in range(8)]),
    ("b200-7x preset", ["--preset", "b200-7x"], 1, 1, [str(g) for g in range(7)]),
    ("7-GPU node via --num-gpus", ["--preset", "b200-8x", "--num-gpus", "7"], 1, 1, [str(g) for g in range(7)]),
    ("7 of 8 GPUs via --gpus", ["--preset", "b200-8x", "--gpus", "0-6"], 1, 1, [str(g) for g in range(7)]),
    ("nvidia-smi sees 7", ["--preset", "b200-8x", "--detected-gpus", "7"], 1, 1, [str(g) for g in range(7)]),
    ("nvidia-smi sees more than the preset", ["--preset", "blackwell-4x", "--detected-gpus", "8"], 1, 1,
     ["0", "1", "2", "3"]),
    ("gpu subset in order", ["--preset", "b200-8x", "--gpus", "4,5,0-1"], 1, 1, ["4", "5", "0", "1"]),
    ("fp8 on blackwell", ["--preset", "blackwell-4x", "--dtype", "fp8"], 1, 1, ["0", "1", "2", "3"]),
    ("bf16 too big for a 48 GiB GPU", ["--num-gpus", "4", "--gpu-memory-gib", "48"], 2, 1, ["0,1", "2,3"]),
    ("fp8 fits the 48 GiB GPU", ["--num-gpus", "4", "--gpu-memory-gib", "48", "--dtype", "fp8"], 1, 1,
     ["0", "1", "2", "3"]),
    ("72B too big for one 96 GB GPU", ["--preset", "blackwell-4x", "--params-b", "72"], 2, 1, ["0,1", "2,3"]),
    ("72B still fits one B200", ["--preset", "b200-8x", "--gpus", "0-6", "--params-b", "72"], 1, 1,
     [str(g) for g in range(7)]),
    ("forced TP=2", ["--preset", "blackwell-4x", "--tp", "2"], 2, 1, ["0,1", "2,3"]),
    ("DP=2 inside one server", ["--preset", "blackwell-4x", "--dp", "2"], 1, 2, ["0,1", "2,3"]),
    ("DP=4 with TP=2 on 8 GPUs", ["--preset", "b200-8x", "--tp", "2", "--dp", "4"], 2, 4, ["0,1,2,3,4,5,6,7"]),
]


@pytest.mark.parametrize(("args", "tp", "dp", "devices"), [c[1:] for c in LAYOUTS], ids=[c[0] for c in LAYOUTS])
def test_layout(args: list[str], tp: int, dp: int, devices: list[str]) -> None:
    plan = plan_of(*args)
    assert (plan.tp, plan.dp) == (tp, dp)
    assert [dict(i.env)["CUDA_VISIBLE_DEVICES"] for i in plan.instances] == devices
    assert [i.port for i in plan.instances] == [30000 + k for k in range(len(devices))]
    for k, inst in enumerate(plan.instances):
        assert inst.argv[:3] == ("python3", "-m", "sglang.launch_server")
        assert flag(plan, k, "--tp-size") == str(tp)
        assert flag(plan, k, "--dp-size") == str(dp)
        assert flag(plan, k, "--port") == str(inst.port)
        assert len(inst.gpus) == tp * dp


def test_b200_72b_on_seven_gpus_uses_tp2_and_names_the_idle_gpu() -> None:
    plan = plan_of("--preset", "b200-8x", "--gpus", "0-6", "--params-b", "144")
    assert plan.tp == 2
    assert [dict(i.env)["CUDA_VISIBLE_DEVICES"] for i in plan.instances] == ["0,1", "2,3", "4,5"]
    assert plan.idle_gpus == (6,)
    assert any("6 left idle" in n for n in plan.notes)


@pytest.mark.parametrize("preset", ["blackwell-4x", "b200-8x", "b200-7x"])
def test_every_gpu_preset_has_the_qwen36_flags(preset: str) -> None:
    plan = plan_of("--preset", preset)
    for k in range(len(plan.instances)):
        assert flag(plan, k, "--reasoning-parser") == "qwen3"
        assert flag(plan, k, "--tool-call-parser") == "qwen3_coder"
        assert flag(plan, k, "--speculative-algorithm") == "EAGLE"
        assert flag(plan, k, "--speculative-num-steps") == "3"
        assert flag(plan, k, "--speculative-eagle-topk") == "1"
        assert flag(plan, k, "--speculative-num-draft-tokens") == "4"
        assert flag(plan, k, "--mamba-radix-cache-strategy") == "extra_buffer"
        assert "--enable-metrics" in plan.instances[k].argv
        assert flag(plan, k, "--mem-fraction-static") == f"{load_preset(preset).mem_fraction_static:g}"
        assert flag(plan, k, "--host") == "0.0.0.0"
        assert flag(plan, k, "--served-model-name") == "Qwen/Qwen3.6-27B"
    backend = {"blackwell-4x": None, "b200-8x": "trtllm_mha", "b200-7x": "trtllm_mha"}[preset]
    assert flag(plan, 0, "--attention-backend") == backend


def test_mtp_off_drops_every_speculative_flag_and_the_mamba_strategy() -> None:
    argv = plan_of("--preset", "b200-8x", "--no-mtp").instances[0].argv
    assert not [a for a in argv if a.startswith("--speculative")]
    assert "--mamba-radix-cache-strategy" not in argv


def test_mtp_settings_are_passed_through() -> None:
    plan = plan_of("--preset", "blackwell-4x", "--mtp-algorithm", "NEXTN", "--mtp-steps", "2", "--mtp-topk", "2",
                   "--mtp-draft-tokens", "4")
    assert flag(plan, 0, "--speculative-algorithm") == "NEXTN"
    assert flag(plan, 0, "--speculative-num-steps") == "2"
    assert flag(plan, 0, "--speculative-eagle-topk") == "2"
    assert flag(plan, 0, "--speculative-num-draft-tokens") == "4"


def test_server_options_reach_the_command_and_extra_args_come_last() -> None:
    plan = plan_of("--preset", "blackwell-4x", "--model-path", "/models/q36", "--served-model-name", "q36",
                   "--api-key", "s3cret", "--context-length", "65536", "--mem-fraction", "0.8", "--host", "10.0.0.5",
                   "--base-port", "31000", "--kv-cache-dtype", "fp8_e4m3",
                   "--extra-args", "--max-running-requests 96 --chunked-prefill-size 8192",
                   "--extra-arg=--log-level=warning", "--python", "/opt/sg/bin/python")
    inst = plan.instances[1]
    assert inst.argv[0] == "/opt/sg/bin/python"
    assert flag(plan, 1, "--model-path") == "/models/q36"
    assert flag(plan, 1, "--served-model-name") == "q36"
    assert flag(plan, 1, "--api-key") == "s3cret"
    assert flag(plan, 1, "--context-length") == "65536"
    assert flag(plan, 1, "--mem-fraction-static") == "0.8"
    assert flag(plan, 1, "--host") == "10.0.0.5"
    assert flag(plan, 1, "--kv-cache-dtype") == "fp8_e4m3"
    assert inst.port == 31001
    assert inst.url == "http://10.0.0.5:31001"
    assert inst.health_url == "http://10.0.0.5:31001/health"
    assert inst.argv[-5:] == ("--max-running-requests", "96", "--chunked-prefill-size", "8192",
                              "--log-level=warning")


def test_sglang_spellings_of_the_options_are_accepted() -> None:
    ours = plan_of("--preset", "b200-8x", "--model", "/m", "--tp-size", "2", "--data-parallel-size", "2",
                   "--port", "31000", "--mem-fraction-static", "0.8", "--speculative-num-steps", "2")
    canonical = plan_of("--preset", "b200-8x", "--model-path", "/m", "--tp", "2", "--dp", "2", "--base-port", "31000",
                        "--mem-fraction", "0.8", "--mtp-steps", "2")
    assert ours.instances == canonical.instances
    assert flag(ours, 1, "--model-path") == "/m" and flag(ours, 1, "--port") == "31001"


def test_wildcard_bind_advertises_a_dialable_host_and_probes_loopback() -> None:
    plan = plan_of("--preset", "blackwell-4x", "--advertise-host", "gpu-node-1")
    assert plan.instances[0].url == "http://gpu-node-1:30000"
    assert plan.instances[0].health_url == "http://127.0.0.1:30000/health"
    assert "0.0.0.0" not in plan_of("--preset", "blackwell-4x").instances[0].url


def test_sim_preset_runs_the_simulator_on_loopback() -> None:
    plan = plan_of("--preset", "sim", "--dp", "2", "--gpus", "0-3")
    assert len(plan.instances) == 2
    for k, inst in enumerate(plan.instances):
        assert inst.argv[:3] == ("python3", "-m", "simulator")
        assert inst.env == ()
        assert flag(plan, k, "--host") == "127.0.0.1"
        assert flag(plan, k, "--dp-size") == "2"
        assert flag(plan, k, "--model-name") == "Qwen/Qwen3.6-27B"
        assert flag(plan, k, "--tokens-per-chunk") == "4"
        assert inst.url == f"http://127.0.0.1:{inst.port}"


# --- memory arithmetic ---------------------------------------------------------------------------------

def test_model_byte_counts() -> None:
    assert QWEN36_27B.weight_bytes() == pytest.approx(55.6e9)
    assert QWEN36_27B_FP8.weight_bytes() == pytest.approx(27.8e9)
    assert QWEN36_27B.kv_bytes_per_token() == 16 * 2 * 4 * 256 * 2 == 65536
    assert QWEN36_27B.kv_bytes_per_token("fp8_e4m3") == 32768
    # 48 layers x (48 heads x 128 x 128 x 4 B + 10240 conv channels x 3 x 2 B)
    assert QWEN36_27B.state_bytes_per_request() == 48 * (48 * 128 * 128 * 4 + 10240 * 3 * 2)


def test_blackwell_memory_arithmetic() -> None:
    m = plan_of("--preset", "blackwell-4x").memory
    assert m.weights / GIB == pytest.approx(51.78, abs=0.01)
    assert m.static / GIB == pytest.approx(95.6 * 0.85)
    assert m.pool == pytest.approx(m.static - m.weights)
    assert m.state_pool + m.kv_pool == pytest.approx(m.pool)
    assert m.kv_tokens == int(m.kv_pool // 65536)
    assert m.kv_tokens > 200_000
    assert m.running_requests is not None and m.running_requests >= 1


@pytest.mark.parametrize("gib", [80.0, 95.6, 141.0, 179.0])
@pytest.mark.parametrize("frac", [0.8, 0.85, 0.9])
@pytest.mark.parametrize("kv_tokens", [32_768, 65_536])
def test_27b_bf16_never_refused_a_gpu_it_fits(gib: float, frac: float, kv_tokens: int) -> None:
    """54 GB of weights on an 80 GB+ GPU leaves room for KV cache: the planner must pick TP=1."""
    plan = plan_of("--num-gpus", "4", "--gpu-memory-gib", str(gib), "--mem-fraction", str(frac),
                   "--kv-tokens", str(kv_tokens))
    assert plan.tp == 1
    assert len(plan.instances) == 4


def test_tp_grows_only_when_tp1_really_does_not_fit() -> None:
    plan = plan_of("--num-gpus", "4", "--gpu-memory-gib", "48")
    assert [m.tp for m in plan.tried] == [1, 2]
    assert not plan.tried[0].fits
    assert plan.tried[0].weights > plan.tried[0].static
    assert plan.tried[1].fits


def test_explain_shows_the_arithmetic() -> None:
    text = run(["--preset", "blackwell-4x", "--explain"])
    for needle in ("TP=1, one GPU", "weights", "27.8B params x 2 B (bf16) / TP 1", "51.8 GiB",
                   "--mem-fraction-static 0.85", "state pool", "KV cache", "64 KiB per token", "-> fits",
                   "Choice: TP=1 fits"):
        assert needle in text, needle
    two = run(["--num-gpus", "4", "--gpu-memory-gib", "48", "--explain"])
    assert "TP=1, one GPU" in two and "does not fit: weights 51.8 GiB per GPU exceed" in two
    assert "Choice: TP=2 is the smallest degree that fits" in two


# --- bad input -----------------------------------------------------------------------------------------

ERRORS = [
    ("unknown preset", ["--preset", "dgx-9000"], "unknown preset 'dgx-9000'; known presets: b200-7x"),
    ("more GPUs than exist", ["--preset", "blackwell-4x", "--gpus", "0-4"], "GPU 4 does not exist"),
    ("GPU index past --num-gpus", ["--preset", "b200-8x", "--num-gpus", "7", "--gpus", "7"], "GPU 7 does not"),
    ("GPU twice", ["--preset", "blackwell-4x", "--gpus", "0,1,1"], "names a GPU twice"),
    ("unreadable GPU list", ["--preset", "blackwell-4x", "--gpus", "zero"], "cannot read GPU list"),
    ("no hardware", [], "give --preset NAME"),
    ("half the hardware", ["--num-gpus", "4"], "give --preset NAME"),
    ("TP that cannot shard", ["--preset", "blackwell-4x", "--tp", "3"], "TP=3 cannot shard"),
    ("TP x DP over the GPUs", ["--preset", "blackwell-4x", "--tp", "4", "--dp", "2"], "needs 8 GPUs"),
    ("forced TP that does not fit", ["--num-gpus", "2", "--gpu-memory-gib", "48", "--tp", "1"],
     "TP=1 does not fit"),
    ("model too big for the node", ["--preset", "blackwell-4x", "--params-b", "400"], "does not fit 4 x 95.6"),
    ("mem fraction too high", ["--preset", "blackwell-4x", "--mem-fraction", "0.99"], "[0.3, 0.95]"),
    ("draft tokens vs steps", ["--preset", "blackwell-4x", "--mtp-draft-tokens", "6"], "must be steps + 1 = 4"),
    ("zero MTP steps", ["--preset", "blackwell-4x", "--mtp-steps", "0"], "at least 1"),
    ("context too long", ["--preset", "blackwell-4x", "--context-length", "1000000"], "--context-length must"),
    ("ports out of range", ["--preset", "blackwell-4x", "--base-port", "65534"], "out of range"),
    ("unbalanced quote", ["--preset", "blackwell-4x", "--extra-args", "--foo 'bar"], "cannot split"),
    ("KV wish beyond the GPU", ["--preset", "blackwell-4x", "--kv-tokens", "100000000"], "KV cache holds"),
    ("a launcher flag in --extra-args", ["--preset", "blackwell-4x", "--extra-args", "--port 8000"],
     "--port in the extra server arguments would override the launcher's own setting"),
    ("an SGLang alias in --extra-arg", ["--preset", "blackwell-4x", "--extra-arg=--tensor-parallel-size=2"],
     "use the launcher's --tp instead"),
]


@pytest.mark.parametrize(("args", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_input_gets_a_clear_error(args: list[str], message: str) -> None:
    with pytest.raises(PlanError) as info:
        run(args)
    assert message in str(info.value)


def test_cli_prints_error_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--preset", "blackwell-4x", "--gpus", "0-9"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: GPU 4 does not exist: the node has 4 GPU(s), numbered 0-3")


def test_module_entry_point_and_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "launch.plan", "--help"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert "--explain" in proc.stdout and "blackwell-4x" in proc.stdout
    listed = subprocess.run([sys.executable, "-m", "launch.plan", "--list-presets"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    assert [line.split()[0] for line in listed.splitlines()] == preset_names()


# --- output forms --------------------------------------------------------------------------------------

def test_api_key_is_masked_everywhere_it_is_shown() -> None:
    args = ["--preset", "blackwell-4x", "--api-key", "s3cret"]
    for fmt in ("text", "commands", "json"):
        out = run([*args, "--format", fmt])
        assert "s3cret" not in out and "***" in out, fmt
    assert "s3cret" in run([*args, "--format", "bash"])  # the argv the script runs


def test_endpoints_format() -> None:
    out = run(["--preset", "sim", "--base-port", "40000"])
    assert "simulator" in out
    assert run(["--preset", "sim", "--base-port", "40000", "--format", "endpoints"]).splitlines() == [
        f"http://127.0.0.1:{40000 + k}" for k in range(4)]


def test_bash_output_round_trips_through_bash() -> None:
    """Awkward values (spaces, quotes, dollars) survive start_servers.sh's eval untouched."""
    nasty = "it's a \"$HOME\" `x` name"
    out = run(["--preset", "blackwell-4x", "--gpus", "2,3", "--served-model-name", nasty, "--extra-arg", "a b",
               "--format", "bash"])
    script = out + 'for i in 0 1; do eval "printf \'%s\\n\' \\"\\${PLAN_ARGV_${i}[@]}\\""; ' \
                   'eval "printf \'ENV %s\\n\' \\"\\${PLAN_ENV_${i}[@]}\\""; echo ---; done\necho "$PLAN_COUNT"\n'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    first = proc.stdout.split("---\n")[0].splitlines()
    assert first[first.index("--served-model-name") + 1] == nasty
    assert "a b" in first and "ENV CUDA_VISIBLE_DEVICES=2" in first
    assert proc.stdout.rstrip().endswith("2")


def test_presets_load_and_a_new_one_is_one_file(tmp_path: Path) -> None:
    assert {"blackwell-4x", "b200-8x", "b200-7x", "sim"} <= set(preset_names())
    for name in preset_names():
        assert load_preset(name).gpu_count >= 1
    (tmp_path / "h100-2x.toml").write_text('description = "2x H100"\ngpu = "H100"\ngpu_count = 2\n'
                                           'gpu_memory_gib = 79.6\nattention_backend = "fa3"\n')
    preset = load_preset("h100-2x", tmp_path)
    assert (preset.gpu_count, preset.attention_backend, preset.mem_fraction_static) == (2, "fa3", 0.85)
    (tmp_path / "typo.toml").write_text('description = "x"\ngpu = "x"\ngpu_count = 1\ngpu_memory_gib = 8\n'
                                        'mem_fraction = 0.9\n')
    with pytest.raises(PlanError, match="unknown key"):
        load_preset("typo", tmp_path)
    (tmp_path / "short.toml").write_text('description = "x"\n')
    with pytest.raises(PlanError, match=r"short\.toml"):
        load_preset("short", tmp_path)
