"""A reply's usage at any point, in the tokens it sends: what the chat handlers (simulator.app) stream and count."""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator import wire


@dataclasses.dataclass(frozen=True)
class Tally:
    """Usage at any point of a reply, counted in the tokens the reply sends (its ids with a tokenizer, the
    script's word pieces without): the engine paces and counts the same tokens, so a server's counters, its
    pace and its usage agree token for token, as a real server's do. `target` is the reply's length in
    script positions, which the text is cut by; `position` maps sent tokens onto it."""

    prompt: int
    completion: int
    reasoning: int
    target: int  # script positions of the whole reply

    @property
    def tokens(self) -> int:
        """What the engine generates for this reply (a reply of no ids still takes its script's steps)."""
        return self.completion if self.completion > 0 else self.target

    def position(self, tokens: int) -> int:
        """The script position reached once `tokens` of the reply are out (the whole reply at the end)."""
        return min(self.target, tokens * self.target // self.tokens) if self.tokens else 0

    def at(self, tokens: int) -> dict[str, Any]:
        done = min(tokens, self.completion)
        return wire.usage(self.prompt, done, min(done, self.reasoning))

    @property
    def final(self) -> dict[str, Any]:
        return wire.usage(self.prompt, self.completion, self.reasoning)
