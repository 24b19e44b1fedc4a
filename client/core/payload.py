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
from dataclasses import asdict, dataclass
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

    def recorded(self, policy: FieldPolicy | None = None) -> dict[str, Any]:
        """The sampling block of a ResultRecord: exactly the settings the policy lets out."""
        policy = policy or FieldPolicy.everything()
        sent = {key: value for key, value in asdict(self).items() if value is not None}
        for key in ("top_k", "min_p"):
            if key not in policy.extensions:
                sent.pop(key, None)
        if "chat_template_kwargs" not in policy.extensions:
            sent.pop("enable_thinking", None)
            sent.pop("preserve_thinking", None)
        elif not self.preserve_thinking:
            sent.pop("preserve_thinking", None)
        return sent


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


def build_payload(
    prompt: Prompt,
    messages: list[dict[str, Any]],
    settings: SamplingSettings,
    *,
    model: str,
    id_fields: Mapping[str, bool] | None = None,
    policy: FieldPolicy | None = None,
) -> dict[str, Any]:
    """`id_fields`: what this server's request carries to return the token ids (client.fleet.token_ids);
    sent only when the policy allows token ids."""
    policy = policy or FieldPolicy.everything()
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": ({"include_usage": True, "continuous_usage_stats": True}
                           if policy.allows("continuous_usage_stats") else {"include_usage": True}),
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "presence_penalty": settings.presence_penalty,
    }
    if settings.top_k is not None and policy.allows("top_k"):
        payload["top_k"] = settings.top_k
    if settings.min_p is not None and policy.allows("min_p"):
        payload["min_p"] = settings.min_p
    if policy.allows("chat_template_kwargs"):
        # A top-level field when posting raw JSON (the SDK's extra_body puts it here too).
        payload["chat_template_kwargs"] = {"enable_thinking": settings.enable_thinking}
        if settings.preserve_thinking:
            payload["chat_template_kwargs"]["preserve_thinking"] = True
    if prompt.tools:
        payload["tools"] = prompt.tools
    if settings.seed is not None:
        payload["seed"] = settings.seed
    if id_fields and policy.allows("return_token_ids"):
        payload.update(id_fields)
    return payload
