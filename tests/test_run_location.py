"""Every offline tool that reads a run names it the same ways: as its first argument (RUN: a run's --out
directory or s3://BUCKET/PREFIX), or with `--out DIR` / `--s3 s3://BUCKET/PREFIX` as client.run spells them.

A new user carries `--out runs/demo` from client.run to client.audit, or `runs/demo` from client.audit to
client.status; both work, the same run named both ways is one run, and a run named wrongly (or twice,
differently) gets one line that shows the forms. client.estimate takes RUN as --from-results RUN, and an
`--out RUN` there (where its calibration writes) is told so; client.export takes RUN only (its --out is the
file it writes), and says so.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.conftest import REPO
from tests.results_fixture import result, write_segment

TOOLS = ("client.audit", "client.status")


def tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", name, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    write_segment(out, [result(f"p{i}") for i in range(3)])
    return out


@pytest.mark.parametrize("name", TOOLS)
@pytest.mark.parametrize("form", ["positional", "--out"])
def test_each_tool_takes_the_run_either_way(name: str, form: str, run_dir: Path) -> None:
    args = [str(run_dir)] if form == "positional" else ["--out", str(run_dir)]
    proc = tool(name, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    records = doc["done"] if name == "client.status" else doc["counts"]["records"]
    assert records == 3, doc


@pytest.mark.parametrize("name", TOOLS)
@pytest.mark.parametrize(("args", "says"), [
    ([], "which run? Name it as RUN (a run's --out directory or s3://BUCKET/PREFIX), or --out DIR, or --s3"),
    (["{run}", "--out", "{run}-other"], "the run is named 2 times, differently"),
    (["--out", "s3://bucket/prefix"], "for s3://bucket/prefix write --s3 s3://bucket/prefix"),
    (["--s3", "{run}"], "--s3 takes s3://BUCKET/PREFIX; for a local directory write --out"),
])
def test_a_run_named_wrongly_gets_the_forms_in_one_line(name: str, args: list[str], says: str,
                                                        run_dir: Path) -> None:
    proc = tool(name, *(a.format(run=run_dir) for a in args))
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "usage:" not in proc.stderr


@pytest.mark.parametrize("name", TOOLS)
def test_the_same_run_named_both_ways_is_one_run(name: str, run_dir: Path) -> None:
    for args in ([str(run_dir), "--out", str(run_dir)], [str(run_dir), "--out", f"{run_dir}/"],
                 [f"{run_dir}/../{run_dir.name}", "--out", str(run_dir)]):
        proc = tool(name, *args, "--json")
        assert proc.returncode == 0, (args, proc.stderr)


def test_estimate_takes_the_run_as_from_results(run_dir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": "q"}]}) + b"\n"
                                 for i in range(3)))
    proc = tool("client.estimate", str(run_dir), "--prompts", str(prompts), "--gpus", "1", "--json")
    assert proc.returncode in (0, 1), proc.stderr  # 1: too few timings to project, said so; the run was read
    info = orjson.loads(proc.stdout)["input"]
    assert (info["mode"], info["results"], info["measured"]) == ("from-results", str(run_dir), 3)
    twice = tool("client.estimate", str(run_dir), "--from-results", f"{run_dir}-other", "--prompts", str(prompts))
    assert twice.returncode == 2 and "the run is named twice, differently" in twice.stderr, twice.stderr
    same = tool("client.estimate", str(run_dir), "--from-results", f"{run_dir}/", "--prompts", str(prompts),
                "--gpus", "1", "--json")
    assert same.returncode in (0, 1) and orjson.loads(same.stdout)["input"]["measured"] == 3, same.stderr


def test_estimate_with_the_run_as_out_says_how_it_names_the_run(run_dir: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(orjson.dumps({"id": "p0", "messages": [{"role": "user", "content": "q"}]}) + b"\n")
    proc = tool("client.estimate", "--out", str(run_dir), "--prompts", str(prompts))
    assert proc.returncode == 2, proc.stderr
    assert (f"(--out is where a calibration writes its sample; to project from the run in {run_dir}, name it as "
            f"RUN or --from-results {run_dir})") in proc.stderr, proc.stderr


def test_export_without_the_run_says_where_it_goes(tmp_path: Path) -> None:
    proc = tool("client.export", "--tokenizer", "sim", "--out", str(tmp_path / "train.parquet"))
    assert proc.returncode == 2, proc.stderr
    assert "which run? Name it first: python -m client.export RUN --tokenizer PATH --out FILE" in proc.stderr
    assert f"--out {tmp_path / 'train.parquet'} is the file to write" in proc.stderr


def test_the_run_ends_by_naming_the_next_tools_one_way(tmp_path: Path) -> None:
    from client.run.next_steps import next_commands

    out = tmp_path / "demo"
    for command, _ in next_commands(out, simulated=True):
        tool_name, first = command.split()[2:4]
        assert first == str(out), f"{tool_name} is given the run as RUN, as every tool takes it: {command}"
