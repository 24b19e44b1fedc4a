"""The settings of launch/start_servers.sh (launch.plan.settings, launch.plan.envfile): options, SGLang's
spellings of them, env files, precedence, and the error each bad input gets. Table-driven; pure logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.plan import PlanError
from launch.plan.envfile import read_env_file
from launch.plan.settings import SETTINGS, Settings, help_text, read_settings
from launch.plan.sglang_flags import OWNED_FLAGS, check_server_args, sglang_aliases

# id, arguments, the values they set (by env-file key)
OPTIONS = [
    ("nothing", [], {}),
    ("preset", ["--preset", "b200-8x"], {"PRESET": "b200-8x"}),
    ("value after =", ["--preset=sim", "--base-port=31000"], {"PRESET": "sim", "BASE_PORT": 31000}),
    ("SGLang's --model", ["--model", "/models/q"], {"MODEL_PATH": "/models/q"}),
    ("--model=", ["--model=/models/q"], {"MODEL_PATH": "/models/q"}),
    ("--model-path", ["--model-path", "org/m"], {"MODEL_PATH": "org/m"}),
    ("--tp-size", ["--tp-size", "2"], {"TP": 2}),
    ("--tensor-parallel-size", ["--tensor-parallel-size", "4"], {"TP": 4}),
    ("--dp-size", ["--dp-size", "2"], {"DP": 2}),
    ("--data-parallel-size", ["--data-parallel-size=2"], {"DP": 2}),
    ("--port", ["--port", "8000"], {"BASE_PORT": 8000}),
    ("--mem-fraction-static", ["--mem-fraction-static", "0.8"], {"MEM_FRACTION": 0.8}),
    ("speculative spellings", ["--speculative-algorithm", "nextn", "--speculative-num-steps", "2",
                               "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "4"],
     {"MTP_ALGORITHM": "NEXTN", "MTP_STEPS": 2, "MTP_TOPK": 2, "MTP_DRAFT_TOKENS": 4}),
    ("numbers", ["--num-gpus", "7", "--gpu-memory-gib", "79.6", "--params-b", "72", "--kv-tokens", "1000",
                 "--context-length", "65536", "--health-timeout", "30"],
     {"NUM_GPUS": 7, "GPU_MEMORY_GIB": 79.6, "PARAMS_B": 72.0, "KV_TOKENS": 1000, "CONTEXT_LENGTH": 65536,
      "HEALTH_TIMEOUT": 30}),
    ("choices", ["--dtype", "fp8", "--kv-cache-dtype", "fp8_e4m3"], {"DTYPE": "fp8", "KV_CACHE_DTYPE": "fp8_e4m3"}),
    ("--mtp alone", ["--mtp"], {"MTP": True}),
    ("--mtp off", ["--mtp", "off"], {"MTP": False}),
    ("--mtp=no", ["--mtp=no"], {"MTP": False}),
    ("--mtp then an option", ["--mtp", "--dry-run"], {"MTP": True, "DRY_RUN": True}),
    ("--no-mtp", ["--no-mtp"], {"MTP": False}),
    ("last one wins", ["--mtp", "off", "--mtp", "on", "--tp", "1", "--tp-size", "2"], {"MTP": True, "TP": 2}),
    ("switches", ["--dry-run", "--explain"], {"DRY_RUN": True, "EXPLAIN": True}),
    ("a value that starts with a dash", ["--extra-args", "--no-such-flag", "--api-key", "-k"],
     {"EXTRA_ARGS": "--no-such-flag", "API_KEY": "-k"}),
    ("an empty value is no value", ["--gpus", "", "--host="], {}),
    ("paths", ["--log-dir", "/tmp/l", "--endpoints-file", "e.txt", "--pid-file", "p.pid", "--python", "py"],
     {"LOG_DIR": "/tmp/l", "ENDPOINTS_FILE": "e.txt", "PID_FILE": "p.pid", "PYTHON": "py"}),
]


@pytest.mark.parametrize(("argv", "values"), [c[1:] for c in OPTIONS], ids=[c[0] for c in OPTIONS])
def test_options(argv: list[str], values: dict[str, object]) -> None:
    assert dict(read_settings(argv).values) == values


def test_server_arguments_after_the_double_dash_are_kept_verbatim() -> None:
    s = read_settings(["--preset", "sim", "--", "--speed", "20", "stray", "--", "--x=1"])
    assert s.server_args == ("--speed", "20", "stray", "--", "--x=1")
    assert s.values == {"PRESET": "sim"}


def test_help_is_asked_for() -> None:
    assert read_settings(["--preset", "nope", "-h"]).help  # help wins over a bad value
    assert read_settings(["--help"]).help


# id, arguments, env file (None: none), the error's text
ERRORS = [
    ("unknown option", ["--bogus", "1"], None, "unknown option --bogus; see --help"),
    ("near miss", ["--modle", "x"], None, "unknown option --modle (did you mean --model?)"),
    ("an SGLang flag the launcher has not", ["--max-running-requests", "8"], None,
     "Server arguments go after '--' or in --extra-args"),
    ("stray word", ["stray"], None, "unexpected argument 'stray'"),
    ("missing value", ["--gpus"], None, "--gpus needs a value"),
    ("option for a value", ["--gpus", "--dry-run"], None, "--gpus needs a value"),
    ("switch with a value", ["--dry-run=1"], None, "--dry-run takes no value"),
    ("no abbreviations", ["--pres", "sim"], None, "unknown option --pres"),
    ("not a number", ["--tp", "two"], None, "--tp: must be a whole number, got 'two'"),
    ("the spelling typed is named", ["--tp-size", "0"], None, "--tp-size: must be at least 1, got 0"),
    ("port range", ["--port", "70000"], None, "--port: must be between 1 and 65535, got 70000"),
    ("mem fraction", ["--mem-fraction", "0.99"], None, "--mem-fraction: must be in [0.3, 0.95], got 0.99"),
    ("memory", ["--gpu-memory-gib", "0"], None, "--gpu-memory-gib: must be greater than 0, got 0"),
    ("float", ["--params-b", "big"], None, "--params-b: must be a number, got 'big'"),
    ("not finite", ["--gpu-memory-gib", "nan"], None, "--gpu-memory-gib: must be a finite number, got 'nan'"),
    ("dtype", ["--dtype", "fp4"], None, "--dtype: must be one of bf16, fp8, got 'fp4'"),
    ("algorithm", ["--speculative-algorithm", "EAGLE3"], None,
     "--speculative-algorithm: must be one of EAGLE, NEXTN, got 'EAGLE3'"),
    ("mtp", ["--mtp", "maybe"], None, "--mtp: must be on or off"),
    ("preset", ["--preset", "nope"], None, "--preset: unknown preset 'nope'; known presets: b200-7x"),
    ("gpu list", ["--gpus", "zero"], None, "--gpus: cannot read GPU list 'zero'"),
    ("timeout", ["--health-timeout", "1.5"], None, "--health-timeout: must be a whole number, got '1.5'"),
    ("unbalanced quote", ["--extra-args", "--foo 'bar"], None, "--extra-args: cannot use \"--foo 'bar\": No closing"),
    ("launcher flag in --extra-args", ["--extra-args", "--max-running-requests 8 --port=9"], None,
     "--port in the extra server arguments would override the launcher's own setting (and its layout): use the "
     "launcher's --base-port instead"),
    ("launcher flag after --", ["--", "--model", "x"], None, "--model in the extra server arguments"),
    ("tp after --", ["--", "--tensor-parallel-size", "2"], None, "use the launcher's --tp instead"),
    ("env: not a number", [], "PRESET=sim\nTP=x\n", "node.env:2: TP: must be a whole number, got 'x'"),
    ("env: bad switch", [], "DRY_RUN=maybe\n", "node.env:1: DRY_RUN: must be on or off"),
    ("env: unknown key", [], "PRESET=sim\nMODLE_PATH=x\n",
     "node.env:2: unknown setting 'MODLE_PATH' (did you mean MODEL_PATH?)"),
    ("env: lower case", [], "preset=sim\n", "node.env:1: unknown setting 'preset' (did you mean PRESET?)"),
    ("env: no =", [], "\n\nPRESET sim\n", "node.env:3: expected KEY=VALUE, got: PRESET sim"),
    ("env: unterminated", [], "PRESET='sim\n", "node.env:1: unterminated ' quote"),
    ("env: text after the quote", [], 'PRESET="sim" now\n', "node.env:1: unexpected text after the closing quote"),
    ("env: launcher flag in EXTRA_ARGS", [], 'EXTRA_ARGS="--tp-size 2"\n',
     "node.env:1: EXTRA_ARGS: cannot use '--tp-size 2': --tp-size in the extra server arguments"),
    ("env: the option wins, and is checked", ["--tp", "x"], "TP=1\n", "--tp: must be a whole number"),
    ("env file missing", ["--env-file", "/no/such.env"], None, "env file '/no/such.env' not found"),
]


@pytest.mark.parametrize(("argv", "env", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_input_names_what_is_wrong(tmp_path: Path, argv: list[str], env: str | None, message: str) -> None:
    if env is not None:
        (tmp_path / "node.env").write_text(env)
        argv = ["--env-file", str(tmp_path / "node.env"), *argv]
    with pytest.raises(PlanError) as info:
        read_settings(argv)
    assert message in str(info.value)


def test_env_file_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="is not a file"):
        read_settings(["--env-file", str(tmp_path)])


# id, env-file text, the values read
ENV_FILES = [
    ("plain", "PRESET=sim\nBASE_PORT=31000\n", {"PRESET": "sim", "BASE_PORT": 31000}),
    ("comments and blanks", "# a node\n\n   # indented\nPRESET=sim   # trailing\n", {"PRESET": "sim"}),
    ("export", "export PRESET=sim\n  export GPUS=0-1\n", {"PRESET": "sim", "GPUS": "0-1"}),
    ("blanks around =", "PRESET = sim\n", {"PRESET": "sim"}),
    ("double quotes", 'SERVED_MODEL_NAME="my model"  # c\n', {"SERVED_MODEL_NAME": "my model"}),
    ("single quotes keep a #", "API_KEY='a #b'\n", {"API_KEY": "a #b"}),
    ("quotes inside quotes", "EXTRA_ARGS=\"--log-level 'warning'\"\n", {"EXTRA_ARGS": "--log-level 'warning'"}),
    ("unquoted spaces", "EXTRA_ARGS=--speed 20 --fail-500 0.01\n", {"EXTRA_ARGS": "--speed 20 --fail-500 0.01"}),
    ("a # inside a word", "API_KEY=a#b\n", {"API_KEY": "a#b"}),
    ("empty leaves the default", "GPUS=\nHOST=''\nAPI_KEY=\"\"\n", {}),
    ("a comment only", "GPUS= # none\n", {}),
    ("the later line wins", "TP=1\nTP=2\n", {"TP": 2}),
    ("no final newline", "PRESET=sim", {"PRESET": "sim"}),
    ("switches", "DRY_RUN=yes\nEXPLAIN=0\nMTP=off\n", {"DRY_RUN": True, "EXPLAIN": False, "MTP": False}),
    ("CRLF", "PRESET=sim\r\nTP=2\r\n", {"PRESET": "sim", "TP": 2}),
]


@pytest.mark.parametrize(("text", "values"), [c[1:] for c in ENV_FILES], ids=[c[0] for c in ENV_FILES])
def test_env_files(tmp_path: Path, text: str, values: dict[str, object]) -> None:
    (tmp_path / "node.env").write_text(text, newline="")
    assert dict(read_settings(["--env-file", str(tmp_path / "node.env")]).values) == values


def test_options_win_over_the_env_file_and_origins_are_kept(tmp_path: Path) -> None:
    env = tmp_path / "node.env"
    env.write_text("PRESET=blackwell-4x\nBASE_PORT=31000\nGPUS=0-1\n")
    s = read_settings(["--base-port", "32000", "--env-file", str(env), "--model", "m"])
    assert s.values == {"PRESET": "blackwell-4x", "BASE_PORT": 32000, "GPUS": "0-1", "MODEL_PATH": "m"}
    assert s.origins == {"PRESET": f"{env}:1", "BASE_PORT": "--base-port", "GPUS": f"{env}:3", "MODEL_PATH": "--model"}


def test_the_callers_environment_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in SETTINGS:
        monkeypatch.setenv(key, "from-the-shell")
    assert read_settings(["--preset", "sim"]).values == {"PRESET": "sim"}


def test_read_env_file_reports_lines(tmp_path: Path) -> None:
    (tmp_path / "a.env").write_text("# x\nPRESET=sim\n\nTP=2\n")
    assert read_env_file(str(tmp_path / "a.env"), SETTINGS) == {
        "PRESET": ("sim", f"{tmp_path}/a.env:2"), "TP": ("2", f"{tmp_path}/a.env:4")}


def test_settings_accessors() -> None:
    s = Settings(values={"LOG_DIR": "d", "TP": 2, "DRY_RUN": True, "MTP": False}, origins={})
    assert (s.text("LOG_DIR"), s.text("TP"), s.text("PYTHON")) == ("d", None, None)
    assert (s.whole("TP"), s.whole("DRY_RUN"), s.whole("LOG_DIR")) == (2, None, None)
    assert (s.on("DRY_RUN"), s.on("MTP"), s.on("EXPLAIN")) == (True, False, False)


def test_every_setting_has_an_option_and_the_planner_knows_its_dest() -> None:
    from launch.plan.cli import build_parser
    planner = vars(build_parser().parse_args([]))
    for s in SETTINGS.values():
        assert s.option == "--" + s.key.lower().replace("_", "-")
        assert s.dest is None or s.dest in planner, s.key


def test_aliases_table() -> None:
    assert sglang_aliases("--model-path") == ("--model",)
    assert sglang_aliases("--tp") == ("--tp-size", "--tensor-parallel-size")
    assert sglang_aliases("--base-port") == ("--port",)
    assert sglang_aliases("--host") == ()  # the same spelling in both
    assert sglang_aliases("--gpus") == ()  # not an SGLang flag
    assert {f.option for f in OWNED_FLAGS} <= {s.option for s in SETTINGS.values()}
    check_server_args(["--max-running-requests", "8", "--enable-metrics", "--log-level=warning"])
    with pytest.raises(PlanError, match="--api-key in the extra server arguments"):
        check_server_args(["--api-key=k"])


def test_help_reads_well() -> None:
    text = help_text()
    assert text.startswith("Usage: launch/start_servers.sh --preset NAME [options] [-- EXTRA SERVER ARGS...]\n")
    for s in SETTINGS.values():
        assert s.option in text and f"[{s.key}]" in text, s.key
        for alias in s.aliases:
            assert alias in text, alias
    for needle in ("--env-file FILE", "-h, --help", "--mtp [on|off]", "--no-mtp", "b200-8x", "Examples",
                   "launch/stop_servers.sh"):
        assert needle in text, needle
    assert max(len(line) for line in text.splitlines()) <= 110
