"""`--estimate FILE`: the run reads the mean output tokens per prompt from `client.estimate --json`, for its
ETA; a file that is not such an estimate is refused at start with what is wrong (exit 2, nothing sent)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from client.core.errors import ConfigError
from client.local.estimate_file import expected_tokens_per_prompt
from tests.conftest import make_prompts, run_client
from tests.test_estimate import estimate, prompt_file, synthetic_run


def test_reads_the_mean_of_a_real_estimate(tmp_path: Path) -> None:
    count = synthetic_run(tmp_path / "run", slots=4, rounds=10, duration=1.0, lengths={"chat": 100, "code": 300})
    ids = [f"{'chat' if i % 2 == 0 else 'code'}-{i}" for i in range(count)]
    code, data, stderr = estimate("--from-results", str(tmp_path / "run"),
                                  "--prompts", str(prompt_file(tmp_path / "p.jsonl", ids)), "--gpus", "1")
    assert code == 0, stderr
    path = tmp_path / "estimate.json"
    path.write_bytes(orjson.dumps(data))
    assert expected_tokens_per_prompt(path) == pytest.approx(200.0)


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read it"),
    (b"{not json", "not JSON"),
    (b"[]", "no projection with output tokens and prompts"),
    (b'{"projection": null}', "no projection with output tokens and prompts"),
    (b'{"projection": {"targets": []}}', "no projection with output tokens and prompts"),
    (b'{"projection": {"targets": [{"prompts": 0, "output_tokens": {"point": 5}}]}}', "no projection"),
    (b'{"projection": {"targets": [{"prompts": 10, "output_tokens": {"point": "many"}}]}}', "no projection"),
], ids=["missing", "not-json", "array", "null-projection", "no-targets", "zero-prompts", "not-a-number"])
def test_refuses_what_is_not_an_estimate(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "estimate.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        expected_tokens_per_prompt(path)
    assert str(caught.value).startswith(f"--estimate {path}: ") and message in str(caught.value)


def test_the_run_refuses_a_bad_estimate_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "estimate.json"
    bad.write_bytes(b"[]")
    result = run_client(["--simulate", "1", "--prompts", str(make_prompts(tmp_path / "p.jsonl", 3)),
                         "--out", str(tmp_path / "out"), "--estimate", str(bad)])
    assert result.code == 2, result.stderr
    assert f"--estimate {bad}: no projection" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "segments").exists() or not any((tmp_path / "out" / "segments").iterdir())
