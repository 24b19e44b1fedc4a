"""launch/start_servers.sh and launch/stop_servers.sh for real: the sim preset starts servers on loopback,
waits for /health, writes the endpoints and PID files; stop leaves no process behind. Also the failure
reports, the dry run, env files, SGLang's spellings of the options and the guards. Every server listens on
127.0.0.1 only. The parsing itself is tested table by table in test_launch_settings.py."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
START = REPO / "launch" / "start_servers.sh"
STOP = REPO / "launch" / "stop_servers.sh"


def free_base_port(count: int) -> int:
    """A base port with `count` free ports after it on 127.0.0.1."""
    for _ in range(100):
        base = random.randint(20_000, 60_000)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return base
    raise AssertionError("no free port range on 127.0.0.1")


def sh(script: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None,
       ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})}, check=False, stdin=subprocess.DEVNULL)


def endpoints(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def recorded_pids(pid_file: Path) -> list[int]:
    return [int(line.split("\t")[0]) for line in pid_file.read_text().splitlines()
            if line and not line.startswith("#")]


def leftovers(pids: list[int]) -> list[str]:
    """Live (non-zombie) processes that are a recorded server or in a recorded server's process group."""
    found = []
    for proc in psutil.process_iter(["pid", "status", "cmdline"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.pid in pids or os.getpgid(proc.pid) in pids:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])}")
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read()


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "servers"
    yield d
    if (d / "servers.pid").exists():  # a failed test must not leave servers running
        sh(STOP, "--log-dir", str(d), "--timeout", "5")


def start_sim(log_dir: Path, base: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return sh(START, "--preset", "sim", "--python", sys.executable, "--log-dir", str(log_dir),
              "--base-port", str(base), *extra)


@pytest.mark.slow
def test_sim_fleet_starts_waits_for_health_and_stops_clean(log_dir: Path) -> None:
    base = free_base_port(4)
    # A startup delay makes /health answer 503 first: the script must wait through it.
    result = start_sim(log_dir, base, "--extra-args", "--startup-delay 1.5 --speed 20")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 4 server(s) ready" in result.stdout

    urls = endpoints(log_dir / "endpoints.txt")
    assert urls == [f"http://127.0.0.1:{base + k}" for k in range(4)]
    for url in urls:
        assert get(url + "/health")[0] == 200
        status, body = get(url + "/v1/models")
        assert status == 200 and b"Qwen/Qwen3.6-27B" in body
    pids = recorded_pids(log_dir / "servers.pid")
    assert len(pids) == 4
    for k in range(4):
        first = (log_dir / f"server{k}.log").read_text().splitlines()[0]
        assert f"-m simulator --host 127.0.0.1 --port {base + k} " in first  # each log opens with its command

    again = start_sim(log_dir, free_base_port(4))
    assert again.returncode == 2
    assert "still running" in again.stderr and "stop_servers.sh --pid-file" in again.stderr

    status = sh(STOP, "--log-dir", str(log_dir), "--status")
    assert status.returncode == 0 and status.stdout.count(": running") == 4

    stopped = sh(STOP, "--log-dir", str(log_dir))
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped 4 server(s)" in stopped.stdout
    assert leftovers(pids) == []
    assert not (log_dir / "servers.pid").exists()
    for port in range(base, base + 4):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"


@pytest.mark.slow
def test_a_server_that_dies_is_named_with_its_log_and_the_rest_are_stopped(log_dir: Path) -> None:
    result = start_sim(log_dir, free_base_port(2), "--gpus", "0-1", "--", "--no-such-flag")
    assert result.returncode == 1
    # Both servers die on the bad flag; whichever is seen first is named.
    assert re.search(r"error: server[01] \(simulated, port \d+\) exited \(code 2\) before it answered /health",
                     result.stderr), result.stderr
    assert "unknown option --no-such-flag" in result.stderr  # the log's tail
    assert not (log_dir / "endpoints.txt").exists()
    assert not (log_dir / "servers.pid").exists()


@pytest.mark.slow
def test_health_timeout_names_the_slow_servers_and_stops_them(log_dir: Path) -> None:
    result = start_sim(log_dir, free_base_port(2), "--gpus", "0-1", "--extra-args", "--startup-delay 60",
                       "--health-timeout", "2")
    assert result.returncode == 1
    for name in ("server0", "server1"):
        assert f"error: {name} (simulated, port" in result.stderr
    assert "did not answer /health within 2s" in result.stderr
    assert "simulated SGLang serving" in result.stderr  # the last log lines are shown
    assert "stopped 2 server(s)" in result.stderr
    assert not (log_dir / "servers.pid").exists()


def test_dry_run_prints_commands_and_starts_nothing(log_dir: Path) -> None:
    result = sh(START, "--preset", "b200-8x", "--gpus", "0-6", "--api-key", "s3cret", "--log-dir", str(log_dir),
                "--advertise-host", "node7", "--dry-run", "--explain", "--", "--max-running-requests", "64")
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if "sglang.launch_server" in line]
    assert len(commands) == 7
    assert commands[6].startswith("CUDA_VISIBLE_DEVICES=6 python3 -m sglang.launch_server ")
    assert all("--attention-backend trtllm_mha" in c and c.endswith("2>&1 &") for c in commands)
    assert all("--max-running-requests 64" in c for c in commands)
    assert "s3cret" not in result.stdout + result.stderr
    assert "http://node7:30006" in result.stdout
    assert "Choice: TP=1 fits" in result.stderr  # --explain
    assert not log_dir.exists()


