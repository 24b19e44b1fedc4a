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
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2
EXIT_NOT_DONE = 3
EXIT_NO_ROOM = 4
EXIT_SYNC_PENDING = 5
EXIT_INTERRUPTED = 130
