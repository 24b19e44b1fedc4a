"""The exit codes of every tool (`client.run`, `client.export`, `client.audit`, `client.estimate`,
`client.status`), one scheme, defined once. Each tool says in its `--help` which of its cases fall under
each code; docs/exit-codes.md has the table.

    0    done: the job is whole
    1    done, with a problem the report names: prompts failed, records left out, the data is broken,
         no projection could be made
    2    nothing done: bad options, an unusable input, fleet or output; the message says what to change
    3    not done, by design: refused (--strict input, --require-exact-ids, a template that drifts) or
         incomplete (prompts without results, a stale shard); the message says what to run
    4    no room: a disk is full (or a quota, or a file size limit); free space and run it again
    5    done locally, but some results are not in S3 yet; run it again to upload them
    130  stopped by Ctrl-C or SIGTERM

`code_for` is the one map from the error that ended a tool to its code, applied at every tool's entry
(client.core.entry): a tool's `main` returns the codes of its outcomes (0, 1, 3, 5) and raises the rest.
"""

from __future__ import annotations

from client.core.errors import InputError, RegenError, SinkError, no_room

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_NOT_DONE = 3
EXIT_NO_ROOM = 4
EXIT_SYNC_PENDING = 5
EXIT_INTERRUPTED = 130


# The one map from what ended a tool to its code: the first class that matches wins (a ConfigError that is also
# a ConnectFailed, like TLSCertificateError, is a 2). Every tool's entry applies it (client.core.entry).
_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (KeyboardInterrupt, EXIT_INTERRUPTED),
    (SinkError, EXIT_NO_ROOM),
    (InputError, EXIT_NOT_DONE),
    (RegenError, EXIT_USAGE),
)


def code_for(exc: BaseException) -> int | None:
    """The exit code of a tool that `exc` ended: the error tree's (client.core.errors), and for an OSError no
    class claimed, 4 when it says there is no room (a full disk, a quota, a file size limit), else 2. None
    for anything else: a bug, which keeps its traceback."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, OSError):
        return EXIT_NO_ROOM if no_room(exc) else EXIT_USAGE
    return None


def message_for(exc: BaseException) -> str:
    """The one line said for `exc` (an error the map handles, not an interrupt)."""
    if isinstance(exc, InputError):
        return f"error: bad input: {exc}"
    if isinstance(exc, RegenError):
        return f"error: {exc}"
    assert isinstance(exc, OSError)
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    advice = "; free space and run it again" if no_room(exc) else ""
    return f"error: {where}{exc.strerror or exc}{advice}"
