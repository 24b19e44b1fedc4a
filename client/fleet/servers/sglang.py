"""SGLang (0.5.23): the main engine. Recognised by `/v1/models` `owned_by: sglang` or its `/server_info`; takes
the sampling extensions and `chat_template_kwargs`; gives token ids in the `sglext` chunk it streams after
the finish chunk (client.fleet.servers.sglext, its reply dialect), with its MTP and cache figures; counts a
prompt at `/v1/tokenize`. Warns at start of a tool-call parser whose streaming loses reply text."""

from __future__ import annotations

from typing import Any

from client.core.errors import AttemptError
from client.fleet.profile import TOKEN_IDS_FIELD, ServerProfile
from client.fleet.servers.sglext import REPLY, SGLANG_REQUEST_FIELDS
from client.wire.endpoint import Endpoint

# SGLang tool-call parsers whose streaming loses reply text: SGLang 0.5.23's Qwen25Detector (`qwen`, `qwen25`)
# goes through BaseFormatDetector.parse_streaming_increment, which jumps to "<tool_call>\n" when an increment
# holds it and returns none of the text before it in that increment. How the tokens fall into increments
# follows the server's timing (more tokens per increment under load, and with MTP), so the loss does too.
# qwen3_coder, the parser Qwen3.6 is served with, keeps that text.
LOSSY_STREAMING_TOOL_PARSERS = frozenset({"qwen", "qwen25"})


def is_sglang_info(info: Any) -> bool:
    return isinstance(info, dict) and ("tp_size" in info or "served_model_name" in info)


async def lossy_tool_parser(endpoint: Endpoint) -> str | None:
    """The tool-call parser the server's `/server_info` names, when it is one that loses text streaming."""
    try:
        info = await endpoint.get_json("/server_info")
    except (AttemptError, ValueError):
        return None  # not told: nothing to warn of
    parser = info.get("tool_call_parser") if isinstance(info, dict) else None
    return parser if parser in LOSSY_STREAMING_TOOL_PARSERS else None


async def tools_warning(endpoint: Endpoint) -> str | None:
    parser = await lossy_tool_parser(endpoint)
    if parser is None:
        return None
    return (f"warning: {endpoint.url} runs --tool-call-parser {parser}, which streaming loses the reply text that "
            "arrives in the same chunk as a tool call's start (SGLang 0.5.23): `content` before a call may end "
            "early; the token ids (--token-ids) stay whole. Serve Qwen3.6 with --tool-call-parser qwen3_coder, "
            "which keeps it (the launcher's default).")


PROFILE = ServerProfile(
    name="sglang", label="SGLang", owned_by=("sglang",), server_info=is_sglang_info,
    extensions=frozenset({"top_k", "min_p", "chat_template_kwargs", TOKEN_IDS_FIELD, "continuous_usage_stats"}),
    id_fields=SGLANG_REQUEST_FIELDS, count_path="/v1/tokenize", tools_warning=tools_warning,
    reply=REPLY, ids_hint="SGLang 0.5.23 or later, which sends sglext.output_ids on return_output_ids_in_sglext")