def test_env_file_with_flags_on_top(tmp_path: Path, log_dir: Path) -> None:
    env = tmp_path / "node.env"
    env.write_text("# the training node\nPRESET=blackwell-4x\nexport GPUS=0-1   # two of four\n"
                   "EXTRA_ARGS=\"--max-running-requests 48 --log-level 'warning'\"  # quoted, then a comment\n"
                   "MTP=off\nBASE_PORT=31000\n\n"
                   "SERVED_MODEL_NAME='my model'\n")
    result = sh(START, "--env-file", str(env), "--base-port=32000", "--log-dir", str(log_dir), "--dry-run")
    assert result.returncode == 0, result.stderr
    commands = [line for line in result.stdout.splitlines() if "sglang.launch_server" in line]
    assert len(commands) == 2
    assert "--port 32000" in commands[0] and "--port 32001" in commands[1]
    assert commands[0].endswith(f"--max-running-requests 48 --log-level warning > {log_dir}/server0.log 2>&1 &")
    assert "--speculative-algorithm" not in commands[0]
    assert "--served-model-name 'my model'" in commands[0]


@pytest.mark.parametrize(("args", "content", "message"), [
    (["--preset", "nope"], None, "unknown preset 'nope'"),
    (["--preset", "blackwell-4x", "--gpus", "0-5"], None, "GPU 4 does not exist"),
    (["--preset", "blackwell-4x", "--bogus", "1"], None, "unknown option --bogus"),
    (["--preset", "blackwell-4x", "--mtp", "maybe"], None, "--mtp: must be on or off"),
    (["--preset", "blackwell-4x", "stray"], None, "unexpected argument 'stray'"),
    ([], "PRESET=sim\nMODLE_PATH=x\n", "node.env:2: unknown setting 'MODLE_PATH'"),
    ([], "PRESET sim\n", "node.env:1: expected KEY=VALUE"),
    ([], "PRESET='sim\n", "node.env:1: unterminated ' quote"),
    ([], "PRESET=sim\nTP=two\n", "node.env:2: TP: must be a whole number, got 'two'"),
    (["--preset", "sim", "--tp-size", "0"], None, "--tp-size: must be at least 1, got 0"),
    (["--preset", "sim", "--gpus"], None, "--gpus needs a value"),
    (["--preset", "sim", "--dry-run=yes"], None, "--dry-run takes no value"),
    (["--preset", "b200-8x", "--modle", "x"], None, "unknown option --modle (did you mean --model?)"),
    (["--preset", "b200-8x", "--", "--port", "8000"], None, "--port in the extra server arguments would override"),
    (["--preset", "b200-8x", "--extra-args", "--tp-size 2"], None, "use the launcher's --tp instead"),
    ([], "PRESET=blackwell-4x\nGPUS=0-7\n", "GPU 4 does not exist"),
    (["--env-file", "/no/such/file.env"], None, "env file '/no/such/file.env' not found"),
])
def test_bad_input_fails_with_a_clear_message(tmp_path: Path, log_dir: Path, args: list[str],
                                              content: str | None, message: str) -> None:
    if content is not None:
        (tmp_path / "node.env").write_text(content)
        args = ["--env-file", str(tmp_path / "node.env"), *args]
    result = sh(START, *args, "--log-dir", str(log_dir), "--dry-run")
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_busy_port_is_refused_before_anything_starts(log_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = start_sim(log_dir, port, "--gpus", "0")
    assert result.returncode == 2
    assert f"port {port} is already in use" in result.stderr
    assert not (log_dir / "servers.pid").exists()


def test_stop_leaves_a_reused_pid_alone(tmp_path: Path) -> None:
    """A PID file entry whose PID now belongs to another process (other start time) is not signalled."""
    other = subprocess.Popen(["sleep", "30"])
    try:
        pid_file = tmp_path / "servers.pid"
        pid_file.write_text(f"# header\n{other.pid}\tserver0\t30000\tMon Jan  1 00:00:00 2001\n")
        result = sh(STOP, "--pid-file", str(pid_file), "--timeout", "1")
        assert result.returncode == 0
        assert "left alone" in result.stdout
        assert "stopping" not in result.stdout  # the script signals only after saying so
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_stop_without_a_pid_file(tmp_path: Path) -> None:
    result = sh(STOP, "--pid-file", str(tmp_path / "none.pid"))
    assert result.returncode == 2 and "no PID file" in result.stderr
    assert sh(STOP, "--pid-file", str(tmp_path / "none.pid"), "--status").returncode == 1


def test_help_reads_well() -> None:
    for script in (START, STOP):
        result = sh(script, "--help")
        assert result.returncode == 0 and result.stdout.startswith("Usage: launch/")
    text = sh(START, "--help").stdout
    for option in ("--preset", "--gpus", "--tp", "--mtp", "--mtp-steps", "--mtp-topk", "--mtp-draft-tokens",
                   "--base-port", "--host", "--api-key", "--context-length", "--mem-fraction", "--extra-args",
                   "--log-dir", "--env-file", "--dry-run", "--explain", "--health-timeout"):
        assert option in text, option


@pytest.mark.parametrize("env_file", sorted(p.name for p in (REPO / "launch").glob("*.env")))
def test_shipped_env_files_plan_cleanly(env_file: str, log_dir: Path) -> None:
    result = sh(START, "--env-file", str(REPO / "launch" / env_file), "--log-dir", str(log_dir), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" 2>&1 &\n") >= 4


def dry_run_commands(result: subprocess.CompletedProcess[str], module: str = "sglang.launch_server") -> list[str]:
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if f"-m {module} " in line]


