"""Before the first prompt: what kind of server each endpoint is, which fields the run may send, and one
real request per endpoint in the run's payload shape, so a refusal stops the run with nothing dispatched.

Kinds are read from what a server serves: `/v1/models` `owned_by` (SGLang says `sglang`, vLLM `vllm`),
else SGLang's `/server_info` (each kind's profile says, client.fleet.kinds). `--compat auto` sends an
extension field only when every answering server's kind takes it; `--compat KIND` (`sglang`, `vllm`, or
`openai`, the standard fields) forces that kind's field set. The preflight then proves the
choice: the run's fields, tools when the set has them, `max_tokens: 1`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from client.core.errors import AttemptError, ConfigError, MissingTokenIds, RequestRejected
from client.core.payload import FieldPolicy, SamplingSettings
from client.core.sampling_plan import NEEDS_EXTENSION, SamplingPlan
from client.fleet import kinds as registry
from client.fleet.kinds import OTHER, compat_choices, kind_named, kind_of
from client.fleet.token_ids import no_ids_refusal
from client.wire.endpoint import Endpoint
from client.wire.models import ModelCatalog

COMPAT_CHOICES = compat_choices()
_NO_IDS_FIX = "--token-ids off"
_PLAIN_FIX = f"--compat {OTHER.name}"

# Which option changes a refused field, for the error message.
_FIX_FOR_FIELD: dict[str, str] = {
    "top_k": "--top-k none",
    "min_p": "--min-p none",
    "chat_template_kwargs": _PLAIN_FIX,
    "continuous_usage_stats": _PLAIN_FIX,
    "seed": "leaving out --seed",
    "tools": "a prompt set without tools",
}


def _id_fields() -> frozenset[str]:
    """The fields that ask for token ids and a kind's figures (client.fleet.token_ids): only --token-ids leaves
    them out."""
    return frozenset({"return_token_ids"}.union(*(kind.id_fields for kind in registry.KNOWN)))


def _extensions() -> frozenset[str]:
    """Every extension field some known kind takes: a refused one of these has `--compat openai` as its way out."""
    return frozenset[str]().union(*(kind.extensions for kind in registry.KNOWN))


def _compat_hint() -> str:
    """`--compat sglang or --compat vllm`, from the kinds known."""
    return " or ".join(f"--compat {kind.name}" for kind in registry.KNOWN if kind.extensions)


def kind_from_models(catalog: ModelCatalog) -> str | None:
    """The kind `/v1/models` `owned_by` names, or None when it names no kind we know."""
    return next((kind.name for kind in registry.KNOWN if any(owner in catalog.owners for owner in kind.owned_by)),
                None)


async def detect_kind(endpoint: Endpoint) -> str:
    """The server's kind, from the /v1/models the start-up checks fetched (asked now only if none did), else
    from its `/server_info` where a kind names one."""
    try:
        found = kind_from_models(await endpoint.model_catalog())
    except AttemptError:
        found = None
    if found is not None:
        return found
    asking = [kind for kind in registry.KNOWN if kind.server_info is not None]
    if not asking:
        return OTHER.name
    try:
        info = await endpoint.get_json("/server_info")
    except (AttemptError, ValueError):
        return OTHER.name
    return next((kind.name for kind in asking if kind.server_info is not None and kind.server_info(info)), OTHER.name)


def field_policy(compat: str, kinds: Sequence[str]) -> FieldPolicy:
    """The run's field set: forced by `--compat`, or (auto) what every detected kind takes."""
    forced = kind_named(compat)
    if forced is not None:
        return FieldPolicy(forced.extensions, forced.name)
    if not kinds:
        return FieldPolicy.standard()
    named = [kind_of(kind) for kind in kinds]
    allowed = frozenset.intersection(*(kind.extensions for kind in named))
    return FieldPolicy(allowed, named[0].name if len(set(named)) == 1 else "mixed")


def check_settings_fit(settings: SamplingSettings, policy: FieldPolicy) -> None:
    """Options that need an extension field the run will not send are refused, not silently dropped."""
    if policy.allows("chat_template_kwargs"):
        return
    wanted = [option for option, on in (("--no-thinking", not settings.enable_thinking),
                                         ("--preserve-thinking", settings.preserve_thinking)) if on]
    if wanted:
        raise ConfigError(
            f"{' and '.join(wanted)} need chat_template_kwargs, which this run does not send (field set: "
            f"{policy.name}; standard OpenAI fields only). If the servers take it, pass {_compat_hint()}; "
            "otherwise leave the option out (the model's own default then applies).")


