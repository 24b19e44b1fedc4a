"""The sampling plan, pure: the parser's checks and messages (table-driven), the draw as a function of
(plan, seed, id) and the rules, the shares it realises, and the request and record a draw makes."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import pytest

from client.core.errors import ConfigError, PlanError
from client.core.payload import FieldPolicy, RequestShape, SamplingSettings
from client.core.plan_file import INLINE, read_plan
from client.core.records import Prompt
from client.core.sampling_plan import SamplingPlan, pick, single
from client.fleet.preflight import check_plan_fit

BASE = SamplingSettings()
MIX = """
name = "mix"
[defaults]
max_tokens = 512
[settings.think]
weight = 3
enable_thinking = true
temperature = 0.6
[settings.hot]
enable_thinking = true
temperature = 1.0
[settings.chat]
enable_thinking = false
temperature = 0.7
top_p = 0.8
[[rules]]
name = "short chat"
match = { source = ["chat", "sharegpt"] }
use = ["chat"]
"""


def plan_of(tmp_path: Path, text: str, base: SamplingSettings = BASE) -> SamplingPlan:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return read_plan(str(path), base)


@pytest.mark.parametrize(("text", "message"), [
    ("[settings.a]\ntemperature = -1\n", "settings.a.temperature: must be a number >= 0, got -1"),
    ("[settings.a]\ntop_p = 1.5\n", "settings.a.top_p: must be a number in (0, 1], got 1.5"),
    ("[settings.a]\ntop_k = 0\n", 'settings.a.top_k: must be a whole number >= 1, or "none" (not sent), got 0'),
    ("[settings.a]\nmax_tokens = 1.5\n", "settings.a.max_tokens: must be a whole number >= 1, got 1.5"),
    ("[settings.a]\nenable_thinking = 1\n", "settings.a.enable_thinking: must be true or false, got 1"),
    ("[settings.a]\nweight = 0\n", "settings.a.weight: must be a number > 0, got 0"),
    ("[settings.a]\ntemprature = 0.5\n", "settings.a.temprature: unknown key; a setting takes weight, max_tokens"),
    ("[settings.a]\nseed = 3\n", "settings.a.seed: unknown key"),
    ("[settings.a]\nchat_template_kwargs = { enable_thinking = false }\n",
     "settings.a.chat_template_kwargs.enable_thinking: is set by its own key or by the client, not here"),
    ("[settings.a]\nextra = { model = 'x' }\n", "settings.a.extra.model: is set by its own key or by the client"),
    ("[defaults]\nweight = 2\n[settings.a]\n", "defaults.weight: unknown key; a setting takes max_tokens"),
    ("name = 'x'\n", "settings: the plan needs at least one setting: [settings.NAME]"),
    ("[setting.a]\n", "setting: unknown key; a plan takes name, description, defaults, settings, rules"),
    ("[settings.a]\n[[rules]]\nuse = ['b']\n", "rules[0].use: names 'b', which is not a setting (a)"),
    ("[settings.a]\n[[rules]]\nmatch = { source = 'x' }\n", "rules[0].use: must be a list of setting names"),
    ("[settings.a]\n[[rules]]\nuse = { a = -1 }\n", "rules[0].use.a: must be a number > 0, got -1"),
    ("[settings.a]\n[[rules]]\nmatch = { source = {} }\nuse = ['a']\n", "rules[0].match.source: must be a string"),
    ("[settings.a]\n[[rules]]\nname = 'r'\nuse = ['a']\n[[rules]]\nname = 'r'\nuse = ['a']\n",
     "rules: two rules are named 'r'"),
    ("[settings.a\n", "not valid TOML"),
])
def test_a_bad_plan_names_the_file_and_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PlanError) as caught:
        plan_of(tmp_path, text)
    assert str(caught.value).startswith(f"{tmp_path / 'plan.toml'}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(("given", "message"), [
    ("missing.toml", "missing.toml: no such file"),
    ("a = {temperature = }", f"{INLINE}: not the inline form"),
    ("a = {temperature = -2}", f"{INLINE}: settings.a.temperature: must be a number >= 0, got -2"),
])
def test_a_bad_inline_plan_or_path(given: str, message: str) -> None:
    with pytest.raises(PlanError) as caught:
        read_plan(given, BASE)
    assert message in str(caught.value)


def test_settings_start_from_defaults_then_the_command_line(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MIX, SamplingSettings(presence_penalty=0.5, top_k=None))
    chat = plan.setting("chat").values
    assert (chat.temperature, chat.top_p, chat.max_tokens, chat.enable_thinking) == (0.7, 0.8, 512, False)
    assert (chat.presence_penalty, chat.top_k) == (0.5, None)  # from the command line
    assert plan.setting("chat").named == {"max_tokens", "enable_thinking", "temperature", "top_p"}
    assert [s.weight for s in plan.settings] == [3.0, 1.0, 1.0]
    assert plan.name == "mix" and plan.source == str(tmp_path / "plan.toml")


def test_the_inline_form_is_the_files_settings() -> None:
    plan = read_plan("cold = {weight = 3, temperature = 0.6}; hot = {temperature = 1.0, top_k = 'none'}", BASE)
    assert [(s.name, s.weight, s.values.temperature) for s in plan.settings] == [("cold", 3.0, 0.6), ("hot", 1.0, 1.0)]
    assert plan.setting("hot").values.top_k is None and plan.source == INLINE and plan.name == "inline"


def test_the_digest_is_the_resolved_plan_not_its_layout(tmp_path: Path) -> None:
    a = plan_of(tmp_path, MIX)
    b = plan_of(tmp_path, "# a comment\n" + MIX.replace("[defaults]\nmax_tokens = 512\n", "")
                .replace("weight = 3\n", "weight = 3\nmax_tokens = 512\n")
                .replace("temperature = 1.0\n", "temperature = 1.0\nmax_tokens = 512\n")
                .replace("top_p = 0.8\n", "top_p = 0.8\nmax_tokens = 512\n"))
    assert a.sha256 == b.sha256
    assert plan_of(tmp_path, MIX.replace('name = "mix"', 'name = "renamed"')).sha256 == a.sha256, "names draw nothing"
    assert plan_of(tmp_path, MIX.replace("weight = 3", "weight = 2")).sha256 != a.sha256
    assert plan_of(tmp_path, MIX, SamplingSettings(min_p=0.1)).sha256 != a.sha256  # an inherited value


@pytest.mark.parametrize(("choices", "u", "chosen"), [
    ([("a", 1.0)], 0.999, "a"),
    ([("a", 3.0), ("b", 1.0)], 0.0, "a"),
    ([("a", 3.0), ("b", 1.0)], 0.7499, "a"),
    ([("a", 3.0), ("b", 1.0)], 0.75, "b"),
    ([("a", 1.0), ("b", 1.0), ("c", 2.0)], 0.5, "c"),
])
def test_pick(choices: list[tuple[str, float]], u: float, chosen: str) -> None:
    assert pick(choices, u) == chosen


@pytest.mark.parametrize(("meta", "rule", "allowed"), [
    ({"source": "chat"}, "short chat", {"chat"}),
    ({"source": "sharegpt", "n": 1}, "short chat", {"chat"}),
    ({"source": "agentic"}, None, {"think", "hot", "chat"}),
    (None, None, {"think", "hot", "chat"}),
    ({"source": True}, None, {"think", "hot", "chat"}),
])
def test_rules_by_meta(tmp_path: Path, meta: dict[str, Any] | None, rule: str | None, allowed: set[str]) -> None:
    plan = plan_of(tmp_path, MIX)
    draws = [plan.draw(7, f"id-{i}", meta) for i in range(200)]
    assert {d.rule for d in draws} == {rule}
    assert {d.setting.name for d in draws} == allowed


def test_the_draw_is_a_function_of_plan_seed_and_id(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MIX)
    ids = [f"p{i:06d}" for i in range(300)]
    first = [plan.draw(7, i, None) for i in ids]
    assert [plan.draw(7, i, None) for i in reversed(ids)] == first[::-1], "order does not matter"
    assert [plan_of(tmp_path, MIX).draw(7, i, None) for i in ids] == first, "a fresh load draws the same"
    assert [d.seed for d in [plan.draw(8, i, None) for i in ids]] != [d.seed for d in first]
    assert all(d.seed is not None and 0 <= d.seed < 2**63 for d in first)
    assert len({d.seed for d in first}) == len(ids)
    assert plan.draw(None, "x", None).seed is None, "no --seed: no request seed"
    assert plan.draw(None, "x", None).setting == plan.draw(0, "x", None).setting


def test_realised_shares_are_within_chance(tmp_path: Path) -> None:
    """20,000 ids: each setting's count is within a two-sided binomial bound at alpha 1e-4 (Bonferroni over
    the settings), computed here from the plan's own shares."""
    plan = plan_of(tmp_path, MIX)
    n = 20_000
    counts: dict[str, int] = {}
    for i in range(n):
        name = plan.draw(7, f"q{i}", {"source": "agentic"}).setting.name
        counts[name] = counts.get(name, 0) + 1
    shares = plan.shares({"source": "agentic"})
    assert shares == {"think": 0.6, "hot": 0.2, "chat": 0.2}
    z = NormalDist().inv_cdf(1 - 1e-4 / (2 * len(shares)))
    for name, p in shares.items():
        assert abs(counts.get(name, 0) - n * p) <= z * math.sqrt(n * p * (1 - p)), (name, counts, shares)


