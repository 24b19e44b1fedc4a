"""`--sampling-plan`: a TOML file, or the short inline form, read into a SamplingPlan (client.core.sampling_plan)
with every value checked. A mistake is a `PlanError` naming the file, the key and what is wrong, e.g.
`plan.toml: settings.hot.top_p: must be a number in (0, 1], got 1.5`; the run turns it into exit 2.

The file:

    name = "914k"                        # optional ("plan" by default); records and run.json show it
    [defaults]                           # optional: values every setting starts from
    max_tokens = 8192
    [settings.think]                     # one table per setting; `weight` defaults to 1
    weight = 3
    enable_thinking = true
    temperature = 0.6
    [[rules]]                            # optional, first match wins
    name = "short chat"
    match = { source = ["chat", "sharegpt"] }   # meta key -> a value or a list of values
    use = ["chat"]                       # settings by name (their weights), or { chat = 1, think = 2 }

A value a setting does not give comes from `[defaults]`, then from the command line (`--temperature`, ...).
The inline form is `NAME = {TABLE}` parts joined by `;`, each one `[settings.NAME]`:
`--sampling-plan 'cold = {weight = 3, temperature = 0.6}; hot = {temperature = 1.0}'`.

A typed loader rather than a schema library: the checks are few, and each message names the key the user wrote.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from client.core.errors import PlanError
from client.core.sampling_plan import PLAN_FIELDS, Rule, SamplingPlan, SamplingSettings, Setting


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# field -> (the check, what it must be). "none" leaves top_k / min_p out of the requests, as `--top-k none` does.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_tokens": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "temperature": (lambda v: _number(v) and v >= 0, "a number >= 0"),
    "top_p": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "top_k": (lambda v: v == "none" or (_whole(v) and v >= 1), 'a whole number >= 1, or "none" (not sent)'),
    "min_p": (lambda v: v == "none" or (_number(v) and 0 <= v <= 1), 'a number in [0, 1], or "none" (not sent)'),
    "presence_penalty": (lambda v: _number(v) and -2 <= v <= 2, "a number in [-2, 2]"),
    "enable_thinking": (lambda v: isinstance(v, bool), "true or false"),
    "preserve_thinking": (lambda v: isinstance(v, bool), "true or false"),
    "chat_template_kwargs": (lambda v: isinstance(v, dict), "a table of chat template switches"),
    "extra": (lambda v: isinstance(v, dict), "a table of other top-level request fields"),
}
# Fields the client itself sets, or that a plan sets by their own key: never an `extra` or template switch.
_RESERVED_EXTRA = frozenset({"model", "messages", "stream", "stream_options", "tools", "tool_choice", "seed", "n",
                             "chat_template_kwargs", "return_token_ids", *PLAN_FIELDS})
_RESERVED_KWARGS = frozenset({"enable_thinking", "preserve_thinking"})
_TOP_KEYS = ("name", "description", "defaults", "settings", "rules")
_RULE_KEYS = ("name", "match", "use")
INLINE = "--sampling-plan (inline)"


def _fail(source: str, key: str, problem: str) -> PlanError:
    return PlanError(f"{source}: {key}: {problem}" if key else f"{source}: {problem}")


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


def _fields(source: str, where: str, table: Mapping[str, Any], *, weighted: bool) -> dict[str, Any]:
    """A setting's (or `[defaults]`') values, checked; `weight` only where `weighted`."""
    values: dict[str, Any] = {}
    for key, value in table.items():
        at = f"{where}.{key}"
        if key == "weight" and weighted:
            if not (_number(value) and value > 0):
                raise _fail(source, at, f"must be a number > 0, got {_show(value)}")
            continue
        if key == "description":
            continue
        if key not in _CHECKS:
            allowed = ", ".join((("weight",) if weighted else ()) + PLAN_FIELDS)
            raise _fail(source, at, f"unknown key; a setting takes {allowed}")
        check, must = _CHECKS[key]
        if not check(value):
            raise _fail(source, at, f"must be {must}, got {_show(value)}")
        reserved = _RESERVED_KWARGS if key == "chat_template_kwargs" else _RESERVED_EXTRA if key == "extra" else None
        if reserved is not None:
            for name in value:
                if name in reserved:
                    raise _fail(source, f"{at}.{name}", "is set by its own key or by the client, not here"
                                + (f"; write {name} = ... in the setting" if name in PLAN_FIELDS else ""))
        values[key] = value
    return values


def _settings_values(base: SamplingSettings, given: Mapping[str, Any]) -> SamplingSettings:
    changes: dict[str, Any] = {key: (None if value == "none" else value) for key, value in given.items()
               if key not in ("chat_template_kwargs", "extra")}
    if "chat_template_kwargs" in given:
        changes["template_kwargs"] = dict(given["chat_template_kwargs"])
    if "extra" in given:
        changes["extra"] = dict(given["extra"])
    return replace(base, **changes)


def _rule(source: str, index: int, table: Any, names: Mapping[str, Setting]) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(table, dict):
        raise _fail(source, where, "must be a table ([[rules]])")
    for key in table:
        if key not in _RULE_KEYS:
            raise _fail(source, f"{where}.{key}", f"unknown key; a rule takes {', '.join(_RULE_KEYS)}")
    name = table.get("name", f"rule {index + 1}")
    if not isinstance(name, str) or not name:
        raise _fail(source, f"{where}.name", f"must be a non-empty string, got {_show(name)}")
    match = table.get("match", {})
    if not isinstance(match, dict):
        raise _fail(source, f"{where}.match", "must be a table: meta key = value, or = [values]")
    matched: dict[str, tuple[Any, ...]] = {}
    for key, value in match.items():
        values = tuple(value) if isinstance(value, list) else (value,)
        if not values or not all(isinstance(v, str | int | float | bool) for v in values):
            raise _fail(source, f"{where}.match.{key}", "must be a string, number or boolean, or a list of them")
        matched[key] = values
    use = table.get("use")
    if isinstance(use, list) and use and all(isinstance(n, str) for n in use):
        weighted = [(n, names[n].weight if n in names else 0.0) for n in use]
    elif isinstance(use, dict) and use:
        for n, w in use.items():
            if not (_number(w) and w > 0):
                raise _fail(source, f"{where}.use.{n}", f"must be a number > 0, got {_show(w)}")
        weighted = [(n, float(w)) for n, w in use.items()]
    else:
        raise _fail(source, f"{where}.use", "must be a list of setting names, or a table of name = weight")
    for n, _ in weighted:
        if n not in names:
            raise _fail(source, f"{where}.use", f"names {n!r}, which is not a setting ({', '.join(names)})")
    return Rule(name, matched, tuple(weighted))


def plan_from(document: Mapping[str, Any], base: SamplingSettings, *, source: str, name: str) -> SamplingPlan:
    """The plan a parsed TOML document describes, its settings over `base` (the command line's values)."""
    for key in document:
        if key not in _TOP_KEYS:
            raise _fail(source, key, f"unknown key; a plan takes {', '.join(_TOP_KEYS)}")
    plan_name = document.get("name", name)
    if not isinstance(plan_name, str) or not plan_name:
        raise _fail(source, "name", f"must be a non-empty string, got {_show(plan_name)}")
    defaults_table = document.get("defaults", {})
    if not isinstance(defaults_table, dict):
        raise _fail(source, "defaults", "must be a table ([defaults])")
    defaults = _fields(source, "defaults", defaults_table, weighted=False)
    tables = document.get("settings")
    if not isinstance(tables, dict) or not tables:
        raise _fail(source, "settings", "the plan needs at least one setting: [settings.NAME]")
    settings: dict[str, Setting] = {}
    for setting_name, table in tables.items():
        where = f"settings.{setting_name}"
        if not isinstance(table, dict):
            raise _fail(source, where, "must be a table of values ([settings.NAME])")
        given = _fields(source, where, table, weighted=True)
        merged = {**defaults, **given}
        settings[setting_name] = Setting(setting_name, float(table.get("weight", 1.0)),
                                         _settings_values(base, merged), frozenset(merged))
    rules_list = document.get("rules", [])
    if not isinstance(rules_list, list):
        raise _fail(source, "rules", "must be an array of tables ([[rules]])")
    rules = tuple(_rule(source, i, table, settings) for i, table in enumerate(rules_list))
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise _fail(source, "rules", f"two rules are named {rule.name!r}; the records name the rule, so "
                        "each needs its own name")
        seen.add(rule.name)
    return SamplingPlan(plan_name, tuple(settings.values()), rules, source)


def read_plan(text: str, base: SamplingSettings) -> SamplingPlan:
    """`--sampling-plan`'s value: a TOML file's path, or the inline form (it has a `=`, and no such file exists)."""
    path = Path(text)
    if path.is_file():
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise PlanError(f"{text}: cannot be read: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise PlanError(f"{text}: not valid TOML: {exc}") from exc
        return plan_from(document, base, source=text, name="plan")
    if "=" not in text:
        raise PlanError(f"{text}: no such file (and not the inline form, NAME = {{key = value, ...}}; ...)")
    lines = [f"settings.{part.strip()}" for part in text.split(";") if part.strip()]
    try:
        document = tomllib.loads("\n".join(lines))
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{INLINE}: not the inline form NAME = {{key = value, ...}}; ...: {exc}") from exc
    return plan_from(document, base, source=INLINE, name="inline")
