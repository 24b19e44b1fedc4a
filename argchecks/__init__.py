"""Command-line value checkers shared by every tool of the project: the client's tools, the launcher's
planner and the simulated server. Each turns a bad option value into a one-line argparse error (exit 2,
never a traceback) that says what was expected and what was given.

This package sits beside `client`, `launch` and `prompts` and imports none of them (an import-linter
contract), so the launcher, which may not depend on the client, shares these checkers instead of keeping
copies of its own.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "float_in",
    "non_empty_path",
    "non_negative_float",
    "non_negative_int",
    "port_number",
    "positive_float",
    "positive_int",
    "share",
    "whole_in",
]


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def positive_int(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def whole_in(low: int, high: int, what: str = "a whole number", note: str = "") -> Callable[[str], int]:
    """A checker for a whole number in [low, high]; `what` names it in the message, `note` follows the range."""

    def check(text: str) -> int:
        value = _whole(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {what} from {low} to {high}{note}, got {value}")
        return value

    return check


port_number = whole_in(0, 65535, "a port")
"""A TCP port, 0 (any free one) to 65535."""


def non_empty_path(text: str) -> str:
    """A path that names something: `""` would be read as the current directory (pathlib makes it `.`)."""
    if not text:
        raise argparse.ArgumentTypeError("must name a directory, got an empty path (give e.g. runs/first, or . "
                                         "for the current directory)")
    return text


def positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def float_in(low: float, high: float) -> Callable[[str], float]:
    """A checker for a number in [low, high]."""

    def check(text: str) -> float:
        value = _number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text}")
        return value

    return check


share = float_in(0.0, 1.0)
"""A share of something (a rate per request, a fraction): a number from 0 to 1."""
