"""The exit codes of `python -m client.run` (documented in its --help and the README)."""

from __future__ import annotations

EXIT_OK = 0  # every valid prompt is done
EXIT_FAILURES = 1  # the run ended but some prompts failed after all attempts
EXIT_CONFIG = 2  # bad options or an unusable fleet / --out; nothing sent
EXIT_INPUT = 3  # bad input under --strict
EXIT_SINK = 4  # results could not be written (disk full or read-only)
EXIT_SYNC_PENDING = 5  # the run ended but some segments are not in S3 yet
EXIT_INTERRUPTED = 130  # stopped by Ctrl-C or SIGTERM
