"""The error tree is documented where people read it: client.core.errors' docstring draws every class, and
docs/data-contracts.md's `error_class` list names exactly the kinds a failure record can carry.

A failure record is written from an attempt of the request path (Endpoint.stream_chat), so its
`error_class` is the `kind` of any AttemptError but the three abstract bases and NotJSON, which only the
control plane's JSON documents raise (Endpoint.get_json).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from client.core import errors
from client.core.errors import AttemptError, NotJSON, PermanentError, RegenError, RetryableError

REPO = Path(__file__).resolve().parent.parent
NOT_IN_RECORDS = {AttemptError, RetryableError, PermanentError, NotJSON}


def subclasses(base: type[BaseException]) -> set[type[BaseException]]:
    found: set[type[BaseException]] = set()
    for cls in base.__subclasses__():
        if cls.__module__ == errors.__name__:
            found |= {cls} | subclasses(cls)
    return found


def documented_error_classes() -> set[str]:
    text = (REPO / "docs" / "data-contracts.md").read_text()
    start = text.index("`error_class` is the failed attempt's class")
    paragraph = text[start:text.index("A failed prompt is not done", start)]
    return {name for name in re.findall(r"`([A-Za-z_]+)`", paragraph)
            if name[0].isupper() or name in ("too_long", "fills_window")} - {"error_class"}


def test_the_contracts_list_every_kind_a_failure_record_can_carry() -> None:
    kinds = set()
    for cls in subclasses(AttemptError) - NOT_IN_RECORDS:
        kind = cls.__dict__.get("kind")
        kinds.add(kind.fget(None) if isinstance(kind, property) else cls.__name__)
    assert documented_error_classes() == kinds


def test_the_docstring_tree_draws_every_class() -> None:
    tree = errors.__doc__ or ""
    drawn = set(re.findall(r"[├└]── (\w+)", tree)) | {"RegenError"}
    defined = {node.name for node in ast.parse(Path(errors.__file__).read_text()).body
               if isinstance(node, ast.ClassDef)}
    assert drawn == defined == {cls.__name__ for cls in subclasses(RegenError)} | {"RegenError"}


@pytest.mark.parametrize(("error", "blames"), [
    (errors.ConnectFailed("x"), True), (errors.TLSCertificateError("x"), True), (errors.ServerError("x"), True),
    (errors.StreamDropped("x"), True), (errors.ProtocolError("x"), True), (errors.StreamStalled("x"), True),
    (errors.RateLimited("x", None), False), (errors.StreamErrorEvent("x"), False),
    (errors.MissingTokenIds("x"), False), (errors.RequestRejected("x", 400), False), (errors.TooLong("x", 400), False),
    (errors.NotJSON("x"), False),
])
def test_the_errors_that_blame_the_server(error: errors.AttemptError, blames: bool) -> None:
    """The dispatcher counts these against the endpoint's health (and a connection that fails at once)."""
    assert error.blames_server is blames
