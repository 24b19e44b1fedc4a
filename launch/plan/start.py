"""`python -m launch.plan.start ARGS`: what launch/start_servers.sh should do, as shell variables to `eval`.

Owns the step between the command line and the processes: read the settings (`settings`), ask nvidia-smi
what the node really has, plan (`layout.make_plan`), check the host before anything starts (the server
interpreter exists, no fleet from the same PID file still runs, no planned port already answers), and hand
the script either text to show (`START_ACTION=show`: --help, --dry-run) or the plan (`START_ACTION=start`:
PLAN_* from `render.render_bash`, START_* for the files, the health timeout and the poll interval). Notes
and --explain go to stderr. Bad input ends with one `error:` line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from launch.plan import cli
from launch.plan.errors import PlanError
from launch.plan.layout import Plan, make_plan
from launch.plan.render import command_line, render_bash, render_explain
from launch.plan.settings import SETTINGS, Settings, help_text, read_settings

REPO = Path(__file__).resolve().parents[2]
STOP = REPO / "launch" / "stop_servers.sh"


@dataclass(frozen=True)
class RunFiles:
    """Where a start writes, and how long and how often it waits for /health."""

    log_dir: str
    endpoints_file: str
    pid_file: str
    health_timeout: int
    poll_s: float

    def log(self, name: str) -> str:
        return f"{self.log_dir}/{name}.log"


def run_files(settings: Settings, simulated: bool) -> RunFiles:
    log_dir = settings.text("LOG_DIR") or str(REPO / "runs" / "servers")
    return RunFiles(log_dir=log_dir,
                    endpoints_file=settings.text("ENDPOINTS_FILE") or f"{log_dir}/endpoints.txt",
                    pid_file=settings.text("PID_FILE") or f"{log_dir}/servers.pid",
                    health_timeout=settings.whole("HEALTH_TIMEOUT") or (60 if simulated else 1800),
                    poll_s=0.5 if simulated else 5.0)


def detect_gpus() -> tuple[int, int] | None:
    """(GPU count, smallest memory.total in MiB) as nvidia-smi reports them; None without an answer."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    mibs = [int(line.strip()) for line in proc.stdout.splitlines() if line.strip().isdigit()]
    return (len(mibs), min(mibs)) if proc.returncode == 0 and mibs else None


def planner_namespace(settings: Settings) -> argparse.Namespace:
    """The namespace `python -m launch.plan` would build from the same settings."""
    ns = cli.build_parser().parse_args([])
    for key, value in settings.values.items():
        dest = SETTINGS[key].dest
        if dest is not None:
            setattr(ns, dest, value)
    ns.extra_arg = list(settings.server_args)
    return ns


def with_origins(message: str, settings: Settings) -> str:
    """A planner error, plus the env-file lines of the options it names (the planner knows only options)."""
    found = [f"{key} from {where}" for key, where in settings.origins.items()
             if not where.startswith("-") and re.search(rf"{re.escape(SETTINGS[key].option)}(?![\w-])", message)]
    return message + (f" ({'; '.join(found)})" if found else "")


def plan_from(settings: Settings) -> Plan:
    ns = planner_namespace(settings)
    try:
        preset = cli.preset_from_args(ns)
        if not preset.simulated:  # the node caps the preset (e.g. one GPU of eight out of service)
            detected = detect_gpus()
            if detected is not None:
                ns.detected_gpus, ns.detected_gpu_memory_mib = detected
        return make_plan(cli.request_from_args(ns, preset))
    except PlanError as exc:
        raise PlanError(with_origins(str(exc), settings)) from None


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def check_host(plan: Plan, files: RunFiles) -> None:
    """What would make the start fail half-way, refused before anything starts."""
    python = plan.request.python
    if shutil.which(python) is None:
        raise PlanError(f"no Python interpreter '{python}'; pass --python PATH (the one with SGLang)")
    if Path(files.log_dir).exists() and not Path(files.log_dir).is_dir():
        raise PlanError(f"--log-dir {files.log_dir} is not a directory")
    for path, option in ((files.endpoints_file, "--endpoints-file"), (files.pid_file, "--pid-file")):
        if Path(path).is_dir():
            raise PlanError(f"{option} {path} is a directory; name a file")
    if Path(files.pid_file).is_file():
        status = subprocess.run(["bash", str(STOP), "--pid-file", files.pid_file, "--status"],
                                capture_output=True, check=False, stdin=subprocess.DEVNULL)
        if status.returncode == 0:
            raise PlanError(f"servers from an earlier start are still running (PID file {files.pid_file}); "
                            f"stop them first:\n  launch/stop_servers.sh --pid-file {files.pid_file}")
    for inst in plan.instances:
        host = urlsplit(inst.health_url).hostname or "127.0.0.1"
        if _answers(host, inst.port):
            raise PlanError(f"port {inst.port} is already in use (something answers on {host}:{inst.port}); "
                            f"stop it or pick another --base-port")


def dry_run_text(plan: Plan, files: RunFiles) -> str:
    lines = [f"# dry run: {len(plan.instances)} server(s), preset {plan.preset.name}, TP={plan.tp} DP={plan.dp}; "
             f"nothing is started"]
    lines += [f"{command_line(inst)} > {files.log(inst.name)} 2>&1 &" for inst in plan.instances]
    lines.append(f"# then wait up to {files.health_timeout}s for each /health, and write {files.endpoints_file}:")
    lines += [inst.url for inst in plan.instances]
    lines.append(f"# PID file: {files.pid_file}")
    return "\n".join(lines) + "\n"


def render_show(text: str) -> str:
    return f"START_ACTION=show\nSTART_SHOW={shlex.quote(text)}\n"


def render_start(plan: Plan, files: RunFiles) -> str:
    q = shlex.quote
    return render_bash(plan) + (
        f"START_ACTION=start\nSTART_LOG_DIR={q(files.log_dir)}\nSTART_ENDPOINTS_FILE={q(files.endpoints_file)}\n"
        f"START_PID_FILE={q(files.pid_file)}\nSTART_HEALTH_TIMEOUT={files.health_timeout}\n"
        f"START_POLL={files.poll_s:g}\n")


def run(argv: Sequence[str]) -> str:
    """The shell text for start_servers.sh; notes and --explain are written to stderr on the way."""
    settings = read_settings(argv)
    if settings.help:
        return render_show(help_text())
    plan = plan_from(settings)
    if settings.on("EXPLAIN"):
        sys.stderr.write(render_explain(plan))  # ends with the notes
    else:
        sys.stderr.write("".join(f"note: {n}\n" for n in plan.notes))
    files = run_files(settings, plan.preset.simulated)
    if settings.on("DRY_RUN"):
        if shutil.which(plan.request.python) is None:
            sys.stderr.write(f"note: there is no '{plan.request.python}' here; on the node, --python names the "
                             f"interpreter with SGLang\n")
        return render_show(dry_run_text(plan, files))
    check_host(plan, files)
    return render_start(plan, files)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        sys.stdout.write(run(sys.argv[1:] if argv is None else argv))
    except PlanError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
