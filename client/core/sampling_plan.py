"""The sampling plan: per prompt, a draw over named settings, as a pure function of the plan, the run's seed
and the prompt's id (never of the order prompts arrive in), so a resume, another host or another shard
draws the same for every prompt.

A plan is a list of named settings, each a full `SamplingSettings` and a weight, and an ordered list of
rules: the first rule whose `match` the prompt's `meta` meets says which settings it draws from (with
their weights, or its own); a prompt no rule matches draws from every setting. The draw hashes
(plan digest, seed, id): the first 8 bytes pick the setting, the next 8 are the request's own `seed`
(sent only when the run has `--seed`). The plan's digest covers the resolved values, so two files that
differ only in layout or comments draw the same.

Reading a plan file or the inline form is client.core.plan_file's; this module is the model and the draw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """One request's sampling values (client.core.payload sends them). The defaults are Qwen3's card for
    thinking mode."""

    max_tokens: int = 8192
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int | None = 20  # None: not sent
    min_p: float | None = 0.0  # None: not sent
    presence_penalty: float = 0.0
    seed: int | None = None
    enable_thinking: bool = True
    preserve_thinking: bool = False  # keep earlier turns' reasoning in multi-turn history (Qwen3.6 template)
    # Other chat template switches, and other top-level fields (a plan's `chat_template_kwargs` and `extra`).
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

# The fields a plan's setting may give, beside `weight`: SamplingSettings' own (seed excepted: each request's
# is drawn), plus `chat_template_kwargs` (other template switches) and `extra` (other top-level fields).
PLAN_FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "enable_thinking",
               "preserve_thinking", "chat_template_kwargs", "extra")
# Which extension field of the run's field policy (client.core.payload.FieldPolicy) each plan field needs.
NEEDS_EXTENSION = {"top_k": "top_k", "min_p": "min_p", "enable_thinking": "chat_template_kwargs",
                   "preserve_thinking": "chat_template_kwargs", "chat_template_kwargs": "chat_template_kwargs"}

_DRAW_TAG = b"regen-swarm sampling draw v1\0"
_SEED_BITS = 63  # a non-negative signed 64-bit integer: every server's seed range (client.core.options)


@dataclass(frozen=True, slots=True)
class Setting:
    """One named setting of a plan: the values it sends, its weight, and the fields the plan itself named
    (the others come from the command line); only a named field is refused when the server cannot take it."""

    name: str
    weight: float
    values: SamplingSettings
    named: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Rule:
    """`match`: meta key -> the values it may have (any of); empty matches every prompt. `use`: the settings
    drawn from, by name, with their weights here."""

    name: str
    match: Mapping[str, tuple[Any, ...]]
    use: tuple[tuple[str, float], ...]

    def matches(self, meta: Mapping[str, Any] | None) -> bool:
        if not self.match:
            return True
        if meta is None:
            return False
        missing = object()
        return all(_same_any(meta.get(key, missing), values) for key, values in self.match.items())


def _same_any(value: Any, choices: tuple[Any, ...]) -> bool:
    """Equal as JSON values: true is not 1, 1 is 1.0."""
    return any(value == choice and isinstance(value, bool) == isinstance(choice, bool) for choice in choices)


@dataclass(frozen=True, slots=True)
class Draw:
    """What one prompt drew: the setting, the rule that chose among settings (None: no rule matched), and
    the request's own seed (None: the run has no --seed, so none is sent)."""

    setting: Setting
    rule: str | None
    seed: int | None

    def label(self, plan: SamplingPlan) -> dict[str, Any]:
        """The record's `sampling.plan`: which plan, setting and rule made this request."""
        label: dict[str, Any] = {"name": plan.name, "sha256": plan.sha256[:16], "setting": self.setting.name}
        if self.rule is not None:
            label["rule"] = self.rule
        return label