PROMPT = Prompt(id="p1", messages=[{"role": "user", "content": "hi"}], tools=None, meta={"source": "chat"},
                source="t", line=1)


def test_the_record_is_what_the_draw_sent(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, MIX.replace("top_p = 0.8\n", "top_p = 0.8\nchat_template_kwargs = { effort = 'low' }\n"
                                         "extra = { repetition_penalty = 1.05 }\n"))
    shape = RequestShape("m", SamplingSettings(seed=5), FieldPolicy.everything(), plan=plan)
    draw = plan.draw(5, "p1", PROMPT.meta)
    record = shape.recorded(PROMPT)
    payload = shape.payload(PROMPT, PROMPT.messages, 0)
    assert record["plan"] == {"name": "mix", "sha256": plan.sha256[:16], "setting": "chat", "rule": "short chat"}
    assert record["seed"] == payload["seed"] == draw.seed
    assert (record["temperature"], record["top_p"], record["max_tokens"]) == (0.7, 0.8, 512)
    assert payload["chat_template_kwargs"] == {"effort": "low", "enable_thinking": False}
    assert record["chat_template_kwargs"] == {"effort": "low"} and record["enable_thinking"] is False
    assert payload["repetition_penalty"] == record["repetition_penalty"] == 1.05
    for key in ("temperature", "top_p", "top_k", "min_p", "max_tokens", "presence_penalty"):
        assert payload[key] == record[key]
    # The preflight sends every field any setting sends.
    union = shape.union_block(PROMPT)
    assert {"repetition_penalty", "chat_template_kwargs", "enable_thinking"} <= set(union)


