"""PromptRecord + settings -> the chat-completions payload, and the sampling block recorded with results.

If the prompt's last message is an assistant turn, that turn is the one being regenerated: it is dropped
from the request (and from the recorded messages) so the model writes it anew.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from client.core.records import Prompt


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """Defaults follow Qwen3's recommended thinking-mode sampling."""

    max_tokens: int = 8192
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    enable_thinking: bool = True
    preserve_thinking: bool = False  # keep earlier turns' reasoning in multi-turn history (Qwen3.6 template)

    def recorded(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


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
    return_token_ids: bool = False,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": settings.max_tokens,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "top_k": settings.top_k,
        "min_p": settings.min_p,
        "presence_penalty": settings.presence_penalty,
        # A top-level field when posting raw JSON (the SDK's extra_body puts it here too).
        "chat_template_kwargs": {"enable_thinking": settings.enable_thinking},
    }
    if settings.preserve_thinking:
        payload["chat_template_kwargs"]["preserve_thinking"] = True
    if prompt.tools:
        payload["tools"] = prompt.tools
    if settings.seed is not None:
        payload["seed"] = settings.seed
    if return_token_ids:
        # Only for engines that stream ids in chat (vLLM); SGLang answers HTTP 400 to this field.
        payload["return_token_ids"] = True
    return payload
