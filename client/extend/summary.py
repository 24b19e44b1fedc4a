"""What an extension did, counted as it goes and said at its end: records by verdict, the tokens kept from
the finished run and those generated now, against what generating the same replies again would cost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from client.core.human_out import note as say
from client.extend.select import Verdict


@dataclass
class Tally:
    verdicts: Counter[Verdict] = field(default_factory=Counter)
    finished: Counter[str] = field(default_factory=Counter)  # continued replies by their new finish reason
    already: int = 0  # records --out held before this run (a resume)
    kept_tokens: int = 0  # the continued replies' ids that came from the finished run
    generated_tokens: int = 0  # the ids generated now
    failed: int = 0
    read_all: bool = False

    @property
    def continued(self) -> int:
        return sum(self.finished.values())

    def progress_line(self) -> str:
        queued = self.verdicts[Verdict.CONTINUE]
        carried = sum(n for verdict, n in self.verdicts.items() if verdict is not Verdict.CONTINUE)
        return (f"extend: {self.continued:,} of {queued:,}{'' if self.read_all else '+'} cut replies continued, "
                f"{self.generated_tokens:,} tokens generated, {carried:,} records carried over, "
                f"{self.failed:,} failed")


def print_summary(tally: Tally, out: Path, *, interrupted: bool) -> None:
    say("")
    say(f"extension {'stopped' if interrupted else 'done'}: {out}")
    if tally.already:
        say(f"  {tally.already:,} record(s) were already there (an earlier run of this extension)")
    for verdict in Verdict:
        count = tally.verdicts[verdict]
        if count:
            say(f"  {count:>9,}  {verdict.value}")
    if tally.continued:
        ends = ", ".join(f"{n:,} {reason}" for reason, n in tally.finished.most_common())
        say(f"  continued {tally.continued:,} repl(ies) ({ends}): {tally.kept_tokens:,} tokens kept from the "
            f"finished run, {tally.generated_tokens:,} generated now; generating them again from token 0 "
            f"would have cost {tally.kept_tokens + tally.generated_tokens:,}")
    if tally.verdicts[Verdict.NO_IDS]:
        say(f"  warning: {tally.verdicts[Verdict.NO_IDS]:,} cut repl(ies) have no token ids and were carried over as "
            "they were; only a run with --token-ids on can be extended exactly")
    if tally.failed:
        say(f"  {tally.failed:,} repl(ies) could not be continued (see {out}/failures); run the same command "
            "again to try them again")
