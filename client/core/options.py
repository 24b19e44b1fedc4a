"""Command-line pieces the client's tools share: the options defined once for all of them, shared defaults and
the sampling seed's range. The value checkers themselves (one-line argparse errors, never a traceback) live
in the `argchecks` package, which the launcher shares."""

from __future__ import annotations

import argparse

from argchecks import whole_in

# The defaults every tool that talks to the fleet shares (the run, the estimate's calibration), defined once:
# argparse, the configs and the wire layer read them from here.
DEFAULT_MAX_IN_FLIGHT = 512
DEFAULT_SLOTS = 32  # decode slots assumed for a server that does not report them
DEFAULT_IDLE_TIMEOUT_S = 300.0  # a stream with no progress this long is dropped and retried
DEFAULT_CIRCUIT_FAILURES = 3  # failures in a row that take an endpoint out of rotation
DEFAULT_MAX_ATTEMPTS = 6  # attempts per prompt before it is written as a failure
DEFAULT_SEGMENT_AGE_S = 300.0  # a result segment older than this is closed (and, with --s3, uploaded)
DEFAULT_MAX_RETRY_AFTER_S = 300.0  # the longest Retry-After honoured

# A sampling seed goes out in the request's JSON: orjson cannot write an integer past 64 bits, and vLLM
# refuses one outside a signed 64-bit integer (torch.long), so that range is the one every server takes.
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


seed_number = whole_in(SEED_MIN, SEED_MAX, "a whole number", " (signed 64-bit)")
"""A sampling seed: a whole number in the signed 64-bit range (SEED_MIN..SEED_MAX)."""


# Each simulated server is a Python process of about 50 MB resident; 64 of them (some 3 GB) is what a
# laptop or a CI runner holds, and more than any test of balancing needs. Without a bound, --simulate 100000
# starts processes until memory runs out.
MAX_SIMULATED = 64

simulated_servers = whole_in(1, MAX_SIMULATED, "a number of simulated servers",
                             " (each one is a process of about 50 MB on this machine)")
"""--simulate N: how many simulated servers to start, 1..MAX_SIMULATED."""


def add_s3_endpoint_url(group: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    group.add_argument("--s3-endpoint-url", metavar="URL",
                       help="an S3-compatible store (MinIO, Ceph, R2, ...) instead of AWS S3")
