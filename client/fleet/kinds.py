"""The kinds of server the client tells apart, defined once: what a server is decides which extension
fields it takes (client.fleet.preflight) and how it gives token ids (client.fleet.token_ids)."""

from __future__ import annotations

import enum


class ServerKind(enum.StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"
    OTHER = "other"  # any other OpenAI-compatible server: standard fields only

    @property
    def gives_token_ids(self) -> bool:
        return self is not ServerKind.OTHER

    @property
    def count_path(self) -> str | None:
        """Where this kind counts a chat prompt's tokens as it renders it (for --train-window)."""
        return _COUNT_PATHS.get(self)


# SGLang 0.5.23 and vLLM answer these with {"tokens", "count", "max_model_len"} for {"model", "messages",
# "tools", "chat_template_kwargs", "add_generation_prompt"}.
_COUNT_PATHS = {ServerKind.SGLANG: "/v1/tokenize", ServerKind.VLLM: "/tokenize"}


def kind_named(name: str | None) -> ServerKind | None:
    """The kind a `--compat` value or a policy name names, if it names one."""
    try:
        return ServerKind(name) if name is not None else None
    except ValueError:
        return None
