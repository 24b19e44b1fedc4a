"""The stream's loop stop as client.wire.endpoint runs it, over a whole text: for the precision tests and
bench.loop_precision. The reply streams in chunks of `chunk` characters, `chars_per_token` characters a
token; the detector (the stream rule) is armed once the tokens reach `stop_floor(max_tokens)`; the reply
ends at max_tokens (finish_reason length) if nothing stopped it first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from client.loops.repetition import STREAM_RULE, RepetitionDetector, stop_floor


@dataclass(frozen=True, slots=True)
class Streamed:
    stop: int | None  # characters fed when the loop stop fired, else None
    chars: int  # characters the reply streamed (cut at max_tokens when it is longer)
    kind: str  # the kind of loop the stop found


def stream(text: str, max_tokens: int, *, chars_per_token: float = 4.0, chunk: int = 4) -> Streamed:
    """The reply as the stream would see it under this budget."""
    room = min(len(text), math.floor(max_tokens * chars_per_token))
    arm_at = stop_floor(max_tokens) * chars_per_token
    watch = RepetitionDetector(STREAM_RULE, armed=False)
    for i in range(0, room, chunk):
        end = min(room, i + chunk)
        if not watch.armed and end >= arm_at:
            watch.armed = True
        found = watch.feed(text[i:end])
        if found is not None:
            return Streamed(end, end, found.kind)
    return Streamed(None, room, "")