def test_without_a_plan_records_are_as_before() -> None:
    shape = RequestShape("m", SamplingSettings(), FieldPolicy.everything())
    assert shape.recorded(PROMPT) == shape.sampling
    assert shape.the_plan.name == "qwen3-card" and single(SamplingSettings(enable_thinking=False)).settings[0].name \
        == "no-thinking"


@pytest.mark.parametrize(("text", "policy", "named"), [
    ("[settings.a]\ntop_k = 20\n", FieldPolicy.standard(), "top_k (setting 'a')"),
    ("[settings.a]\nenable_thinking = false\n[settings.b]\nenable_thinking = true\n", FieldPolicy.standard(),
     "enable_thinking (setting 'a', 'b')"),
    ("[settings.a]\nextra = { repetition_penalty = 1.1 }\n", FieldPolicy.standard(), "repetition_penalty"),
    ("[settings.a]\nmin_p = 0.1\n", FieldPolicy(frozenset({"top_k"})), "min_p (setting 'a')"),
    ("[settings.a]\nextra = { repetition_penalty = 1.1 }\n", FieldPolicy(frozenset(), "mixed"), "repetition_penalty"),
])
def test_a_field_the_run_does_not_send_is_refused(tmp_path: Path, text: str, policy: FieldPolicy, named: str) -> None:
    plan = plan_of(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        check_plan_fit(plan, policy)
    assert f"the sampling plan {tmp_path / 'plan.toml'} asks for {named}" in str(caught.value)


def test_fields_the_plan_leaves_to_the_command_line_are_not_refused(tmp_path: Path) -> None:
    check_plan_fit(plan_of(tmp_path, "[settings.a]\ntemperature = 0.3\n"), FieldPolicy.standard())


def test_the_documented_914k_plan() -> None:
    """docs/sampling.md's worked example: thinking on for agentic and reasoning, off for short chat, two
    temperatures each."""
    plan = read_plan(str(Path(__file__).resolve().parent.parent / "docs" / "examples" / "sampling-914k.toml"), BASE)
    assert plan.shares({"source": "chat"}) == {"chat": 0.75, "chat-hot": 0.25}
    assert plan.shares({"source": "tools"}) == plan.shares(None) == {"think": 0.75, "think-hot": 0.25}
    assert {s.name: (s.values.enable_thinking, s.values.temperature) for s in plan.settings} == {
        "think": (True, 0.6), "think-hot": (True, 1.0), "chat": (False, 0.7), "chat-hot": (False, 1.0)}


PLAN_JSON = {"name": "mix", "settings": {"a": {"weight": 3.0}, "b": {"weight": 1.0}, "c": {"weight": 1.0}},
             "rules": [{"name": "chat", "match": {"source": ["chat"]}, "use": {"c": 1.0}}]}


@pytest.mark.parametrize(("draws", "asked", "outside"), [
    # 400 agentic records drawn 300/100 from a 3:1 rule-less draw over a, b, c (0.6 / 0.2 / 0.2): a is off.
    ({("agentic", "", "a"): 300, ("agentic", "", "b"): 100},
     {("agentic", "a"): 0.6, ("agentic", "b"): 0.2, ("agentic", "c"): 0.2}, {("agentic", "a"), ("agentic", "c")}),
    ({("agentic", "", "a"): 240, ("agentic", "", "b"): 82, ("agentic", "", "c"): 78},
     {("agentic", "a"): 0.6, ("agentic", "b"): 0.2, ("agentic", "c"): 0.2}, set()),
    # The chat rule draws c only: all c is exactly as asked.
    ({("chat", "chat", "c"): 50}, {("chat", "c"): 1.0}, set()),
])
def test_the_audit_mix_asked_vs_obtained(draws: dict[tuple[str, str, str], int],
                                          asked: dict[tuple[str, str], float], outside: set[tuple[str, str]]) -> None:
    from collections import Counter

    from client.audit.plan_mix import mix_finding, mix_rows
    rows = mix_rows(Counter(draws), PLAN_JSON)
    assert {(r["source"], r["setting"]): r["asked"] for r in rows} == asked
    assert {(r["source"], r["setting"]) for r in rows if r["outside_chance"]} == outside
    assert (mix_finding(rows) is not None) == bool(outside)
    assert all(r["asked"] is None for r in mix_rows(Counter(draws), None))
