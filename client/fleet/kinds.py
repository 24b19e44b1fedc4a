"""The kinds of server the client tells apart, registered once: each is a `ServerProfile` in its own module
of client.fleet.servers (how it is recognised, the extension fields it takes, where its token ids and prompt
counts are, what to warn of). Adding a kind: a module there, and one line in KNOWN.
"""

from __future__ import annotations

from client.fleet.profile import ServerProfile
from client.fleet.servers import openai, sglang, vllm

# Recognised in this order; OTHER is every server none of them names.
KNOWN: tuple[ServerProfile, ...] = (sglang.PROFILE, vllm.PROFILE)
OTHER = openai.PROFILE
# Kept for the names code and tests use.
SGLANG, VLLM = sglang.PROFILE, vllm.PROFILE


def kind_named(name: str | None) -> ServerProfile | None:
    """The kind a `--compat` value, a policy name or a detected name names, if it names one."""
    return next((kind for kind in (*KNOWN, OTHER) if kind.name == name), None)


def kind_of(name: str) -> ServerProfile:
    """The kind `name` names; OTHER for a name of no known kind."""
    return kind_named(name) or OTHER
