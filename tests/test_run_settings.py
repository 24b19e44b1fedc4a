"""run.json: the comparison and the format (table-driven), the audit's mixed-settings finding, then the real
CLI: a resume with changed sampling is refused before anything is sent; with --allow-settings-change it
runs, records the change, and the audit reports the run as mixed."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from client.audit.scan import mixed_settings
from client.core.errors import ConfigError
from client.local.run_settings import (
    RUN_FILE,
    PromptFile,
    RunRecord,
    first_record,
    from_json,
    hash_prompt_file,
    prompt_changes,
    read_run_file,
    setting_changes,
    shaping_settings,
    to_json,
    updated,
    write_run_file,
)
from simulator.fleet import SimServerSpec
from tests.conftest import REPO, make_prompts, read_results, run_client
from tests.s3_server import BUCKET, S3Server

BASE = shaping_settings(model="m", sampling={"max_tokens": 8192, "temperature": 0.6, "top_p": 0.95, "top_k": 20,
                                             "enable_thinking": True},
                        thinking=True, turns="last", fields=["top_k", "chat_template_kwargs"])


def changed(**parts: Any) -> dict[str, Any]:
    new = orjson.loads(orjson.dumps(BASE))
    for key, value in parts.items():
        section, _, name = key.partition("__")
        if name:
            if value is None:
                new[section].pop(name)
            else:
                new[section][name] = value
        else:
            new[section] = value
    return dict(new)


@pytest.mark.parametrize(("new", "expected"), [
    (BASE, []),
    (changed(sampling__temperature=1.0), ["sampling.temperature: 0.6 -> 1.0"]),
    (changed(sampling__temperature=0.6), []),
    (changed(sampling__max_tokens=8192.0), []),  # JSON does not keep 8192 and 8192.0 apart
    (changed(sampling__top_k=None), ["sampling.top_k: 20 -> (absent)"]),
    (changed(sampling__seed=7), ["sampling.seed: (absent) -> 7"]),
    (changed(thinking=False, sampling__enable_thinking=False),
     ["sampling.enable_thinking: true -> false", "thinking: true -> false"]),
    (changed(model="other/model"), ["model: m -> other/model"]),
    (changed(turns="all"), ["turns: last -> all"]),
    (changed(fields=[]), ['fields: ["chat_template_kwargs","top_k"] -> []']),
    (changed(sampling__top_p=1), ["sampling.top_p: 0.95 -> 1"]),
])
def test_setting_changes(new: dict[str, Any], expected: list[str]) -> None:
    assert setting_changes(BASE, new) == expected


def test_true_and_1_are_different_settings() -> None:
    assert setting_changes({"a": True}, {"a": 1}) == ["a: true -> 1"]


A = PromptFile("a.jsonl", "a" * 64, 100)
B = PromptFile("b.jsonl", "b" * 64, 2000)


@pytest.mark.parametrize(("old", "new", "expected"), [
    ([A], [A], []),
    ([A], [A, B], ["added b.jsonl (sha256 bbbbbbbbbbbb, 2,000 bytes)"]),
    ([A], [PromptFile("a.jsonl", "c" * 64, 150)],
     ["changed a.jsonl (sha256 aaaaaaaaaaaa -> cccccccccccc, 100 -> 150 bytes)"]),
    ([A, B], [B], ["no longer given: a.jsonl"]),
])
def test_prompt_changes(old: list[PromptFile], new: list[PromptFile], expected: list[str]) -> None:
    assert prompt_changes(old, new) == expected


def test_updated_keeps_an_unchanged_record_and_appends_a_change_to_the_history() -> None:
    first = RunRecord(BASE, (A,), 1.0, "run1")
    assert updated(first, settings=BASE, prompts=[A], run="run2", at=2.0) is first
    second = updated(first, settings=changed(sampling__temperature=1.0), prompts=[A, B], run="run2", at=2.0)
    assert second.settings["sampling"]["temperature"] == 1.0 and second.prompts == (A, B)
    assert second.created == 1.0 and second.run == "run2"
    (entry,) = second.history
    assert entry["changes"] == ["sampling.temperature: 0.6 -> 1.0"] and entry["previous"] == BASE
    assert entry["prompt_files"] == ["added b.jsonl (sha256 bbbbbbbbbbbb, 2,000 bytes)"]
    assert from_json(to_json(second)) == second
    third = updated(second, settings=second.settings, prompts=[A], run="run3", at=3.0)
    assert len(third.history) == 2 and "previous" not in third.history[1]


@pytest.mark.parametrize(("blob", "message"), [
    (b"not json", "unreadable run settings"),
    (b'{"kind": "something else"}', "not a regen-swarm run file"),
    (b'{"kind": "regen-swarm run", "format": 99, "settings": {}}', "newer than this client"),
    (b'{"kind": "regen-swarm run", "format": 1}', "settings"),
    (b'{"kind": "regen-swarm run", "format": 1, "settings": []}', "settings is not an object"),
])
def test_from_json_names_what_is_wrong(blob: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_json(blob)


def test_the_file_round_trips_and_an_unreadable_one_stops_the_run(tmp_path: Path) -> None:
    assert read_run_file(tmp_path) is None
    record = RunRecord(BASE, (A,), 1.0, "run1")
    write_run_file(tmp_path, record)
    assert read_run_file(tmp_path) == record and not list(tmp_path.glob("*.tmp"))
    (tmp_path / RUN_FILE).write_bytes(b"{")
    with pytest.raises(ConfigError, match="Fix it or restore it") as raised:
        read_run_file(tmp_path)
    assert "Do not remove it" in str(raised.value)


def test_hash_prompt_file_streams_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    data = bytes(range(256)) * (40 << 10)  # 10 MiB: several blocks
    path.write_bytes(data)
    assert hash_prompt_file(path) == PromptFile(str(path), hashlib.sha256(data).hexdigest(), len(data))


@pytest.mark.parametrize(("mix", "expected"), [
    ([({"temperature": 0.6, "top_p": 0.95}, 30), ({"temperature": 1.0, "top_p": 0.95}, 10)],
     "2 different sampling blocks (temperature=0.6: 30 record(s); temperature=1.0: 10 record(s))"),
    ([({"temperature": 0.6, "top_k": 20}, 5), ({"temperature": 0.6}, 4)],
     "2 different sampling blocks (top_k=20: 5 record(s); top_k absent: 4 record(s))"),
])
def test_mixed_settings_names_only_what_differs(mix: list[tuple[dict[str, Any], int]], expected: str) -> None:
    message = mixed_settings(mix)
    assert message.startswith("mixed settings: ") and expected in message


# -- the real CLI ----------------------------------------------------------------------------------------

def audit_json(out: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "client.audit", str(out), "--json"], cwd=REPO, capture_output=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    data: dict[str, Any] = orjson.loads(proc.stdout)
    return data


@pytest.mark.slow
def test_a_changed_resume_is_refused_then_allowed_and_audited_as_mixed(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "120", "--tokens-per-chunk", "3"))])
    first = make_prompts(tmp_path / "p.jsonl", 20)
    more = make_prompts(tmp_path / "q.jsonl", 15, prefix="q")
    out = tmp_path / "out"
    base = ["--endpoints", ",".join(fleet.urls), "--out", str(out), "--prompts", str(first)]
    result = run_client(base)
    assert result.code == 0, result.stderr[-3000:]
    recorded = orjson.loads((out / RUN_FILE).read_bytes())
    assert recorded["settings"]["sampling"]["temperature"] == 0.6 and recorded["history"] == []
    assert recorded["prompts"] == [{"path": str(first), "sha256": hashlib.sha256(first.read_bytes()).hexdigest(),
                                    "bytes": first.stat().st_size}]
    before = (out / RUN_FILE).read_bytes()

    changed_run = [*base, "--prompts", str(more), "--temperature", "1.0"]
    refused = run_client(changed_run)
    assert refused.code == 2, refused.stderr[-3000:]
    assert f"differ from those recorded in {out / RUN_FILE}:\n  sampling.temperature: 0.6 -> 1.0\n" in refused.stderr
    assert "--allow-settings-change" in refused.stderr
    assert "preflight" not in refused.stderr  # refused before the preflight request: nothing was sent
    assert len(read_results(out)) == 20 and (out / RUN_FILE).read_bytes() == before

    allowed = run_client([*changed_run, "--allow-settings-change"])
    assert allowed.code == 0, allowed.stderr[-3000:]
    assert ("settings changed since the last run (--allow-settings-change): sampling.temperature: 0.6 -> 1.0"
            in allowed.stderr)
    assert f"prompt files changed since the last run (allowed): added {more} (sha256 " in allowed.stderr
    history = orjson.loads((out / RUN_FILE).read_bytes())["history"]
    assert [entry["changes"] for entry in history] == [["sampling.temperature: 0.6 -> 1.0"]]
    assert history[0]["previous"]["sampling"]["temperature"] == 0.6

    # The accepted change is the reference now: the same command without the flag goes through.
    again = run_client(changed_run)
    assert again.code == 0, again.stderr[-3000:]

    report = audit_json(out)
    assert report["verdict"] == "healthy"
    mixed = [f for f in report["findings"] if f["message"].startswith("mixed settings")]
    assert [f["level"] for f in mixed] == ["warn"]
    assert "temperature=0.6: 20 record(s); temperature=1.0: 15 record(s)" in mixed[0]["message"]
    counts = {entry["sampling"]["temperature"]: entry["records"] for entry in report["sampling"]}
    assert counts == {0.6: 20, 1.0: 15}


def test_records_without_run_json_refuse_a_resume_until_allowed(tmp_path: Path, fleet_factory: Any) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "60", "--tokens-per-chunk", "3"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    more = make_prompts(tmp_path / "q.jsonl", 5, prefix="q")
    out = tmp_path / "out"
    base = ["--endpoints", ",".join(fleet.urls), "--out", str(out), "--prompts", str(prompts)]
    first = run_client(base)
    assert first.code == 0, first.stderr[-3000:]
    (out / RUN_FILE).unlink()

    changed = [*base, "--prompts", str(more), "--temperature", "1.0"]
    refused = run_client(changed)
    assert refused.code == 2, refused.stderr[-3000:]
    assert f"--out {out} holds 12 record(s) but no {RUN_FILE}" in refused.stderr
    assert "Restore run.json" in refused.stderr and "--allow-settings-change" in refused.stderr
    assert "preflight" not in refused.stderr  # refused before anything was sent
    assert len(read_results(out)) == 12 and not (out / RUN_FILE).exists()

    allowed = run_client([*changed, "--allow-settings-change"])
    assert allowed.code == 0, allowed.stderr[-3000:]
    assert "their settings are unknown" in allowed.stderr
    recorded = orjson.loads((out / RUN_FILE).read_bytes())
    assert recorded["settings"]["sampling"]["temperature"] == 1.0
    assert [entry["changes"] for entry in recorded["history"]] == [
        [f"{RUN_FILE} was missing: the settings of 12 earlier record(s) are unknown"]]
    assert len(read_results(out)) == 17


def test_a_fresh_out_records_its_settings_without_asking(tmp_path: Path) -> None:
    assert first_record(settings=BASE, prompts=(A,), run="r", at=1.0) == RunRecord(BASE, (A,), 1.0, "r")


@pytest.mark.slow
def test_the_prefix_copy_refuses_a_changed_fresh_host(tmp_path: Path, fleet_factory: Any,
                                                      s3: S3Server, s3_prefix: str) -> None:
    fleet = fleet_factory([SimServerSpec(max_running=8, speed=40.0,
                                         extra_args=("--mean-tokens", "120", "--tokens-per-chunk", "3"))])
    prompts = make_prompts(tmp_path / "p.jsonl", 20)
    args = ["--endpoints", ",".join(fleet.urls), "--prompts", str(prompts),
            "--s3", f"s3://{BUCKET}/{s3_prefix}", "--s3-endpoint-url", s3.url]
    result = run_client([*args, "--out", str(tmp_path / "host-a")])
    assert result.code == 0, result.stderr[-3000:]
    stored = from_json(s3.get(BUCKET, f"{s3_prefix}/{RUN_FILE}"))
    assert stored == read_run_file(tmp_path / "host-a")
    # A fresh host with nothing on disk compares against the prefix's copy.
    refused = run_client([*args, "--out", str(tmp_path / "host-b"), "--temperature", "1.0"])
    assert refused.code == 2, refused.stderr[-3000:]
    assert f"recorded in s3://{BUCKET}/{s3_prefix}/{RUN_FILE}:\n  sampling.temperature: 0.6 -> 1.0\n" in refused.stderr
    assert not (tmp_path / "host-b" / RUN_FILE).exists()
