"""Command-line pieces every tool shares: value checkers that turn a bad option into a one-line
argparse error (exit 2, never a traceback), the options defined once for all tools, and shared defaults."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

# One default for every tool that talks to the fleet (the run, the estimate's calibration).
DEFAULT_MAX_IN_FLIGHT = 512

# A sampling seed goes out in the request's JSON: orjson cannot write an integer past 64 bits, and vLLM
# refuses one outside a signed 64-bit integer (torch.long), so that range is the one every server takes.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


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


def port_number(text: str) -> int:
    """A TCP port, 0 (any free one) to 65535."""
    value = _whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {value}")
    return value


def seed_number(text: str) -> int:
    """A sampling seed: a whole number in the signed 64-bit range (SEED_MIN..SEED_MAX)."""
    value = _whole(text)
    if not SEED_MIN <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be a whole number from {SEED_MIN} to {SEED_MAX} (signed 64-bit), "
                                         f"got {value}")
    return value


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


def add_s3_endpoint_url(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    group.add_argument("--s3-endpoint-url", metavar="URL",
                       help="an S3-compatible store (MinIO, Ceph, R2, ...) instead of AWS S3")