def test_sglang_spellings_of_the_options_work(log_dir: Path) -> None:
    """What users type from SGLang's docs: --model, --tp-size, --port, --mem-fraction-static, ..."""
    commands = dry_run_commands(sh(START, "--preset", "b200-8x", "--model", "/models/Qwen3.6-27B", "--dry-run",
                                   "--log-dir", str(log_dir)))
    assert len(commands) == 8
    assert all(" --model-path /models/Qwen3.6-27B " in c for c in commands)
    commands = dry_run_commands(sh(START, "--preset", "b200-8x", "--model=/m", "--tp-size", "2", "--port", "31000",
                                   "--mem-fraction-static", "0.8", "--speculative-num-steps", "2", "--dry-run",
                                   "--log-dir", str(log_dir)))
    assert len(commands) == 4
    assert commands[3].startswith("CUDA_VISIBLE_DEVICES=6,7 python3 -m sglang.launch_server --model-path /m ")
    for flag in ("--port 31003", "--tp-size 2", "--mem-fraction-static 0.8", "--speculative-num-steps 2",
                 "--speculative-num-draft-tokens 3"):
        assert flag in commands[3], flag


def test_nvidia_smi_caps_the_preset(tmp_path: Path, log_dir: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3 4 5 6; do echo 183359; done\n")
    smi.chmod(0o755)
    result = sh(START, "--preset", "b200-8x", "--dry-run", "--log-dir", str(log_dir),
                env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert len(dry_run_commands(result)) == 7
    assert "note: nvidia-smi sees 7 GPU(s), fewer than the 8 of preset b200-8x: planning for 7" in result.stderr


def test_the_callers_environment_does_not_leak_in(log_dir: Path) -> None:
    result = sh(START, "--preset", "sim", "--dry-run", "--log-dir", str(log_dir),
                env={"HOST": "10.9.9.9", "PYTHON": "/no/python", "BASE_PORT": "1", "DRY_RUN": "0"})
    commands = dry_run_commands(result, "simulator")
    assert len(commands) == 4
    assert commands[0].startswith("python3 -m simulator --host 127.0.0.1 --port 30000 ")


def test_the_planner_runs_even_when_the_server_python_is_elsewhere(log_dir: Path) -> None:
    """--python names the servers' interpreter; a dry run on another machine still plans, with a note."""
    result = sh(START, "--preset", "b200-8x", "--python", "/opt/sglang/bin/python", "--dry-run",
                "--log-dir", str(log_dir))
    commands = dry_run_commands(result)
    assert commands[0].startswith("CUDA_VISIBLE_DEVICES=0 /opt/sglang/bin/python -m sglang.launch_server ")
    assert "note: there is no '/opt/sglang/bin/python' here" in result.stderr


def test_a_start_without_the_server_python_is_refused(log_dir: Path) -> None:
    result = sh(START, "--preset", "sim", "--python", "/no/such/python", "--log-dir", str(log_dir),
                "--base-port", str(free_base_port(4)))
    assert result.returncode == 2
    assert result.stderr == "error: no Python interpreter '/no/such/python'; pass --python PATH (the one with SGLang)\n"
    assert not log_dir.exists()


def test_help_via_the_env_file_and_flags_together(tmp_path: Path) -> None:
    """--help wins over everything else on the line, even a bad value, and prints nothing else."""
    result = sh(START, "--preset", "nope", "--tp", "x", "--help")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.startswith("Usage: launch/start_servers.sh") and result.stdout.endswith("/tmp/fleet\n")


def test_without_a_python_311_the_error_says_what_to_do(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname"):  # what the script needs before it looks for Python
        (bin_dir / tool).symlink_to(subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True,
                                                   text=True, check=True).stdout.strip())
    result = sh(START, "--preset", "sim", "--dry-run", env={"PATH": str(bin_dir)})
    assert result.returncode == 2
    assert result.stderr == ("error: no Python 3.11 or newer found (the launcher's planner needs one): "
                             "pass --python PATH\n")


@pytest.mark.slow
def test_env_file_and_sglang_spellings_start_a_real_fleet(tmp_path: Path, log_dir: Path) -> None:
    env = tmp_path / "sim.env"
    env.write_text(f"PRESET=sim\nGPUS=0-1\nEXTRA_ARGS='--speed 20'  # fast\nLOG_DIR={log_dir}\n")
    base = free_base_port(2)
    result = sh(START, "--env-file", str(env), "--port", str(base), "--python", sys.executable,
                "--served-model-name", "fleet model")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(rf"started server1 \(pid \d+, simulated, port {base + 1}\), log {log_dir}/server1.log",
                     result.stdout)
    assert endpoints(log_dir / "endpoints.txt") == [f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"]
    assert b"fleet model" in get(f"http://127.0.0.1:{base + 1}/v1/models")[1]
    pids = recorded_pids(log_dir / "servers.pid")
    stopped = sh(STOP, "--pid-file", str(log_dir / "servers.pid"))
    assert stopped.returncode == 0 and "stopped 2 server(s)" in stopped.stdout
    assert leftovers(pids) == []
