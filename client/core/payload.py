"""PromptRecord + settings -> the chat-completions payload, and the sampling block recorded with results.

If the prompt's last message is an assistant turn, that turn is the one being regenerated: it is dropped
from the request (and from the recorded messages) so the model writes it anew.

Standard OpenAI fields always go out. The extension fields (`top_k`, `min_p`, `chat_template_kwargs`,
`stream_options.continuous_usage_stats`, and the token-id fields) go only where the run's `FieldPolicy`
allows them, decided once at start from the kind of server (`--compat`); the recorded sampling block is
built by the same policy, so a record says exactly what was sent. In the policy, `return_token_ids` stands
for "ask this server for the exact token ids": which fields do that depends on the server's kind
(vLLM: `return_token_ids`; SGLang: its `sglext` fields), so each endpoint hands its own (client.fleet.token_ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from client.core.records import Prompt
from client.core.sampling_plan import Draw, SamplingPlan, single
from client.core.sampling_plan import SamplingSettings as SamplingSettings

EXTENSION_FIELDS = ("top_k", "min_p", "chat_template_kwargs", "return_token_ids", "continuous_usage_stats")
# The one name of the standard field set: the `--compat` value, the policy's name, and the kind of server
# that takes standard OpenAI fields only (client.fleet.servers.openai).
STANDARD = "openai"


@dataclass(frozen=True, slots=True)
class FieldPolicy:
    """Which extension fields this run may send; everything else in a payload is standard OpenAI."""

    extensions: frozenset[str]
    name: str = "custom"

    @classmethod
    def everything(cls) -> FieldPolicy:
        return cls(frozenset(EXTENSION_FIELDS), "all")

    @classmethod
    def standard(cls) -> FieldPolicy:
        return cls(frozenset(), STANDARD)

    @property
    def standard_only(self) -> bool:
        """True when the run sends standard OpenAI fields only (`--compat openai`, or a fleet of that kind)."""
        return self.name == STANDARD

    def allows(self, field: str) -> bool:
        return field in self.extensions


def request_messages(prompt: Prompt) -> list[dict[str, Any]]:
    messages = prompt.messages
    if messages and messages[-1].get("role") == "assistant":
        return messages[:-1]
    return messages


# The recorded sampling fields that do not ride at the payload's top level: they go in chat_template_kwargs.
# Payload and record come from one `sampling_block`, so a record's `sampling` is what was sent.
_NOT_TOP_LEVEL = frozenset({"enable_thinking", "preserve_thinking", "chat_template_kwargs", "plan"})


def sampling_block(settings: SamplingSettings, policy: FieldPolicy) -> dict[str, Any]:
    """The settings the policy lets out, as a ResultRecord's `sampling` records them. Other template
    switches are kept under `chat_template_kwargs`; `extra` fields are top-level, as they are sent."""
    sent = {key: value for key, value in asdict(settings).items() if value is not None}
    kwargs, extra = sent.pop("template_kwargs"), sent.pop("extra")
    for key in ("top_k", "min_p"):
        if not policy.allows(key):
            sent.pop(key, None)
    if not policy.allows("chat_template_kwargs"):
        sent.pop("enable_thinking", None)
        sent.pop("preserve_thinking", None)
    else:
        if not settings.preserve_thinking:
            sent.pop("preserve_thinking", None)
        if kwargs:
            sent["chat_template_kwargs"] = kwargs
    sent.update(extra)
    return sent


def chat_template_kwargs(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """`chat_template_kwargs` of a request whose sampling block (a ResultRecord's `sampling`) is `block`, as
    the policy let them out (None: none were sent). Every render that must match the server's (the export's
    re-render and template check, the `--tokenizer` prompt count) hands the template these."""
    if "enable_thinking" not in block:
        return None
    extra = block.get("chat_template_kwargs")
    kwargs: dict[str, Any] = {**(extra if isinstance(extra, Mapping) else {}),
                              "enable_thinking": bool(block["enable_thinking"])}
    if block.get("preserve_thinking"):
        kwargs["preserve_thinking"] = True
    return kwargs


@dataclass(frozen=True, slots=True)
class IdRequest:
    """How one endpoint's requests ask for the exact token ids (client.fleet.token_ids)."""

    fields: Mapping[str, bool] = field(default_factory=dict)  # what each request carries; empty: none asked
    required: bool = False  # --token-ids on: a reply without the ids is a failed attempt


_NO_IDS = IdRequest()


