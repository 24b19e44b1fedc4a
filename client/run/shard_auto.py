"""`--shard K/N|auto` and `--shard-count N` -> this run's Shard, and a line saying where it came from.

The environment is read by the pure `client.core.shard_env`; this module turns its answer (or its
refusal) into the run's `Shard` and a `ConfigError` (exit 2), and logs the choice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from client.core.errors import ConfigError, ShardEnvError
from client.core.shard_env import shard_from_env
from client.local.source import Shard


def resolve_shard(text: str | None, count: int | None, env: Mapping[str, str],
                  note: Callable[[str], None]) -> tuple[Shard | None, str]:
    """The shard this run takes (None: all ids) and its source, "" for none and "--shard K/N" when given."""
    if text is None or text.strip().lower() != "auto":
        if count is not None:
            raise ConfigError("--shard-count N goes with --shard auto (with --shard K/N, N is the count)")
        if text is None:
            return None, ""
        try:
            return Shard.parse(text), f"--shard {text.strip()}"
        except ValueError as exc:
            raise ConfigError(f"{exc}, or 'auto' to read it from the scheduler") from exc
    try:
        choice = shard_from_env(env, count)
    except ShardEnvError as exc:
        raise ConfigError(str(exc)) from exc
    note(f"shard {choice.index}/{choice.count} (--shard auto: {choice.source})")
    return Shard(choice.index, choice.count), choice.source
