"""The kinds of server the client tells apart, registered once: each is a `ServerProfile` in its own module
of client.fleet.servers (how it is recognised, the extension fields it takes, where its token ids and prompt
counts are, what to warn of, and its reply dialect). Adding a kind: a module there, and one line in KNOWN.
Messages that name the kinds are built from KNOWN here, so they name a new kind without an edit.
"""

from __future__ import annotations

from client.fleet.profile import ServerProfile
from client.fleet.servers import openai, sglang, vllm
from client.wire.dialect import MetricNames

# Recognised in this order; OTHER (the plain kind, `openai`) is every server none of them names.
KNOWN: tuple[ServerProfile, ...] = (sglang.PROFILE, vllm.PROFILE)
OTHER = openai.PROFILE
# Kept for the names code and tests use.
SGLANG, VLLM = sglang.PROFILE, vllm.PROFILE


def kind_named(name: str | None) -> ServerProfile | None:
    """The kind a `--compat` value, a policy name or a detected name names (or an older name of it), if any."""
    return next((kind for kind in (*KNOWN, OTHER) if name == kind.name or name in kind.aliases), None)


def kind_of(name: str) -> ServerProfile:
    """The kind `name` names; OTHER for a name of no known kind."""
    return kind_named(name) or OTHER


def compat_choices() -> tuple[str, ...]:
    """What `--compat` takes: auto, each known kind, and the plain kind."""
    return ("auto", *(kind.name for kind in KNOWN), OTHER.name)


def known_names(joiner: str = "|") -> str:
    """The known kinds' names as a `--compat` value list: `sglang|vllm`."""
    return joiner.join(kind.name for kind in KNOWN)


def none_of_known() -> str:
    """`neither SGLang nor vLLM`: what a server of no known kind is not, in a message."""
    labels = [kind.label for kind in KNOWN]
    if len(labels) == 1:
        return f"not {labels[0]}"
    if len(labels) == 2:
        return f"neither {labels[0]} nor {labels[1]}"
    return f"none of {', '.join(labels[:-1])} and {labels[-1]}"


def id_kinds() -> list[ServerProfile]:
    """The known kinds that give token ids."""
    return [kind for kind in KNOWN if kind.gives_token_ids]


def metric_families() -> tuple[MetricNames, ...]:
    """Every known kind's `/metrics` families, tried in KNOWN's order (client.wire.loads)."""
    return tuple(kind.reply.metrics for kind in KNOWN if kind.reply.metrics is not None)
