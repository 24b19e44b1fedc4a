"""Preflight and the extension-field policy: pure rules table-driven, then the real CLI against a strict
server (tests/servers/oddserver.py) that refuses every non-standard field with HTTP 400 or 422."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.core.errors import ConfigError
from client.core.payload import FieldPolicy, SamplingSettings, build_payload, sampling_block
from client.core.records import Prompt
from client.fleet.preflight import check_settings_fit, field_policy, kind_from_models, refused_fields
from client.wire.models import parse_models
from tests.conftest import make_prompts, read_results, run_client
from tests.servers.harness import ServerGroup

EXTENSIONS = {"top_k", "min_p", "chat_template_kwargs", "return_token_ids", "continuous_usage_stats"}
PROMPT = Prompt(id="x", messages=[{"role": "user", "content": "hi"}], tools=None, meta=None, source="t", line=1)


@pytest.mark.parametrize(("document", "kind"), [
    ({"data": [{"id": "m", "owned_by": "sglang"}]}, "sglang"),
    ({"data": [{"id": "m", "owned_by": "vllm"}]}, "vllm"),
    ({"data": [{"id": "m", "owned_by": "VLLM"}]}, "vllm"),
    ({"data": [{"id": "m", "owned_by": "openai"}]}, None),
    ({"data": [{"id": "m"}]}, None),
    ({"data": []}, None),
    ([], None),
])
def test_kind_from_models(document: Any, kind: str | None) -> None:
    assert kind_from_models(parse_models(document)) == kind


@pytest.mark.parametrize(("compat", "kinds", "sent", "name"), [
    # Both engines give token ids (each in its own fields, client.fleet.token_ids), so both allow them.
    ("auto", ["sglang", "sglang"], EXTENSIONS, "sglang"),
    ("auto", ["vllm"], EXTENSIONS, "vllm"),
    ("auto", ["sglang", "vllm"], EXTENSIONS, "mixed"),
    ("auto", ["openai"], set(), "openai"),
    ("auto", ["other"], set(), "openai"),  # the plain kind's older name: one name out
    ("auto", ["sglang", "openai"], set(), "mixed"),
    ("auto", [], set(), "openai"),
    ("openai", ["vllm"], set(), "openai"),
    ("sglang", ["openai"], EXTENSIONS, "sglang"),
    ("vllm", ["openai"], EXTENSIONS, "vllm"),
])
def test_field_policy(compat: str, kinds: list[str], sent: set[str], name: str) -> None:
    policy = field_policy(compat, kinds)
    assert policy.extensions == sent and policy.name == name


@pytest.mark.parametrize(("policy", "settings", "in_payload", "recorded"), [
    (FieldPolicy.everything(), SamplingSettings(), {"top_k", "min_p", "chat_template_kwargs"},
     {"top_k", "min_p", "enable_thinking"}),
    (FieldPolicy.standard(), SamplingSettings(), set(), set()),
    (FieldPolicy.everything(), SamplingSettings(top_k=None, min_p=None), {"chat_template_kwargs"},
     {"enable_thinking"}),
    (FieldPolicy(frozenset({"top_k"})), SamplingSettings(), {"top_k"}, {"top_k"}),
])
def test_payload_and_record_follow_the_policy(policy: FieldPolicy, settings: SamplingSettings,
                                              in_payload: set[str], recorded: set[str]) -> None:
    payload = build_payload(PROMPT, PROMPT.messages, settings, model="m", id_fields={"return_token_ids": True},
                            policy=policy)
    expected_ids = {"return_token_ids"} if policy.allows("return_token_ids") else set()
    assert set(payload) & EXTENSIONS == in_payload | expected_ids
    record = sampling_block(settings, policy)
    assert set(record) & {"top_k", "min_p", "enable_thinking", "preserve_thinking"} == recorded
    assert {"max_tokens", "temperature", "top_p", "presence_penalty"} <= set(record)


@pytest.mark.parametrize(("settings", "message"), [
    (SamplingSettings(enable_thinking=False), "--no-thinking need chat_template_kwargs"),
    (SamplingSettings(preserve_thinking=True), "--preserve-thinking need chat_template_kwargs"),
])
def test_thinking_options_need_the_extension(settings: SamplingSettings, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_settings_fit(settings, FieldPolicy.standard())
    check_settings_fit(settings, FieldPolicy.everything())  # accepted where the field goes out


@pytest.mark.parametrize(("message", "named"), [
    ("HTTP 400: {\"detail\":\"Unexpected fields in the request: {'min_p', 'top_k'}\"}", ["top_k", "min_p"]),
    ('HTTP 422: [{"loc":["body","chat_template_kwargs"],"type":"extra_forbidden"}]', ["chat_template_kwargs"]),
    ("HTTP 400: unknown parameter top_kk", []),
    ("HTTP 400: bad request", []),
])
def test_refused_fields(message: str, named: list[str]) -> None:
    assert refused_fields(message, ["top_k", "min_p", "chat_template_kwargs", "seed"]) == named


def _chat_requests(server: Any) -> list[dict[str, Any]]:
    return [r["json"] for r in server.log_records() if r.get("method") == "POST"]


@pytest.mark.parametrize("mode", ["strict400", "strict422"])
def test_strict_server_stops_at_preflight_then_runs_with_standard_fields(
        mode: str, servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver(mode)
    prompts = make_prompts(tmp_path / "p.jsonl", 12)
    refused = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out")])
    assert refused.code == 2, refused.stderr
    assert "refused the run's request before any prompt was sent" in refused.stderr
    assert "Refused field(s): top_k, min_p, chat_template_kwargs" in refused.stderr
    assert "--compat openai" in refused.stderr
    posts = _chat_requests(server)
    assert len(posts) == 1 and posts[0]["max_tokens"] == 1, "one preflight request, no prompt dispatched"
    assert posts[0]["tools"], "the preflight carries the run's tools"
    assert not read_results(tmp_path / "out")

    done = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                       "--compat", "openai"])
    assert done.code == 0, done.stderr
    assert "extension fields sent: none" in done.stderr
    records = read_results(tmp_path / "out")
    assert sorted(r["id"] for r in records) == [f"p{i:06d}" for i in range(12)]
    for record in records:
        assert set(record["sampling"]) == {"max_tokens", "temperature", "top_p", "presence_penalty"}
        assert record["content"] == "The answer is 42."
    for body in _chat_requests(server)[1:]:
        assert not EXTENSIONS & set(body), body


def test_top_k_none_and_min_p_none_leave_the_fields_out(servers: ServerGroup, tmp_path: Path) -> None:
    server = servers.oddserver("normal")
    prompts = make_prompts(tmp_path / "p.jsonl", 4)
    done = run_client(["--endpoints", server.url, "--prompts", str(prompts), "--out", str(tmp_path / "out"),
                       "--top-k", "none", "--min-p", "none"])
    assert done.code == 0, done.stderr
    for body in _chat_requests(server):
        assert "top_k" not in body and "min_p" not in body
        assert body["chat_template_kwargs"] == {"enable_thinking": True}
    for record in read_results(tmp_path / "out"):
        assert "top_k" not in record["sampling"] and "min_p" not in record["sampling"]
        assert record["sampling"]["enable_thinking"] is True


@pytest.mark.parametrize(("args", "message"), [
    (["--temperature", "-1"], "argument --temperature: must be 0 or more, got -1"),
    (["--top-p", "5"], "argument --top-p: must be between 0 and 1, got 5"),
    (["--top-k", "0"], "argument --top-k: must be at least 1, got 0"),
    (["--idle-timeout", "0"], "argument --idle-timeout: must be above 0, got 0"),
    (["--segment-mb", "-1"], "argument --segment-mb: must be above 0, got -1"),
    (["--preserve-thinking"], "--preserve-thinking keeps the reasoning of earlier turns"),
    (["--compat", "tgi"], "argument --compat: invalid choice: 'tgi'"),
])
def test_options_out_of_range_are_refused(args: list[str], message: str, tmp_path: Path) -> None:
    result = run_client(["--endpoints", "http://127.0.0.1:9", "--prompts", "x.jsonl", "--out", str(tmp_path), *args])
    assert result.code == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
