"""The exit codes of `python -m client.run` (documented in its --help and docs/exit-codes.md): the one scheme of
client.core.exit_codes, named for the run's cases."""

from __future__ import annotations

from client.core.exit_codes import (
    EXIT_INTERRUPTED,
    EXIT_NO_ROOM,
    EXIT_NOT_DONE,
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_SYNC_PENDING,
    EXIT_USAGE,
)

__all__ = ["EXIT_CONFIG", "EXIT_FAILURES", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SINK",
           "EXIT_SYNC_PENDING"]

EXIT_FAILURES = EXIT_PROBLEM  # the run ended but some prompts failed after all attempts
EXIT_CONFIG = EXIT_USAGE  # bad options or an unusable fleet / --out; nothing sent
EXIT_INPUT = EXIT_NOT_DONE  # bad input under --strict
EXIT_SINK = EXIT_NO_ROOM  # results could not be written (disk full or read-only)
