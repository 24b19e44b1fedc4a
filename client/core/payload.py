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
from dataclasses import asdict, dataclass, field
from typing import Any

from client.core.records import Prompt


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """Defaults follow Qwen3's recommended thinking-mode sampling."""

    max_tokens: int = 8192
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int | None = 20  # None: not sent
    min_p: float | None = 0.0  # None: not sent
    presence_penalty: float = 0.0
    seed: int | None = None
    enable_thinking: bool = True
    preserve_thinking: bool = False  # keep earlier turns' reasoning in multi-turn history (Qwen3.6 template)


EXTENSION_FIELDS = ("top_k", "min_p", "chat_template_kwargs", "return_token_ids", "continuous_usage_stats")


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
        return cls(frozenset(), "openai")

    def allows(self, field: str) -> bool:
        return field in self.extensions


def request_messages(prompt: Prompt) -> list[dict[str, Any]]:
    messages = prompt.messages
    if messages and messages[-1].get("role") == "assistant":
        return messages[:-1]
    return messages


# The sampling fields that ride at the payload's top level; enable_thinking and preserve_thinking go in
# chat_template_kwargs. Both come from one `sampling_block`, so a record's `sampling` is what was sent.
_TOP_LEVEL = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "seed")


def sampling_block(settings: SamplingSettings, policy: FieldPolicy) -> dict[str, Any]:
    """The settings the policy lets out, as a ResultRecord's `sampling` records them."""
    sent = {key: value for key, value in asdict(settings).items() if value is not None}
    for key in ("top_k", "min_p"):
        if not policy.allows(key):
            sent.pop(key, None)
    if not policy.allows("chat_template_kwargs"):
        sent.pop("enable_thinking", None)
        sent.pop("preserve_thinking", None)
    elif not settings.preserve_thinking:
        sent.pop("preserve_thinking", None)
    return sent


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
    """What every request of a run carries, settled once at start: the model, the settings, the field policy
    and each endpoint's token-id fields (by endpoint index). The payload and the recorded sampling both
    derive from `sampling`."""

    model: str
    settings: SamplingSettings
    policy: FieldPolicy
    ids: tuple[IdRequest, ...] = ()
    # Where each endpoint counts a prompt's tokens as it renders it (SGLang `/v1/tokenize`, vLLM `/tokenize`;
    # None where it cannot), for --train-window.
    count_paths: tuple[str | None, ...] = ()
    sampling: dict[str, Any] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sampling", sampling_block(self.settings, self.policy))

    def ids_for(self, endpoint: int) -> IdRequest:
        return self.ids[endpoint] if endpoint < len(self.ids) else _NO_IDS

    def _template_kwargs(self) -> dict[str, bool] | None:
        """`chat_template_kwargs` as the policy lets them out (None: not sent)."""
        if "enable_thinking" not in self.sampling:
            return None
        kwargs = {"enable_thinking": bool(self.sampling["enable_thinking"])}
        if self.sampling.get("preserve_thinking"):
            kwargs["preserve_thinking"] = True
        return kwargs

    def count_path(self, endpoint: int) -> str | None:
        return self.count_paths[endpoint] if endpoint < len(self.count_paths) else None

    def count_request(self, prompt: Prompt, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The tokenize request that renders `messages` as the chat request would (tools, thinking). No
        `add_generation_prompt`: SGLang renders a request without it exactly as a chat completion, and vLLM
        adds the generation prompt by default."""
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        if prompt.tools:
            request["tools"] = prompt.tools
        kwargs = self._template_kwargs()
        if kwargs is not None:
            request["chat_template_kwargs"] = kwargs
        return request

    def payload(self, prompt: Prompt, messages: list[dict[str, Any]], endpoint: int,
                max_tokens: int | None = None) -> dict[str, Any]:
        """The request for `prompt` to the endpoint with index `endpoint`; `max_tokens` below the run's
        (the training window's room) replaces it in this request only."""
        sampling = self.sampling
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": ({"include_usage": True, "continuous_usage_stats": True}
                               if self.policy.allows("continuous_usage_stats") else {"include_usage": True}),
        }
        payload.update((key, sampling[key]) for key in _TOP_LEVEL if key in sampling)
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        kwargs = self._template_kwargs()
        if kwargs is not None:
            # A top-level field when posting raw JSON (the SDK's extra_body puts it here too).
            payload["chat_template_kwargs"] = kwargs
        if prompt.tools:
            payload["tools"] = prompt.tools
        id_fields = self.ids_for(endpoint).fields
        if id_fields and self.policy.allows("return_token_ids"):
            payload.update(id_fields)
        return payload
