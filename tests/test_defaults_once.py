"""Each shared default is written once, in client.core.options, and read from there by argparse, the
configs and the wire layer: a literal default for one of these options or fields anywhere else in client/
is a second home for the same fact, and fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from client.core import options

CLIENT = Path(__file__).resolve().parent.parent / "client"
# option or field name -> the constant that holds its default
SHARED = {
    "slots": "DEFAULT_SLOTS", "idle_timeout": "DEFAULT_IDLE_TIMEOUT_S", "circuit_failures": "DEFAULT_CIRCUIT_FAILURES",
    "failure_threshold": "DEFAULT_CIRCUIT_FAILURES", "max_attempts": "DEFAULT_MAX_ATTEMPTS",
    "segment_age": "DEFAULT_SEGMENT_AGE_S", "max_segment_age_s": "DEFAULT_SEGMENT_AGE_S",
    "max_retry_after": "DEFAULT_MAX_RETRY_AFTER_S", "max_retry_after_s": "DEFAULT_MAX_RETRY_AFTER_S",
    "max_in_flight": "DEFAULT_MAX_IN_FLIGHT",
}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_a_shared_default_has_one_home(name: str) -> None:
    assert hasattr(options, SHARED[name])
    flag = "--" + name.replace("_", "-")
    literal = r"-?\d[\d_.]*"
    field = re.compile(rf"^\s*{name}: \w+ = {literal}\b", re.MULTILINE)  # a dataclass field or a parameter
    argument = re.compile(rf"add_argument\(\"{flag}\"[^)]*default={literal}\b")
    parameter = re.compile(rf"\b{name}: \w+ = {literal}[,)]")
    found = [f"{path.relative_to(CLIENT.parent)}" for path in CLIENT.rglob("*.py")
             for pattern in (field, argument, parameter) if pattern.search(path.read_text())]
    assert found == [], f"{name}'s default is written out in {found}; read {SHARED[name]} from client.core.options"
