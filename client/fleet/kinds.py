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


def kind_named(name: str | None) -> ServerKind | None:
    """The kind a `--compat` value or a policy name names, if it names one."""
    try:
        return ServerKind(name) if name is not None else None
    except ValueError:
        return None
