"""CPU per streamed chunk of the loop detector (client/loops/repetition.py), against a no-op in the same run.

A stream's watcher would call `RepetitionDetector.feed` once per chunk, so the figure that matters is what
it adds per chunk on top of what the client already spends (bench.client_cost: 5.7-15 us per chunk).
Each case feeds the same chunks to (a) a no-op `feed` of the same shape, the baseline, and (b) the
detector, and reports ns per chunk, the ratio, and the time added per chunk. Inputs: a long simulated
reply (simulator's word pieces) in chunks of 1 and of 4 pieces (one token per chunk, and MTP), its token
ids (each piece's index, spread over a 250K vocabulary) with the token rule, and worst cases for the check,
replies that repeat without looping: a table whose rows differ only in their digits (checks find candidate
periods and compare), numbered lines of prose in stretches of ~10,000 characters between short paragraphs
(the counter test runs and normalises text, short of its 16,384-character floor), and base64 of zero bytes
in stretches of 23,000 characters (exact repeats, short of the 32,768-character floor). And the stream stop
as client.wire.endpoint runs it: the stream rule not armed (a reply below 90% of its max_tokens: the window
is kept, never searched) and armed.

    python -m bench.repetition [--pieces 200000] [--rounds 15] [--out docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.report import emit
from client.loops.repetition import STREAM_RULE, RepetitionDetector, TokenRepetitionDetector
from simulator.text import VOCAB


class _NoOp:
    """The baseline: a call of the same shape that does nothing."""

    __slots__ = ()

    def feed(self, text: str) -> None:
        return None

    def feed_ids(self, ids: Sequence[int]) -> None:
        return None



def _best_of(baseline: Callable[[], object], detector: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Best time of each, in rounds that alternate the two so that a noisy neighbour hits both alike."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for i, run in enumerate((baseline, detector)):
            start = time.perf_counter_ns()
            run()
            best[i] = min(best[i], time.perf_counter_ns() - start)
    return best[0], best[1]


def _text_case(chunks: list[str], rounds: int, make: Callable[[], RepetitionDetector] = RepetitionDetector
               ) -> tuple[float, float]:
    def baseline() -> None:
        feed = _NoOp().feed
        for chunk in chunks:
            feed(chunk)

    def detector() -> None:
        feed = make().feed
        for chunk in chunks:
            if feed(chunk) is not None:
                raise SystemExit("the detector fired on a reply that does not loop")

    base, found = _best_of(baseline, detector, rounds)
    return base / len(chunks), found / len(chunks)


def _ids_case(chunks: list[list[int]], rounds: int) -> tuple[float, float]:
    def baseline() -> None:
        feed = _NoOp().feed_ids
        for chunk in chunks:
            feed(chunk)

    def detector() -> None:
        feed = TokenRepetitionDetector().feed
        for chunk in chunks:
            if feed(chunk) is not None:
                raise SystemExit("the detector fired on ids that do not loop")

    base, found = _best_of(baseline, detector, rounds)
    return base / len(chunks), found / len(chunks)


def _grouped(items: Sequence[str], size: int) -> list[str]:
    return ["".join(items[i:i + size]) for i in range(0, len(items), size)]


def _stretches(make: Callable[[int], str], pieces: Sequence[str], chars: int) -> list[str]:
    """Stretches make(0), make(1), ... with 80 word pieces of prose after each, in chunks of 5 characters,
    about `chars` characters in all."""
    out, size, i = [], 0, 0
    while size < chars:
        part = make(i) + "".join(pieces[80 * i:80 * i + 80])
        out.append(part)
        size += len(part)
        i += 1
    text = "".join(out)
    return [text[k:k + 5] for k in range(0, len(text), 5)]


def _numbered(i: int) -> str:
    return "".join(f"Take case {n} down and check it against the cache, then pass it around.\n"
                   for n in range(100 + i, 240 + i))


def _zero_base64(_: int) -> str:
    return ("A" * 76 + "\n") * 300


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.repetition", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pieces", type=int, default=200_000, help="word pieces of the reply (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=15,
                        help="timed rounds per case, best kept (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="append the table to this file")
    args = parser.parse_args(argv)
    rng = random.Random(0)
    index = {piece: i for i, piece in enumerate(VOCAB)}
    pieces = rng.choices(VOCAB, k=args.pieces)
    ids = [index[p] * 997 + rng.randrange(997) for p in pieces]  # spread over a 250K-like vocabulary
    table_rows = [f"| {i:05d} | {rng.random():.3f} | {rng.randint(0, 999):03d} | ok |\n"
                  for i in range(args.pieces // 6)]
    table_chunks = [chunk for row in table_rows for chunk in (row[:12], row[12:])]
    chars = sum(map(len, table_chunks))
    cases: list[tuple[str, float, float]] = [
        ("reply text, 1 piece per chunk", *_text_case(pieces, args.rounds)),
        ("reply text, 4 pieces per chunk (MTP)", *_text_case(_grouped(pieces, 4), args.rounds)),
        ("the stream stop below 90% of max_tokens (not armed), 1 piece per chunk",
         *_text_case(pieces, args.rounds, lambda: RepetitionDetector(STREAM_RULE, armed=False))),
        ("the stream stop past 90% of max_tokens (armed), 1 piece per chunk",
         *_text_case(pieces, args.rounds, lambda: RepetitionDetector(STREAM_RULE))),
        ("token ids, 1 id per chunk", *_ids_case([[i] for i in ids], args.rounds)),
        ("token ids, 4 ids per chunk (MTP)", *_ids_case([ids[i:i + 4] for i in range(0, len(ids), 4)], args.rounds)),
        ("worst case: a numeric table, ~14 chars per chunk", *_text_case(table_chunks, args.rounds)),
        ("worst case: numbered prose under the counter floor, 5 chars per chunk",
         *_text_case(_stretches(_numbered, pieces, chars), args.rounds)),
        ("worst case: zero-byte base64 under the structured floor, 5 chars per chunk",
         *_text_case(_stretches(_zero_base64, pieces, chars), args.rounds)),
    ]
    lines = ["| input | no-op (ns/chunk) | detector (ns/chunk) | ratio | added per chunk (ns) "
             "| added vs 5.7 us/chunk |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, base, detector in cases:
        added = detector - base
        lines.append(f"| {name} | {base:.0f} | {detector:.0f} | {detector / base:.1f}x | {added:.0f} | "
                     f"{added / 5700:.1%} |")
    emit(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