@dataclass(frozen=True)
class SamplingPlan:
    """Named settings and ordered rules; `source` says where it came from (a file, the inline form, a preset)."""

    name: str
    settings: tuple[Setting, ...]
    rules: tuple[Rule, ...] = ()
    source: str = "preset"
    sha256: str = field(init=False, compare=False)
    _by_name: dict[str, Setting] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {s.name: s for s in self.settings})
        # The digest is of the values and rules only: a plan's name (or its file's) does not change any draw.
        drawn = {key: value for key, value in self.describe().items() if key != "name"}
        object.__setattr__(self, "sha256", hashlib.sha256(orjson.dumps(drawn, option=orjson.OPT_SORT_KEYS)).hexdigest())

    def setting(self, name: str) -> Setting:
        return self._by_name[name]

    def describe(self) -> dict[str, Any]:
        """The resolved plan as run.json keeps it: every setting's values and weight, and the rules."""
        settings = {s.name: {"weight": s.weight, **_values(s.values)} for s in self.settings}
        rules = [{"name": r.name, "match": {k: list(v) for k, v in r.match.items()}, "use": dict(r.use)}
                 for r in self.rules]
        return {"name": self.name, "settings": settings, "rules": rules}

    def candidates(self, meta: Mapping[str, Any] | None) -> tuple[str | None, Sequence[tuple[str, float]]]:
        """The rule a prompt with `meta` falls under (None: none) and the settings it draws from, weighted."""
        for rule in self.rules:
            if rule.matches(meta):
                return rule.name, rule.use
        return None, [(s.name, s.weight) for s in self.settings]

    def draw(self, seed: int | None, prompt_id: str, meta: Mapping[str, Any] | None) -> Draw:
        """The setting and the request seed of `prompt_id`: a function of (plan, seed, id) and the rules."""
        digest = hashlib.sha256(_DRAW_TAG + self.sha256.encode() + b"\0" + str(seed or 0).encode() + b"\0"
                                + prompt_id.encode("utf-8", "surrogatepass")).digest()
        rule, choices = self.candidates(meta)
        return Draw(self.setting(pick(choices, unit(digest[:8]))), rule,
                    int.from_bytes(digest[8:16], "big") >> (64 - _SEED_BITS) if seed is not None else None)

    def shares(self, meta: Mapping[str, Any] | None) -> dict[str, float]:
        """Each setting's probability for a prompt with `meta` (the audit's "asked", the tests' expectation)."""
        _, choices = self.candidates(meta)
        total = sum(weight for _, weight in choices)
        shares: dict[str, float] = {}
        for name, weight in choices:
            shares[name] = shares.get(name, 0.0) + weight / total
        return shares


def unit(eight: bytes) -> float:
    """Eight hash bytes as a uniform number in [0, 1)."""
    return int.from_bytes(eight, "big") / 2.0**64


def pick(choices: Sequence[tuple[str, float]], u: float) -> str:
    """The choice whose cumulative weight first passes `u` of the total (the last one on rounding)."""
    total = sum(weight for _, weight in choices)
    target, running = u * total, 0.0
    for name, weight in choices:
        running += weight
        if target < running:
            return name
    return choices[-1][0]


def _values(values: SamplingSettings) -> dict[str, Any]:
    """A setting's values as run.json shows them: those that are set, the seed left out (each request draws it)."""
    shown = {key: value for key, value in asdict(values).items() if value is not None and value != {}}
    shown.pop("seed", None)
    return shown


# Qwen3's model card: thinking on, 0.6 / 0.95 / top_k 20 / min_p 0; thinking off, 0.7 / 0.8 / 20 / 0.
CARD_PRESET = "qwen3-card"
CARD = {True: {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0},
        False: {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}}


def card_setting(thinking: bool) -> str:
    return "thinking" if thinking else "no-thinking"


def single(values: SamplingSettings) -> SamplingPlan:
    """The plan of a run without --sampling-plan: one setting, the card's for its thinking mode with the
    command line's values over it."""
    return SamplingPlan(CARD_PRESET, (Setting(card_setting(values.enable_thinking), 1.0, values),))


def plan_line(plan: SamplingPlan) -> str:
    """The start-up line's words for the plan: `sampling plan qwen3-card: thinking (...)`, or each setting,
    then each rule with the shares it draws (or, without rules, each setting's share)."""
    def brief(s: Setting) -> str:
        v = s.values
        return (f"{s.name} (thinking {'on' if v.enable_thinking else 'off'}, temperature {v.temperature}, "
                f"top_p {v.top_p}, max_tokens {v.max_tokens})")

    def shares(choices: Sequence[tuple[str, float]]) -> str:
        total = sum(weight for _, weight in choices)
        return ", ".join(f"{name} {weight / total:.0%}" for name, weight in choices)

    if len(plan.settings) == 1 and not plan.rules:
        return f"sampling plan {plan.name}: {brief(plan.settings[0])}"
    head = (f"sampling plan {plan.name} ({plan.source}, sha256 {plan.sha256[:12]}): "
            f"{'; '.join(map(brief, plan.settings))}")
    draws = [f"rule {r.name!r} ({_match_words(r)}): {shares(r.use)}" for r in plan.rules]
    if not any(not r.match for r in plan.rules):
        draws.append(f"{'other prompts' if plan.rules else 'every prompt'}: "
                     f"{shares([(s.name, s.weight) for s in plan.settings])}")
    return f"{head}. Draws: {'; '.join(draws)}"


def _match_words(rule: Rule) -> str:
    if not rule.match:
        return "every other prompt"
    return " and ".join(f"meta.{key} in {list(values)}" if len(values) > 1 else f"meta.{key} = {values[0]!r}"
                        for key, values in rule.match.items())