def build_payload(
    prompt: Prompt,
    messages: list[dict[str, Any]],
    settings: SamplingSettings,
    *,
    model: str,
    policy: FieldPolicy,
    id_fields: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    """`id_fields`: what this server's request carries to return the token ids (client.fleet.token_ids);
    sent only when the policy allows token ids."""
    return RequestShape(model, settings, policy, (IdRequest(id_fields or {}),)).payload(prompt, messages, 0)


@dataclass(frozen=True)
class RequestShape:
    """What every request of a run carries, settled once at start: the model, the settings, the field policy,
    each endpoint's token-id fields (by endpoint index) and the sampling plan (client.core.sampling_plan;
    None: one setting, `settings`). Each prompt's sampling block is its draw from the plan through the
    policy: the payload and the recorded sampling both derive from it."""

    model: str
    settings: SamplingSettings
    policy: FieldPolicy
    ids: tuple[IdRequest, ...] = ()
    # Where each endpoint counts a prompt's tokens as it renders it (SGLang `/v1/tokenize`, vLLM `/tokenize`;
    # None where it cannot), for --train-window.
    count_paths: tuple[str | None, ...] = ()
    plan: SamplingPlan | None = None
    sampling: dict[str, Any] = field(init=False, compare=False)  # `settings` through the policy (run.json)
    _blocks: dict[str, dict[str, Any]] = field(init=False, compare=False, repr=False)
    _named: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Records name the plan only when one was given: a run without one writes the records it always did.
        object.__setattr__(self, "_named", self.plan is not None)
        if self.plan is None:
            object.__setattr__(self, "plan", single(self.settings))
        object.__setattr__(self, "sampling", sampling_block(self.settings, self.policy))
        # Each setting's block without a seed: a request's own seed is drawn with its setting.
        object.__setattr__(self, "_blocks", {s.name: sampling_block(replace(s.values, seed=None), self.policy)
                                             for s in self.the_plan.settings})

    @property
    def the_plan(self) -> SamplingPlan:
        assert self.plan is not None  # set in __post_init__
        return self.plan

    def draw(self, prompt: Prompt) -> Draw:
        """The prompt's setting and seed: a function of the plan, --seed and its id (client.core.sampling_plan)."""
        return self.the_plan.draw(self.settings.seed, prompt.id, prompt.meta)

    def block(self, draw: Draw) -> dict[str, Any]:
        """The sampling fields a request with this draw sends (a fresh dict)."""
        block = dict(self._blocks[draw.setting.name])
        if draw.seed is not None:
            block["seed"] = draw.seed
        return block

    def recorded(self, prompt: Prompt) -> dict[str, Any]:
        """The ResultRecord's `sampling`: what was sent, and (with --sampling-plan) under `plan` the plan, setting
        and rule that chose it."""
        draw = self.draw(prompt)
        block = self.block(draw)
        if self._named:
            block["plan"] = draw.label(self.the_plan)
        return block

    def max_tokens(self, prompt: Prompt) -> int:
        return self.draw(prompt).setting.values.max_tokens

    def preserve_thinking(self, prompt: Prompt) -> bool:
        return self.draw(prompt).setting.values.preserve_thinking

    def union_block(self, prompt: Prompt) -> dict[str, Any]:
        """Every field any setting sends (the first setting's value where they differ), for the preflight: a
        server that refuses any of the plan's fields refuses at start."""
        union = self.block(self.draw(prompt))
        for block in self._blocks.values():
            for key, value in block.items():
                if key == "chat_template_kwargs":
                    union[key] = {**value, **union.get(key, {})}
                elif key == "preserve_thinking":
                    union[key] = union.get(key) or value
                else:
                    union.setdefault(key, value)
        return union

    def ids_for(self, endpoint: int) -> IdRequest:
        return self.ids[endpoint] if endpoint < len(self.ids) else _NO_IDS

    @staticmethod
    def _template_kwargs(block: Mapping[str, Any]) -> dict[str, Any] | None:
        return chat_template_kwargs(block)

    def count_path(self, endpoint: int) -> str | None:
        return self.count_paths[endpoint] if endpoint < len(self.count_paths) else None

    def count_request(self, prompt: Prompt, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The tokenize request that renders `messages` as the chat request would (tools, thinking). No
        `add_generation_prompt`: SGLang renders a request without it exactly as a chat completion, and vLLM
        adds the generation prompt by default."""
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        if prompt.tools:
            request["tools"] = prompt.tools
        kwargs = self._template_kwargs(self.block(self.draw(prompt)))
        if kwargs is not None:
            request["chat_template_kwargs"] = kwargs
        return request

    def payload(self, prompt: Prompt, messages: list[dict[str, Any]], endpoint: int,
                max_tokens: int | None = None, sampling: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The request for `prompt` to the endpoint with index `endpoint`; `max_tokens` below the run's
        (the training window's room) replaces it in this request only. `sampling`: these fields instead of
        the prompt's draw (the preflight's union)."""
        if sampling is None:
            sampling = self.block(self.draw(prompt))
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": ({"include_usage": True, "continuous_usage_stats": True}
                               if self.policy.allows("continuous_usage_stats") else {"include_usage": True}),
        }
        # Top-level: the standard and extension sampling fields, and a plan's `extra` fields (recorded flat).
        payload.update((key, value) for key, value in sampling.items() if key not in _NOT_TOP_LEVEL)
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        kwargs = self._template_kwargs(sampling)
        if kwargs is not None:
            # A top-level field when posting raw JSON (the SDK's extra_body puts it here too).
            payload["chat_template_kwargs"] = kwargs
        if prompt.tools:
            payload["tools"] = prompt.tools
        id_fields = self.ids_for(endpoint).fields
        if id_fields and self.policy.allows("return_token_ids"):
            payload.update(id_fields)
        return payload
