"""A tool call's `arguments` as chat templates want them: the JSON string of the OpenAI wire format parsed
into an object. One rule for the two places that render a conversation the way the server does: the
simulated SGLang server (prompts.sglang_input, which refuses what SGLang refuses) and the export's re-render
(client.export.render, which keeps what it cannot parse)."""

from __future__ import annotations

from typing import Any

import orjson


def arguments_object(arguments: str) -> dict[str, Any] | None:
    """The arguments parsed into a JSON object, or None when they are not JSON or not an object."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None