def check_plan_fit(plan: SamplingPlan, policy: FieldPolicy) -> None:
    """A field a sampling plan names that the run's field set does not send is refused at start, named with
    its setting and the plan's source, never silently dropped. `extra` fields go only to a known engine: a
    server of another kind may ignore a field it does not know, so its record would claim what it did not do."""
    wanted: dict[str, list[str]] = {}
    for setting in plan.settings:
        for name in sorted(setting.named):
            need = NEEDS_EXTENSION.get(name)
            if need is not None and not policy.allows(need):
                wanted.setdefault(name, []).append(setting.name)
        if not policy.extensions:  # standard fields only: --compat openai, or a fleet with a plain server
            for name in sorted(setting.values.extra):
                wanted.setdefault(name, []).append(setting.name)
    if wanted:
        named = "; ".join(f"{name} (setting {', '.join(repr(s) for s in settings)})"
                          for name, settings in wanted.items())
        raise ConfigError(
            f"the sampling plan {plan.source} asks for {named}, which this run does not send (field set: "
            f"{policy.name}). Nothing was sent. If the servers take it, pass {_compat_hint()}; "
            "otherwise take the field out of the plan.")


def refused_fields(message: str, sent: Sequence[str]) -> list[str]:
    """The sent fields a refusal names, e.g. `Unexpected fields in the request: {'top_k', 'min_p'}`."""
    return [name for name in sent if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message)]


@dataclass(frozen=True, slots=True)
class PreflightResult:
    url: str
    kind: str
    ok: bool
    ids: bool = False  # the answer carried the server's token ids


async def preflight(endpoints: Sequence[Endpoint], build: Callable[[Endpoint], dict[str, Any]],
                    kinds: dict[str, str], policy: FieldPolicy, *, limit_s: float = 120.0,
                    require_ids: bool = False) -> list[PreflightResult]:
    """One real request per endpoint; a refusal (4xx) stops the run with a ConfigError naming the fields.

    Endpoints that cannot be reached now are left to the dispatcher's health checks (they join when up);
    a 4xx means the payload itself is wrong, which no retry can mend. `require_ids` (--token-ids on): an
    answer without token ids stops the run too.
    """

    async def one(endpoint: Endpoint) -> PreflightResult:
        payload = build(endpoint)
        payload["max_tokens"] = 1
        body = orjson.dumps(payload)
        try:
            async with asyncio.timeout(limit_s):
                completion, _ = await endpoint.stream_chat(body, max_tokens=1)
        except RequestRejected as exc:
            raise _refusal(endpoint, kinds.get(endpoint.url, OTHER.name), policy, payload, exc,
                           require_ids=require_ids) from None
        except MissingTokenIds:
            raise no_ids_refusal(endpoint.url, kinds.get(endpoint.url, OTHER.name)) from None
        except (AttemptError, TimeoutError):
            return PreflightResult(endpoint.url, kinds.get(endpoint.url, OTHER.name), ok=False)
        if require_ids and not completion.completion_token_ids:
            raise no_ids_refusal(endpoint.url, kinds.get(endpoint.url, OTHER.name))
        return PreflightResult(endpoint.url, kinds.get(endpoint.url, OTHER.name), ok=True,
                               ids=bool(completion.completion_token_ids))

    return list(await asyncio.gather(*(one(endpoint) for endpoint in endpoints)))


def _fix_for(name: str) -> str:
    """The option that leaves a refused field out of this endpoint's requests: the id fields go only while
    --token-ids asks for them."""
    if name in _id_fields():
        return _NO_IDS_FIX
    return _FIX_FOR_FIELD.get(name, f"leaving out {name}")


def _refusal(endpoint: Endpoint, kind: str, policy: FieldPolicy, payload: dict[str, Any],
             exc: RequestRejected, *, require_ids: bool = False) -> ConfigError:
    optional = [name for name in payload if name not in ("model", "messages", "stream", "max_tokens")]
    named = refused_fields(exc.detail, optional)
    head = (f"{endpoint.url} (server kind: {kind}) refused the run's request before any prompt was sent: "
            f"{exc}.")
    if named:
        fixes = {_fix_for(name) for name in named}
        if require_ids and _PLAIN_FIX in fixes:
            # --token-ids on needs return_token_ids, which --compat openai never sends (client.fleet.token_ids).
            fixes = (fixes - {_PLAIN_FIX}) | {f"{_PLAIN_FIX} --token-ids off"}
        ordered = sorted(fixes)
        if not any(fix.startswith(_PLAIN_FIX) for fix in ordered) and any(
                name in _extensions() for name in named):
            ordered.append(f"{_PLAIN_FIX} (standard OpenAI fields only)"
                           + (" with --token-ids off" if require_ids else ""))
        return ConfigError(f"{head} Refused field(s): {', '.join(named)}. Change this with "
                           f"{' / '.join(ordered)}.")
    return ConfigError(f"{head} Fields sent: {', '.join(optional)} (field set: {policy.name}). If the server takes "
                       f"only standard OpenAI fields, pass {_PLAIN_FIX}.")
