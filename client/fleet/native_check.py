"""`--continue-replies` at start: every server must be able to make a reply from exact ids and split it as its
chat completions do, or the run is refused before any prompt is sent (client.engine.native_reply says why the
path exists). Each server's `/server_info` must name its reasoning and tool-call parsers, the same on every
server, and `incremental_streaming_output` (SGLang's `--incremental-streaming-output`: without it each event of
a `/generate` stream repeats every id so far, bytes that grow with the square of the reply); the run must ask
for exact ids (`--token-ids on`) and render prompts on the server (its tokenize route)."""

from __future__ import annotations

from collections.abc import Sequence

from client.core.errors import AttemptError, ConfigError
from client.core.payload import RequestShape
from client.wire.endpoint import Endpoint
from client.wire.native import Parsers

FLAG = "--continue-replies"


async def check_native(endpoints: Sequence[Endpoint], shape: RequestShape) -> Parsers:
    found: Parsers | None = None
    for endpoint in endpoints:
        if not shape.ids_for(endpoint.index).required:
            raise ConfigError(f"{FLAG} continues replies from their exact token ids: add --token-ids on")
        if shape.count_path(endpoint.index) is None:
            raise ConfigError(f"{FLAG}: {endpoint.url} has no tokenize route to render prompts with; it needs "
                              "SGLang 0.5.23 or later")
        try:
            info = await endpoint.get_json("/server_info")
        except (AttemptError, ValueError) as exc:
            raise ConfigError(f"{FLAG}: {endpoint.url} does not answer /server_info ({exc}); it needs SGLang, "
                              "whose /generate and parsers it uses") from exc
        info = info if isinstance(info, dict) else {}
        reasoning, tool_call = info.get("reasoning_parser"), info.get("tool_call_parser")
        if not isinstance(reasoning, str) or not isinstance(tool_call, str):
            raise ConfigError(f"{FLAG}: {endpoint.url} runs without --reasoning-parser or --tool-call-parser "
                              f"({reasoning!r}, {tool_call!r}); the replies are split by the server's own parsers")
        if info.get("incremental_streaming_output") is not True:
            raise ConfigError(f"{FLAG}: {endpoint.url} streams /generate without --incremental-streaming-output: "
                              "each event would repeat every id so far. Start SGLang with that flag (with the "
                              "launcher: launch/start_servers.sh ... -- --incremental-streaming-output), or run "
                              "without " + FLAG)
        parsers = Parsers(reasoning, tool_call)
        if found is not None and parsers != found:
            raise ConfigError(f"{FLAG}: the servers run different parsers ({found} and {parsers} on "
                              f"{endpoint.url}); the replies would be split two ways")
        found = parsers
    assert found is not None
    return found
