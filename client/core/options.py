"""Command-line pieces the client's tools share: the options defined once for all of them, shared defaults and
the sampling seed's range. The value checkers themselves (one-line argparse errors, never a traceback) live
in the `argchecks` package, which the launcher shares."""

from __future__ import annotations

import argparse

from argchecks import whole_in

# One default for every tool that talks to the fleet (the run, the estimate's calibration).
DEFAULT_MAX_IN_FLIGHT = 512

# A sampling seed goes out in the request's JSON: orjson cannot write an integer past 64 bits, and vLLM
# refuses one outside a signed 64-bit integer (torch.long), so that range is the one every server takes.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


seed_number = whole_in(SEED_MIN, SEED_MAX, "a whole number", " (signed 64-bit)")
"""A sampling seed: a whole number in the signed 64-bit range (SEED_MIN..SEED_MAX)."""


def add_s3_endpoint_url(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    group.add_argument("--s3-endpoint-url", metavar="URL",
                       help="an S3-compatible store (MinIO, Ceph, R2, ...) instead of AWS S3")
