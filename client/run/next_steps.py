"""The end of a run's summary: where its output is, and the commands that come next.

After the counts (client.run.summary), a run names its output folder with the records it holds, says when
records came back without the servers' token ids although `--token-ids auto` asked for them, and prints
the next commands, ready to paste: the audit, the export (with `--tokenizer sim` when the fleet was the
simulated one, whose tokenizer that names), and the status.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from client.run.console import say


@dataclass(frozen=True, slots=True)
class RunOutput:
    out: Path
    records: int  # every record under --out: this run's and the earlier runs'
    written: int  # this run's
    without_ids: int  # this run's records without token ids, loops apart
    token_ids: str  # the --token-ids mode
    simulated: bool
    failures: Path


def next_commands(out: Path, *, simulated: bool) -> list[tuple[str, str]]:
    """(command, what it is for), for the run whose results are in `out`."""
    where = shlex.quote(str(out))
    target = shlex.quote(str(out.parent / f"{out.name}.parquet"))
    tokenizer = "sim" if simulated else "MODEL_DIR"
    return [(f"python -m client.audit {where}", "is the data real?"),
            (f"python -m client.export {where} --tokenizer {tokenizer} --out {target}", "the training set"),
            (f"python -m client.status {where}", "where the run stands")]


def print_next_steps(output: RunOutput, *, interrupted: bool) -> None:
    failures = f"; failures in {output.failures}" if output.failures.exists() else ""
    say(f"output: {output.out} holds {output.records:,} record(s) in segments/ ({output.written:,} written by this "
        f"run){failures}")
    if output.token_ids == "auto" and output.without_ids:
        say(f"note: {output.without_ids:,} of this run's {output.written:,} record(s) came back without token ids "
            "(--token-ids auto asked; the server did not give them): client.export re-renders their text with "
            "--tokenizer and checks it against the servers' token counts")
    if interrupted:
        return
    commands = next_commands(output.out, simulated=output.simulated)
    width = max(len(command) for command, _ in commands)
    say("next:")
    for command, purpose in commands:
        say(f"  {command:<{width}}  # {purpose}")
    if not output.simulated:
        say("  (MODEL_DIR: the served model's tokenizer.json and tokenizer_config.json, e.g. its Hugging Face "
            "folder)")
