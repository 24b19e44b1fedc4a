"""`--token-ids on|off|auto`: how each server gives the exact token ids of what it generated, if it can.

Every kind keeps streaming, so live token counts, time to first token and stall detection hold:
- vLLM streams them with `return_token_ids: true`: `choices[0].token_ids` on each chunk.
- SGLang 0.5.23 streams them with `return_input_ids_in_sglext` and `return_output_ids_in_sglext`: one
  chunk with no choices, after the finish chunk, carries `sglext.input_ids` and `sglext.output_ids`
  (client.fleet.servers.sglext; verified against the real server, tests/test_client_sglang.py). Its requests also
  ask for the per-request MTP and prefix-cache figures (`return_spec_tokens_details`,
  `return_cached_tokens_details`), which ride in the same chunk. (`return_token_ids` with `stream: true`
  is an HTTP 400 there.)
- Any other server gives none: `on` refuses to start rather than run without them.
Each kind's fields are its profile's `id_fields`, and how its replies carry the ids its `reply` dialect
(client.fleet.servers); the messages here name the kinds from the registry (client.fleet.kinds).

`auto` (the default) takes the ids wherever the server can give them; `off` asks for none. The preflight
request proves `on`: a server that answers it without ids stops the run (exit 2).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from client.core.errors import ConfigError
from client.core.payload import FieldPolicy, IdRequest
from client.fleet.kinds import OTHER, id_kinds, kind_named, kind_of, known_names, none_of_known
from client.fleet.profile import ServerProfile


class TokenIds(enum.StrEnum):
    AUTO = "auto"  # wherever a server can give them
    ON = "on"  # every server must; a reply without them is a failed attempt
    OFF = "off"  # never asked for


TOKEN_IDS_CHOICES = tuple(mode.value for mode in TokenIds)
_FIELD = "return_token_ids"


def effective_kind(detected: str | None, compat: str, policy: FieldPolicy) -> ServerProfile:
    """The kind whose id path a server takes: `--compat KIND` is the user's word for every server;
    a server not detected (down at start) is taken to be the run's kind."""
    forced = kind_named(compat)
    if forced is not None and forced.gives_token_ids:
        return forced
    found = kind_named(detected)
    if found is not None:
        return found
    named = kind_named(policy.name)
    return named if named is not None and named.gives_token_ids else OTHER


def ids_policy(policy: FieldPolicy, mode: str, kinds: Mapping[str, str]) -> FieldPolicy:
    """The field policy with `return_token_ids` as `--token-ids` wants it; ConfigError when `on` cannot be had.

    `kinds`: endpoint URL -> effective kind.
    """
    if mode == "off":
        return FieldPolicy(policy.extensions - {_FIELD}, policy.name)
    if mode == "auto":
        return policy
    without = sorted(url for url, kind in kinds.items() if not kind_of(kind).gives_token_ids)
    names = known_names()
    if without:
        raise ConfigError(f"--token-ids on: {', '.join(without)} is {none_of_known()} (as detected from "
                          "/v1/models owned_by and /server_info), and no other server kind returns the token ids "
                          f"it generated. Leave those endpoints out, pass --compat {names} if they are one, or "
                          "use --token-ids auto (ids where a server gives them) or off.")
    if policy.standard_only and not kinds:
        raise ConfigError("--token-ids on: no server was ready at start, so none could say what kind it is and "
                          "the run would send standard OpenAI fields only, without return_token_ids. Start once "
                          f"the servers are ready (their /health answers 200), or pass --compat {names} to name "
                          "their kind; or use --token-ids auto / off.")
    if policy.standard_only:
        raise ConfigError(f"--token-ids on needs the return_token_ids field, and --compat {OTHER.name} sends "
                          f"standard OpenAI fields only; pass --compat auto (or {known_names(' / ')}), or "
                          "--token-ids off.")
    return FieldPolicy(policy.extensions | {_FIELD}, policy.name)


def id_request(url: str, kind: ServerProfile, mode: str, policy: FieldPolicy) -> IdRequest:
    """Which fields this endpoint's requests carry to get the ids (none where it cannot give them).

    ConfigError under `on` for an endpoint whose kind is unknown: one that did not answer at start in a
    fleet that mixes kinds (an answering one of another kind was refused by `ids_policy`). It would join
    later and write its records without ids."""
    if mode == TokenIds.ON and not kind.gives_token_ids:
        raise ConfigError(f"--token-ids on: {url} was not ready at start, and this fleet mixes server "
                          "kinds, so how it would give token ids is unknown; its records would have none. Start "
                          f"once it is ready, leave it out of --endpoints, pass --compat {known_names()} if every "
                          "server is that kind, or use --token-ids auto (ids where a server gives them).")
    wants_ids = policy.allows(_FIELD) and mode != TokenIds.OFF
    return IdRequest(dict(kind.id_fields) if wants_ids else {}, required=mode == TokenIds.ON)


def describe(mode: str, requests: Sequence[IdRequest]) -> str:
    """One line for the start-up log: which endpoints are asked for the ids, and with which fields (what the
    records will carry follows the preflight: client.engine.fields.ids_outcome)."""
    by_fields: dict[str, int] = {}
    for request in requests:
        fields = ", ".join(request.fields)
        by_fields[fields] = by_fields.get(fields, 0) + 1
    parts = [f"{count} endpoint(s) asked for ids ({fields})" for fields, count in by_fields.items() if fields]
    if "" in by_fields:
        parts.append(f"{by_fields['']} not asked")
    return f"--token-ids {mode}: " + "; ".join(parts)


def no_ids_refusal(url: str, kind: str) -> ConfigError:
    """A preflight answer without the ids under `on`: where each known kind would have put them, and how to
    have one send them, from the registry."""
    givers = id_kinds()
    where = ", ".join(f"no {kind.ids_where}" for kind in givers if kind.ids_where)
    hints = "; ".join(kind.ids_hint for kind in givers if kind.ids_hint)
    return ConfigError(f"--token-ids on: {url} (server kind: {kind}) answered the preflight request without token "
                       f"ids ({where}), so the run would have no exact ids; nothing was sent. Use a server that "
                       f"streams them ({hints}; the simulated server with --tokenizer DIR, e.g. "
                       "--sim-arg=--tokenizer --sim-arg=DIR), or --token-ids auto / off to run without them.")
