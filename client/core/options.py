"""Command-line pieces the client's tools share: the options defined once for all of them, shared defaults and
the sampling seed's range. The value checkers themselves (one-line argparse errors, never a traceback) live
in the `argchecks` package, which the launcher shares."""

from __future__ import annotations

import argparse
import os

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


# The run a tool reads is named one way in every tool: as its first argument (RUN), a local --out directory or
# an S3 prefix, told apart by `s3://`; `--out DIR` and `--s3 s3://BUCKET/PREFIX` say the same, as client.run
# and client.status spell them, so a command carried over from one tool to another works.
RUN_FORMS = "RUN (a run's --out directory or s3://BUCKET/PREFIX), or --out DIR, or --s3 s3://BUCKET/PREFIX"


def add_run_location(parser: argparse.ArgumentParser, what: str) -> None:
    """The positional RUN and its two option forms; `what` is RUN's help (what the tool reads there)."""
    parser.add_argument("run", nargs="?", metavar="RUN", help=what)
    parser.add_argument("--out", dest="run_out", metavar="DIR",
                        help="the same as RUN, a local --out directory (as client.run names it)")
    parser.add_argument("--s3", dest="run_s3", metavar="s3://BUCKET/PREFIX",
                        help="the same as RUN, the S3 prefix the run syncs to (as client.run names it)")


def run_location(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The run that RUN, --out or --s3 names; exactly one of them, else a one-line error that shows the forms."""
    given = [value for value in (args.run, args.run_out, args.run_s3) if value]
    if not given:
        parser.error(f"which run? Name it as {RUN_FORMS}")
    if len({same_run_key(value) for value in given}) > 1:
        parser.error(f"the run is named {len(given)} times, differently ({', '.join(given)}); name it once: "
                     f"{RUN_FORMS}")
    if args.run_out and args.run_out.startswith("s3://"):
        parser.error(f"--out takes a local directory; for {args.run_out} write --s3 {args.run_out}")
    if args.run_s3 and not args.run_s3.startswith("s3://"):
        parser.error(f"--s3 takes s3://BUCKET/PREFIX; for a local directory write --out {args.run_s3}")
    return str(given[0])


def same_run_key(location: str) -> str:
    """What tells two spellings of one run apart from two runs: `runs/demo` and `runs/demo/` (or `./runs/demo`)
    are one directory, `s3://b/p` and `s3://b/p/` one prefix; a run named twice the same way is named once."""
    if location.startswith("s3://"):
        return location.rstrip("/")
    return os.path.normpath(os.path.abspath(location))
