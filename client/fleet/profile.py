"""What a kind of server is, as one value (`ServerProfile`): how it is recognised, which extension fields it
takes, how it gives token ids and counts a prompt, what to warn of at start, and its reply side (`reply`, a
client.wire.dialect.ReplyDialect: where its chunks carry ids and MTP figures, which metrics report its
load). Each kind the client knows is one module of client.fleet.servers; client.fleet.kinds registers them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from client.wire.dialect import PLAIN, ReplyDialect

if TYPE_CHECKING:
    from client.wire.endpoint import Endpoint

# What an extension set names for "the token-id fields of this kind" (its `id_fields`).
TOKEN_IDS_FIELD = "return_token_ids"


@dataclass(frozen=True, eq=False, slots=True)
class ServerProfile:
    """One kind of OpenAI-compatible server. Compared by identity: each kind is one registered value."""

    name: str  # the `--compat` value, the field policy's name, the kind named in logs
    label: str  # how messages name it ("SGLang", "vLLM")
    owned_by: tuple[str, ...] = ()  # `/v1/models` `owned_by` values that name this kind
    # An answer of `/server_info` that names this kind (asked when /v1/models named none).
    server_info: Callable[[Any], bool] | None = None
    # The extension fields it takes, beyond the OpenAI standard; `return_token_ids` stands for `id_fields`.
    extensions: frozenset[str] = frozenset()
    id_fields: Mapping[str, bool] = field(default_factory=dict)  # what a request carries to get its ids back
    count_path: str | None = None  # where it counts a chat prompt's tokens as it renders it (--train-window)
    # A start-up check that returns a warning to print (one line), or None; run when the prompts carry tools.
    tools_warning: Callable[[Endpoint], Awaitable[str | None]] | None = None
    reply: ReplyDialect = PLAIN  # how its replies carry ids and figures, and its load metrics (client.wire)
    aliases: tuple[str, ...] = ()  # other names it answers to (an older spelling)
    ids_hint: str = ""  # how to have it stream the ids, for the message of a run that got none

    def __str__(self) -> str:
        return self.name

    @property
    def gives_token_ids(self) -> bool:
        return bool(self.id_fields)

    @property
    def ids_where(self) -> str:
        """Where its replies carry the ids, for a message: `choices[0].token_ids`, `sglext ids`."""
        if self.reply.choice_ids:
            return f"choices[0].{self.reply.choice_ids}"
        return f"{self.reply.trailer} ids" if self.reply.trailer else ""
