"""How a duration reads to a person, the same in the console, the summary, the estimate and the status."""

from __future__ import annotations


def format_duration(seconds: float | None) -> str:
    """`42s`, `3m07s`, `5h02m`, `2d03h15m`; `?` when unknown. Negative durations read as 0s."""
    if seconds is None:
        return "?"
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h{minutes:02d}m"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
