"""Every tool checks every option at start: an out-of-range value, a pair that only makes sense together,
or a path that cannot be used ends in a one-line message naming the option and a documented exit code,
never a traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from client.core.entry import run_tool
from tests.conftest import REPO, make_prompts
from tests.results_fixture import result, write_segment

Main = Callable[[Sequence[str] | None], int]


def _main(tool: str) -> Main:
    """The tool as its `python -m` runs it: its main behind the one entry that maps errors onto codes."""
    def main(argv: Sequence[str] | None) -> int:
        return run_tool(f"client.{tool}.main", "stopped", argv)
    return main


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A prompt file, a run directory with a few results, a file and an empty directory."""
    make_prompts(tmp_path / "p.jsonl", 4)
    write_segment(tmp_path / "run", [result(f"p{i:06d}") for i in range(4)])
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "array.json").write_text('[{"id": "a", "messages": []}]')
    return tmp_path


RUN = ("--simulate", "1", "--prompts", "{t}/p.jsonl", "--out", "{t}/out")
RUN_EP = ("--endpoints", "http://127.0.0.1:9", "--prompts", "{t}/p.jsonl", "--out", "{t}/out")
ESTIMATE = ("--from-results", "{t}/run", "--prompts", "{t}/p.jsonl")
ESTIMATE_EP = ("--endpoints", "http://127.0.0.1:9", "--prompts", "{t}/p.jsonl")
AUDIT = ("{t}/run",)
EXPORT = ("{t}/run", "--tokenizer", "{t}/a-file", "--out", "{t}/out.parquet")

# (tool, base arguments, extra arguments, the message on stderr); argparse refusals exit 2.
OPTION_CASES: list[tuple[str, tuple[str, ...], tuple[str, ...], str]] = [
    ("run", RUN, ("--max-tokens", "0"), "argument --max-tokens: must be at least 1, got 0"),
    ("run", RUN, ("--temperature", "-0.5"), "argument --temperature: must be 0 or more, got -0.5"),
    ("run", RUN, ("--top-p", "0"), "argument --top-p: must be above 0"),
    ("run", RUN, ("--top-p", "1.5"), "argument --top-p: must be between 0 and 1, got 1.5"),
    ("run", RUN, ("--min-p", "2"), "argument --min-p: must be between 0 and 1, got 2"),
    ("run", RUN, ("--top-k", "0"), "argument --top-k: must be at least 1, got 0"),
    ("run", RUN, ("--presence-penalty", "3"), "argument --presence-penalty: must be between -2 and 2, got 3"),
    ("run", RUN, ("--idle-timeout", "0"), "argument --idle-timeout: must be above 0, got 0"),
    ("run", RUN, ("--wait-ready", "-1"), "argument --wait-ready: must be 0 or more, got -1"),
    ("run", RUN, ("--grace", "-1"), "argument --grace: must be 0 or more, got -1"),
    ("run", RUN, ("--segment-mb", "0"), "argument --segment-mb: must be above 0, got 0"),
    ("run", RUN, ("--segment-age", "-3"), "argument --segment-age: must be above 0, got -3"),
    ("run", RUN, ("--sync-interval", "0"), "argument --sync-interval: must be above 0, got 0"),
    ("run", RUN, ("--sync-wait", "-1"), "argument --sync-wait: must be 0 or more, got -1"),
    ("run", RUN, ("--s3-part-mb", "4"), "argument --s3-part-mb: S3 refuses multipart parts under 5 MB"),
    ("run", RUN, ("--s3-part-mb", "nan"), "argument --s3-part-mb: must be a finite number, got nan"),
    ("run", RUN, ("--max-in-flight", "0"), "argument --max-in-flight: must be at least 1, got 0"),
    ("run", RUN, ("--slots", "0"), "argument --slots: must be at least 1, got 0"),
    ("run", RUN, ("--gpus", "0"), "argument --gpus: must be at least 1, got 0"),
    ("run", RUN, ("--max-attempts", "0"), "argument --max-attempts: must be at least 1, got 0"),
    ("run", RUN, ("--circuit-failures", "0"), "argument --circuit-failures: must be at least 1, got 0"),
    ("run", RUN, ("--max-requests-per-second", "0"), "argument --max-requests-per-second: must be above 0"),
    ("run", RUN, ("--show-problems", "-1"), "argument --show-problems: must be 0 or more, got -1"),
    ("run", RUN, ("--progress-every", "0"), "argument --progress-every: must be above 0, got 0"),
    ("run", RUN, ("--sim-speed", "0"), "argument --sim-speed: must be above 0, got 0"),
    ("run", RUN, ("--sim-max-running", "0"), "argument --sim-max-running: must be at least 1, got 0"),
    ("run", RUN, ("--simulate", "0"), "argument --simulate: must be a number of simulated servers from 1 to 64"),
    ("run", RUN_EP, ("--simulate", "1"), "give exactly one of --endpoints or --simulate N"),
    ("run", RUN_EP, ("--sim-arg=--fail-500",), "--sim-arg is passed to the simulated servers: it needs --simulate N"),
    ("run", RUN, ("--s3-gzip",), "need --s3 s3://BUCKET/PREFIX"),
    ("run", RUN, ("--preserve-thinking",), "--preserve-thinking keeps the reasoning"),
    ("estimate", ESTIMATE, ("--gpus", "0"), "argument --gpus: must be a GPU count from 1 to 1000000, got 0"),
    ("estimate", ESTIMATE, ("--max-tokens", "0"), "argument --max-tokens: must be at least 1, got 0"),
    ("estimate", ESTIMATE, ("--rounds", "0"), "argument --rounds: must be a count of rounds from 1 to 1000000, got 0"),
    ("estimate", ESTIMATE, ("--what-if-gpus", "0,2"),
     "argument --what-if-gpus: expected GPU counts from 1 to 1,000,000"),
    ("estimate", ESTIMATE, ("--what-if-max-tokens", "-1"), "argument --what-if-max-tokens: expected"),
    ("estimate", ESTIMATE_EP, ("--sample", "0"), "argument --sample: expected a count such as 400"),
    ("estimate", ESTIMATE_EP, ("--sample", "150%"), "argument --sample: expected a count such as 400"),
    ("estimate", ESTIMATE_EP, ("--wait-ready", "-1"), "argument --wait-ready: must be 0 or more, got -1"),
    ("estimate", ESTIMATE_EP, ("--max-attempts", "0"), "argument --max-attempts: must be at least 1, got 0"),
    ("estimate", ESTIMATE_EP, ("--progress-every", "0"), "argument --progress-every: must be above 0, got 0"),
    ("estimate", ESTIMATE_EP, ("--max-in-flight", "0"), "argument --max-in-flight: must be at least 1, got 0"),
    ("estimate", ESTIMATE, ("--sample", "10"), "--sample and --out are for a calibration on the fleet"),
    ("estimate", ESTIMATE, ("--s3-endpoint-url", "http://x"), "--s3-endpoint-url is for --from-results s3://"),
    ("estimate", ESTIMATE, ("--endpoints", "http://127.0.0.1:9"), "give exactly one of --endpoints"),
    ("audit", AUDIT, ("--max-stub-share", "2"), "argument --max-stub-share: must be between 0 and 1, got 2"),
    ("audit", AUDIT, ("--short-tokens", "-5"), "argument --short-tokens: must be at least 1, got -5"),
    ("audit", AUDIT, ("--max-empty-reasoning-share", "-0.1"), "argument --max-empty-reasoning-share: must be between"),
    ("audit", AUDIT, ("--max-bad-tool-call-share", "1.5"), "argument --max-bad-tool-call-share: must be between"),
    ("export", EXPORT, ("--row-group-size", "0"), "argument --row-group-size: must be at least 1, got 0"),
]


