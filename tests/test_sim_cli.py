"""The simulated server's command line maps onto its settings and rejects bad values."""

from __future__ import annotations

import pytest

from simulator.__main__ import build_parser, config_from_args
from simulator.config import SimConfig
from simulator.tiny_tokenizer import tiny_tokenizer_dir


def test_defaults_match_the_config_record() -> None:
    # The command line serves with the tiny tokenizer unless told `none`; the record's own default has none.
    assert config_from_args([]) == SimConfig(tokenizer=str(tiny_tokenizer_dir()))
    assert config_from_args(["--tokenizer", "none"]) == SimConfig()


def test_flags_reach_the_config() -> None:
    c = config_from_args([
        "--port", "0", "--dp-size", "2", "--max-running", "8", "--speed", "50", "--tokens-per-chunk", "3",
        "--random-chunk", "--reasoning-field", "reasoning", "--omit-done", "--omit-nulls", "--strict-model",
        "--fail-500", "0.1", "--fail-429", "0.2", "--retry-after", "4", "--drop-stream", "0.05",
        "--stall-stream", "0.01", "--stall-seconds", "9", "--error-event", "0.02", "--fault-seed", "11",
    ])
    assert (c.port, c.dp_size, c.max_running, c.speed, c.tokens_per_chunk) == (0, 2, 8, 50.0, 3)
    assert c.random_chunk and c.omit_done and c.omit_nulls and c.strict_model
    assert c.reasoning_field == "reasoning"
    f = c.faults
    assert (f.fail_500, f.fail_429, f.retry_after, f.drop_stream) == (0.1, 0.2, 4, 0.05)
    assert (f.stall_stream, f.stall_seconds, f.error_event) == (0.01, 9.0, 0.02)
    assert c.effective_fault_seed == 11


@pytest.mark.parametrize(("argv", "message"), [
    (["--fail-500", "1.5"], "argument --fail-500: must be between 0 and 1, got 1.5"),
    (["--loop-rate", "nan"], "argument --loop-rate: must be a finite number, got nan"),
    (["--max-running", "0"], "argument --max-running: must be at least 1, got 0"),
    (["--port", "70000"], "argument --port: must be a port from 0 to 65535, got 70000"),
    (["--speed", "0"], "argument --speed: must be above 0, got 0"),
    (["--step-ms", "-5"], "argument --step-ms: must be 0 or more, got -5"),
    (["--retry-after", "-1"], "argument --retry-after: must be 0 or more, got -1"),
    (["--reasoning-field", "x"], "argument --reasoning-field: invalid choice: 'x'"),
])
def test_bad_values_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator shares the client's checkers (the argchecks package): one line that names the option."""
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
