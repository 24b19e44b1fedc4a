"""The loop detector: when a reply's tail repeats one block over and over. Pure (no I/O, no asyncio);
the layer just above client.core, the only one it may import; the stream (client.wire) and the offline tools
above it use it.

It owns the stream's loop stop rule (`STREAM_RULE`, armed past `stop_floor`; `RepetitionDetector` and
`TokenRepetitionDetector`, fed chunk by chunk) and the audit's loop finding (`TEXT_RULE`,
`find_repetition` / `find_token_repetition` over a whole reply, and `find_near_loop` for a reply cut at its
cap that never repeats a block exactly).

- `repetition`: the detectors and the whole-reply finders, the package's public names (`Repetition`,
  `RepetitionRule`, `Kind`, the rules, `stop_floor`); start here.
- `repetition_rule`: the rule's data (when a tail counts as a loop) and the stop's arming.
- `text_kind`: what a repeated block is (prose or structured) and its counters normalised.
- `period_search`: the period search under the detectors.
- `near_repeat`: loops that never repeat a block exactly (`find_near_loop`, `NearLoop`, `said_again`).
"""
