"""Reading the JSON that `client.estimate --json` writes, for the one figure the run's ETA takes from it:
the mean output tokens per prompt of the projected set (its first target)."""

from __future__ import annotations

from pathlib import Path

import orjson

from client.core.errors import ConfigError


def expected_tokens_per_prompt(path: Path) -> float:
    """The projection's point estimate of output tokens divided by its prompts; ConfigError naming the
    file and what is missing otherwise."""
    try:
        document = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"--estimate {path}: cannot read it ({exc.strerror or exc})") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--estimate {path}: not JSON ({exc}); pass the output of "
                          "`python -m client.estimate ... --json`") from exc
    projection = document.get("projection") if isinstance(document, dict) else None
    targets = projection.get("targets") if isinstance(projection, dict) else None
    first = targets[0] if isinstance(targets, list) and targets and isinstance(targets[0], dict) else None
    tokens = first.get("output_tokens") if first is not None else None
    point = tokens.get("point") if isinstance(tokens, dict) else None
    prompts = first.get("prompts") if first is not None else None
    if not isinstance(point, int | float) or not isinstance(prompts, int) or prompts <= 0 or point <= 0:
        raise ConfigError(f"--estimate {path}: no projection with output tokens and prompts in it (was the "
                          "estimate run with --prompts?); pass the output of `python -m client.estimate ... --json`")
    return float(point) / prompts
