"""client.core.payload, table-driven: the request a prompt becomes under each field policy, and the
sampling block recorded with it (exactly what was sent)."""

from __future__ import annotations

from typing import Any

import pytest

from client.core.payload import (
    EXTENSION_FIELDS,
    FieldPolicy,
    RequestShape,
    SamplingSettings,
    build_payload,
    request_messages,
)
from client.core.records import Prompt
from client.core.sampling_plan import single
from tests.conftest import WEATHER_TOOL

USER = {"role": "user", "content": "Weather in Oslo?"}
ASSISTANT = {"role": "assistant", "content": "It rains."}
TOOL_TURN = {"role": "tool", "tool_call_id": "c1", "content": "rain"}
STANDARD = {"model", "messages", "stream", "stream_options", "max_tokens", "temperature", "top_p",
            "presence_penalty"}


def prompt(*messages: dict[str, Any], tools: list[dict[str, Any]] | None = None) -> Prompt:
    return Prompt(id="p", messages=list(messages), tools=tools, meta=None, source="test.jsonl", line=1)


@pytest.mark.parametrize(("messages", "sent"), [
    ([USER], [USER]),
    ([USER, ASSISTANT], [USER]),  # the final assistant turn is the one regenerated
    ([USER, ASSISTANT, USER], [USER, ASSISTANT, USER]),
    ([USER, TOOL_TURN], [USER, TOOL_TURN]),
    ([], []),
], ids=["user", "final-assistant-dropped", "assistant-in-history-kept", "tool-last", "empty"])
def test_request_messages(messages: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    assert request_messages(prompt(*messages)) == sent


@pytest.mark.parametrize(("policy", "settings", "extensions"), [
    (FieldPolicy.everything(), SamplingSettings(), {"top_k", "min_p", "chat_template_kwargs"}),
    (FieldPolicy.standard(), SamplingSettings(), set()),
    (FieldPolicy.everything(), SamplingSettings(top_k=None, min_p=None), {"chat_template_kwargs"}),
    (FieldPolicy(frozenset({"top_k"})), SamplingSettings(), {"top_k"}),
    (FieldPolicy(frozenset({"chat_template_kwargs"})), SamplingSettings(), {"chat_template_kwargs"}),
], ids=["sglang-like", "openai", "unset-extensions", "top_k-only", "kwargs-only"])
def test_extension_fields_follow_the_policy(policy: FieldPolicy, settings: SamplingSettings,
                                             extensions: set[str]) -> None:
    payload = build_payload(prompt(USER), [USER], settings, model="m", policy=policy)
    assert set(payload) == STANDARD | extensions
    live_counts = {"continuous_usage_stats": True} if policy.allows("continuous_usage_stats") else {}
    assert payload["stream"] is True and payload["stream_options"] == {"include_usage": True, **live_counts}


@pytest.mark.parametrize(("policy", "sent"), [
    (FieldPolicy.everything(), True),
    (FieldPolicy(frozenset({"top_k", "min_p", "chat_template_kwargs", "continuous_usage_stats"})), True),
    (FieldPolicy.standard(), False),
], ids=["everything", "sglang", "openai"])
def test_per_chunk_usage_is_asked_only_where_the_policy_allows(policy: FieldPolicy, sent: bool) -> None:
    payload = build_payload(prompt(USER), [USER], SamplingSettings(), model="m", policy=policy)
    assert ("continuous_usage_stats" in payload["stream_options"]) is sent


VLLM_IDS = {"return_token_ids": True}
SGLANG_IDS = {"return_input_ids_in_sglext": True, "return_output_ids_in_sglext": True}


@pytest.mark.parametrize(("policy", "asked", "sent"), [
    (FieldPolicy.everything(), VLLM_IDS, VLLM_IDS),
    (FieldPolicy.everything(), SGLANG_IDS, SGLANG_IDS),  # each server asks in its own words
    (FieldPolicy.everything(), {}, {}),
    (FieldPolicy(frozenset({"top_k", "min_p", "chat_template_kwargs"})), VLLM_IDS, {}),  # --token-ids off
    (FieldPolicy.standard(), SGLANG_IDS, {}),
])
def test_id_fields_need_both_the_ask_and_the_policy(policy: FieldPolicy, asked: dict[str, bool],
                                                    sent: dict[str, bool]) -> None:
    payload = build_payload(prompt(USER), [USER], SamplingSettings(), model="m", id_fields=asked, policy=policy)
    assert {key: value for key, value in payload.items() if key in VLLM_IDS | SGLANG_IDS} == sent


@pytest.mark.parametrize(("settings", "kwargs"), [
    (SamplingSettings(), {"enable_thinking": True}),
    (SamplingSettings(enable_thinking=False), {"enable_thinking": False}),
    (SamplingSettings(preserve_thinking=True), {"enable_thinking": True, "preserve_thinking": True}),
])
def test_chat_template_kwargs(settings: SamplingSettings, kwargs: dict[str, bool]) -> None:
    payload = build_payload(prompt(USER), [USER], settings, model="m", policy=FieldPolicy.everything())
    assert payload["chat_template_kwargs"] == kwargs


@pytest.mark.parametrize(("tools", "seed", "present"), [
    (None, None, set()),
    ([WEATHER_TOOL], None, {"tools"}),
    (None, 7, {"seed"}),
    ([WEATHER_TOOL], 0, {"tools", "seed"}),  # seed 0 is a seed
])
def test_tools_and_seed_only_when_given(tools: list[dict[str, Any]] | None, seed: int | None,
                                        present: set[str]) -> None:
    payload = build_payload(prompt(USER, tools=tools), [USER], SamplingSettings(seed=seed), model="m",
                            policy=FieldPolicy.standard())
    assert set(payload) - STANDARD == present
    if tools:
        assert payload["tools"] == tools
    if seed is not None:
        # Each request sends its own seed, drawn from the run's seed and the prompt's id (sampling_plan).
        assert payload["seed"] == single(SamplingSettings(seed=seed)).draw(seed, prompt(USER).id, None).seed


@pytest.mark.parametrize(("policy", "settings", "recorded_keys"), [
    (FieldPolicy.everything(), SamplingSettings(),
     {"max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "enable_thinking"}),
    (FieldPolicy.standard(), SamplingSettings(), {"max_tokens", "temperature", "top_p", "presence_penalty"}),
    (FieldPolicy.everything(), SamplingSettings(seed=3, preserve_thinking=True),
     {"max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "seed", "enable_thinking",
      "preserve_thinking"}),
    (FieldPolicy.standard(), SamplingSettings(seed=3, preserve_thinking=True),
     {"max_tokens", "temperature", "top_p", "presence_penalty", "seed"}),
], ids=["all", "openai", "all-with-seed-preserve", "openai-with-seed-preserve"])
def test_the_recorded_block_is_what_was_sent(policy: FieldPolicy, settings: SamplingSettings,
                                              recorded_keys: set[str]) -> None:
    recorded = RequestShape("m", settings, policy).recorded(prompt(USER))
    assert set(recorded) == recorded_keys
    payload = build_payload(prompt(USER), [USER], settings, model="m", policy=policy)
    for key, value in recorded.items():
        sent = payload["chat_template_kwargs"][key] if key.endswith("_thinking") else payload[key]
        assert sent == value, key


def test_policy_constructors() -> None:
    assert FieldPolicy.everything().extensions == frozenset(EXTENSION_FIELDS)
    assert not FieldPolicy.standard().extensions
    assert all(FieldPolicy.everything().allows(f) for f in EXTENSION_FIELDS)
    assert not any(FieldPolicy.standard().allows(f) for f in EXTENSION_FIELDS)