def _fill(args: Sequence[str], where: Path) -> list[str]:
    return [a.replace("{t}", str(where)) for a in args]


@pytest.mark.parametrize(("tool", "base", "extra", "message"), OPTION_CASES,
                         ids=[f"{c[0]} {' '.join(c[2])}" for c in OPTION_CASES])
def test_out_of_range_option_is_refused(place: Path, capsys: pytest.CaptureFixture[str], tool: str,
                                        base: tuple[str, ...], extra: tuple[str, ...], message: str) -> None:
    with pytest.raises(SystemExit) as caught:
        _main(tool)(_fill([*base, *extra], place))
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


# (tool, arguments, exit code, the message on stderr): paths that cannot be used, found before any work.
PATH_CASES: list[tuple[str, tuple[str, ...], int, str]] = [
    ("estimate", ("--from-results", "{t}/run", "--prompts", "{t}/nope.jsonl"), 2, "no such file or directory"),
    ("estimate", ("--from-results", "{t}/run", "--prompts", "{t}/empty-dir"), 2, "the directory holds no prompt file"),
    ("estimate", ("--from-results", "{t}/run", "--prompts", "{t}/array.json"), 2, "holds one JSON array"),
    ("estimate", (*ESTIMATE_EP, "--out", "{t}/a-file"), 2, "is a file; give a new or empty directory"),
    ("audit", ("{t}/run", "--prompts", "{t}/nope.jsonl"), 2, "no such file or directory"),
    ("audit", ("{t}/run", "--prompts", "{t}/array.json"), 2, "holds one JSON array"),
    ("export", ("{t}/run", "--tokenizer", "{t}/a-file", "--out", "{t}/empty-dir"), 2, "is a directory"),
    ("export", ("{t}/run", "--tokenizer", "{t}/a-file", "--out", "{t}/no/such/x.parquet"), 2, "does not exist"),
    ("status", ("--s3", "s3://bucket/prefix", "--prompts", "{t}/nope.jsonl"), 2, "no such file or directory"),
    ("status", ("--s3", "s3://bucket/prefix", "--prompts", "{t}/array.json"), 2, "holds one JSON array"),
]


@pytest.mark.parametrize(("tool", "args", "code", "message"), PATH_CASES,
                         ids=[f"{c[0]} {c[3]}" for c in PATH_CASES])
def test_unusable_path_is_a_message_and_an_exit_code(place: Path, capsys: pytest.CaptureFixture[str], tool: str,
                                                     args: tuple[str, ...], code: int, message: str) -> None:
    assert _main(tool)(_fill(args, place)) == code
    err = capsys.readouterr().err
    assert message in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("args", [("estimate", "--from-results", "{t}/run", "--prompts", "{t}/nope.jsonl",
                                   "--gpus", "0"),
                                  ("estimate", "--from-results", "{t}/run", "--prompts", "{t}/nope.jsonl")],
                         ids=["bad option", "missing prompts"])
def test_the_real_command_prints_no_traceback(place: Path, args: tuple[str, ...]) -> None:
    tool, *rest = _fill(args, place)
    proc = subprocess.run([sys.executable, "-m", f"client.{tool}", *rest], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() and "Traceback" not in proc.stderr
