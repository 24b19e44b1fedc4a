"""launch.plan.start, the Python half of launch/start_servers.sh: the shell text it hands the script (read
back through bash), the dry run, nvidia-smi's answer, the checks before a start (interpreter, PID file,
busy port, paths), and errors: one line naming the culprit, exit code 2. No server is started here."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launch.plan import PlanError
from launch.plan.cli import run as plan_cli
from launch.plan.render import render_json
from launch.plan.settings import read_settings
from launch.plan.start import check_host, detect_gpus, main, plan_from, run, run_files, with_origins

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory first on PATH whose nvidia-smi finds no GPU, so that the host's never shapes a plan."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi(bin_dir, "No devices were found\n", 6)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def fake_nvidia_smi(bin_dir: Path, output: str, code: int = 0) -> None:
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '%s' {shlex.quote(output)}\nexit {code}\n")
    script.chmod(0o755)


def shell_vars(text: str, *names: str) -> dict[str, str]:
    """Evaluate the shell text as start_servers.sh does, and read the named variables back."""
    script = text + "".join(f'printf "%s\\0" "${{{n}}}"\n' for n in names)
    out = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\0")[:-1], strict=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_start_plan_reads_back_through_bash(tmp_path: Path) -> None:
    base = free_port()
    text = run(["--preset", "sim", "--gpus", "0-1", "--python", sys.executable, "--log-dir", str(tmp_path / "l"),
                "--base-port", str(base), "--health-timeout", "7", "--", "--speed", "2"])
    got = shell_vars(text, "START_ACTION", "START_LOG_DIR", "START_ENDPOINTS_FILE", "START_PID_FILE",
                     "START_HEALTH_TIMEOUT", "START_POLL", "PLAN_COUNT", "PLAN_SIMULATED", "PLAN_URL_1",
                     "PLAN_HEALTH_0")
    assert got == {"START_ACTION": "start", "START_LOG_DIR": f"{tmp_path}/l",
                   "START_ENDPOINTS_FILE": f"{tmp_path}/l/endpoints.txt", "START_PID_FILE": f"{tmp_path}/l/servers.pid",
                   "START_HEALTH_TIMEOUT": "7", "START_POLL": "0.5", "PLAN_COUNT": "2", "PLAN_SIMULATED": "1",
                   "PLAN_URL_1": f"http://127.0.0.1:{base + 1}", "PLAN_HEALTH_0": f"http://127.0.0.1:{base}/health"}
    argv = subprocess.run(["/bin/bash", "-c", text + 'printf "%s\\n" "${PLAN_ARGV_1[@]}"'], capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert argv[:3] == [sys.executable, "-m", "simulator"] and argv[-2:] == ["--speed", "2"]


def test_help_and_dry_run_are_text_to_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shown = shell_vars(run(["--help"]), "START_ACTION", "START_SHOW")
    assert shown["START_ACTION"] == "show" and shown["START_SHOW"].startswith("Usage: launch/start_servers.sh")

    text = run(["--preset", "b200-8x", "--model", "/models/q", "--tp-size", "2", "--api-key", "s3cret",
                "--log-dir", str(tmp_path), "--advertise-host", "node7", "--dry-run", "--explain"])
    show = shell_vars(text, "START_SHOW")["START_SHOW"].splitlines()
    assert show[0] == "# dry run: 4 server(s), preset b200-8x, TP=2 DP=1; nothing is started"
    assert show[1].startswith("CUDA_VISIBLE_DEVICES=0,1 python3 -m sglang.launch_server --model-path /models/q ")
    assert show[1].endswith(f"--api-key '***' > {tmp_path}/server0.log 2>&1 &")
    assert "--tp-size 2" in show[1]
    assert show[5] == f"# then wait up to 1800s for each /health, and write {tmp_path}/endpoints.txt:"
    assert show[6:10] == [f"http://node7:{30000 + k}" for k in range(4)]
    assert show[10] == f"# PID file: {tmp_path}/servers.pid"
    assert "s3cret" not in text
    err = capsys.readouterr().err
    assert "Choice: TP=2 as asked (--tp)" in err  # --explain goes to stderr
    assert not tmp_path.joinpath("servers.pid").exists()


def test_the_sglang_spellings_give_the_plan_the_planner_gives() -> None:
    ours = ["--preset", "b200-8x", "--model", "/m", "--tp-size", "2", "--dp-size", "2", "--port", "31000",
            "--mem-fraction-static", "0.8", "--speculative-algorithm", "nextn", "--speculative-num-steps", "2",
            "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "4", "--", "--log-level", "info"]
    planner = ["--preset", "b200-8x", "--model-path", "/m", "--tp", "2", "--dp", "2", "--base-port", "31000",
               "--mem-fraction", "0.8", "--mtp-algorithm", "NEXTN", "--mtp-steps", "2", "--mtp-topk", "2",
               "--mtp-draft-tokens", "4", "--extra-arg=--log-level", "--extra-arg=info", "--format", "json"]
    assert json.loads(render_json(plan_from(read_settings(ours)))) == json.loads(plan_cli(planner))


# nvidia-smi's output, its exit code, what the launcher reads from it
NVIDIA_SMI = [
    ("seven B200", "183359\n" * 7, 0, (7, 183359)),
    ("smallest counts", "97887\n95000\n", 0, (2, 95000)),
    ("blanks and N/A", " 97887 \n[N/A]\n\n", 0, (1, 97887)),
    ("no GPU", "", 0, None),
    ("driver error", "NVIDIA-SMI has failed\n", 9, None),
]


@pytest.mark.parametrize(("output", "code", "expected"), [c[1:] for c in NVIDIA_SMI], ids=[c[0] for c in NVIDIA_SMI])
def test_detect_gpus(no_nvidia_smi: Path, output: str, code: int, expected: tuple[int, int] | None) -> None:
    fake_nvidia_smi(no_nvidia_smi, output, code)
    assert detect_gpus() == expected


def test_no_nvidia_smi_detects_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() is None


def test_a_node_with_fewer_gpus_than_the_preset_is_planned_as_it_is(no_nvidia_smi: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fake_nvidia_smi(no_nvidia_smi, "183359\n" * 7)
    text = run(["--preset", "b200-8x", "--dry-run"])
    assert shell_vars(text, "START_SHOW")["START_SHOW"].count("sglang.launch_server") == 7
    assert "note: nvidia-smi sees 7 GPU(s), fewer than the 8 of preset b200-8x" in capsys.readouterr().err
    fake_nvidia_smi(no_nvidia_smi, "183359\n" * 7)
    sim = run(["--preset", "sim", "--dry-run"])  # a simulated fleet ignores the node's GPUs
    assert shell_vars(sim, "START_SHOW")["START_SHOW"].count("simulator") == 4


def test_errors_from_the_planner_name_the_env_file_line(tmp_path: Path) -> None:
    env = tmp_path / "node.env"
    env.write_text("PRESET=blackwell-4x\n# four GPUs\nGPUS=0-5\n")
    with pytest.raises(PlanError, match=rf"GPU 4 does not exist: .* \(GPUS from {env}:3\)$"):
        run(["--env-file", str(env), "--dry-run"])
    settings = read_settings(["--env-file", str(env), "--tp", "3"])
    assert with_origins("TP=3 cannot shard; use --tp", settings) == "TP=3 cannot shard; use --tp"
    assert with_origins("see --gpus", settings) == f"see --gpus (GPUS from {env}:3)"
    assert with_origins("see --gpus-x", settings) == "see --gpus-x"


def test_checks_before_a_start(tmp_path: Path) -> None:
    def checked(*argv: str) -> None:
        settings = read_settings(["--preset", "sim", "--gpus", "0", *argv])
        plan = plan_from(settings)
        check_host(plan, run_files(settings, plan.preset.simulated))

    base = ["--python", sys.executable, "--base-port", str(free_port())]
    checked(*base, "--log-dir", str(tmp_path / "fresh"))
    with pytest.raises(PlanError, match="no Python interpreter '/no/such/python'; pass --python PATH"):
        checked("--python", "/no/such/python")
    (tmp_path / "file").write_text("")
    with pytest.raises(PlanError, match=r"--log-dir .*/file is not a directory"):
        checked(*base, "--log-dir", str(tmp_path / "file"))
    with pytest.raises(PlanError, match=r"--pid-file .* is a directory"):
        checked(*base, "--pid-file", str(tmp_path))
    # A PID file whose recorded server still runs (this very process stands in for it).
    pid_file = tmp_path / "servers.pid"
    pid_file.write_text(f"# header\n{os.getpid()}\tserver0\t1\t\n")
    with pytest.raises(PlanError, match=r"still running \(PID file .*servers.pid\); stop them first:\n  launch/"):
        checked(*base, "--pid-file", str(pid_file))
    pid_file.write_text("# header\n999999999\tserver0\t1\t\n")  # recorded, long gone
    checked(*base, "--pid-file", str(pid_file))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PlanError, match=f"port {port} is already in use .*pick another --base-port"):
            checked("--python", sys.executable, "--base-port", str(port))


@pytest.mark.parametrize("argv", [
    ["--preset", "nope"], ["--tp", "x"], ["--bogus"], ["--preset", "blackwell-4x", "--gpus", "0-9"],
    ["--env-file", "/no/such.env"], ["--preset", "sim", "--", "--port", "1"],
])
def test_main_prints_one_error_line_and_exits_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err


def test_module_entry_point_prints_shell_text() -> None:
    proc = subprocess.run([sys.executable, "-m", "launch.plan.start", "--preset", "sim", "--dry-run"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("START_ACTION=show\nSTART_SHOW='# dry run: 4 server(s), preset sim")
    bad = subprocess.run([sys.executable, "-m", "launch.plan.start", "--tp"], cwd=REPO, capture_output=True,
                         text=True, check=False)
    assert (bad.returncode, bad.stdout, bad.stderr) == (2, "", "error: --tp needs a value; see --help\n")
