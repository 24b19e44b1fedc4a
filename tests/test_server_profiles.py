"""A kind of server is one value (`ServerProfile`) in one module, registered by one line (client.fleet.kinds):
what it is recognised by, the fields it takes, its ids and its count follow from that value alone.

Here a kind the client does not ship (a llama.cpp-style server that says `owned_by: llamacpp` and takes
`top_k`) is added the way a new module would add it, and an odd server that names it is detected as it, gets
its field set, and no token ids."""

from __future__ import annotations

from typing import Any

import pytest

from client.core.payload import FieldPolicy
from client.fleet import kinds
from client.fleet.kinds import KNOWN, OTHER, kind_named
from client.fleet.preflight import detect_kind, field_policy
from client.fleet.profile import ServerProfile
from client.fleet.token_ids import effective_kind, id_request
from client.wire.endpoint import Endpoint

LLAMACPP = ServerProfile(name="llamacpp", label="llama.cpp", owned_by=("llamacpp",), extensions=frozenset({"top_k"}))


@pytest.mark.parametrize(("name", "label", "ids", "count"), [
    ("sglang", "SGLang", True, "/v1/tokenize"),
    ("vllm", "vLLM", True, "/tokenize"),
    ("openai", "an OpenAI-compatible server", False, None),
    ("other", "an OpenAI-compatible server", False, None),  # the plain kind's older name still names it
])
def test_each_shipped_kind_is_one_value(name: str, label: str, ids: bool, count: str | None) -> None:
    kind = kind_named(name)
    assert kind is not None and kind.label == label
    assert kind.gives_token_ids is ids and kind.count_path == count
    assert (kind in KNOWN) is (kind is not OTHER)


async def test_a_kind_added_by_one_registration_line(servers: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "KNOWN", (*KNOWN, LLAMACPP))  # the one line a new module adds to KNOWN
    server = servers.oddserver("normal", extra=("--owned-by", "llamacpp"))
    endpoint = Endpoint(server.url, max_in_flight=1)
    try:
        detected = await detect_kind(endpoint)
    finally:
        await endpoint.aclose()
    assert detected == "llamacpp"
    policy = field_policy("auto", [detected])
    assert policy == FieldPolicy(frozenset({"top_k"}), "llamacpp")
    assert field_policy("llamacpp", []) == policy  # --compat takes its name too
    kind = effective_kind(detected, "auto", policy)
    assert kind is LLAMACPP and kind.count_path is None
    assert not id_request(server.url, kind, "auto", policy).fields
