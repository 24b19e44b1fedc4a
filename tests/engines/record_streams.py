"""Records raw SSE bodies from a real CPU vLLM serving the tiny Qwen3, as test fixtures.

This module owns tests/fixtures/streams/vllm/: for each case it writes ``NAME.sse`` (the HTTP body
bytes exactly as the server sent them, transfer framing removed, nothing decoded) and ``NAME.json``
(the request, the server, and the parsed outcome a client must arrive at). Scripted-model outcomes
are checked against the model's script.json before anything is written, so a recording can only
change if vLLM's behaviour does.

Run from the repo root with the main venv (needs `bash tests/setup/vllm.sh` first):

    .venv/bin/python tests/engines/record_streams.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.engines.sse import fold
from tests.engines.tiny_models import MODEL_NAMES, build_tiny_models, load_script
from tests.engines.vllm_server import BASE_ARGS, REPO_ROOT, VLLMServer, vllm_python

OUT_DIR = REPO_ROOT / "tests" / "fixtures" / "streams" / "vllm"
PATH = "/v1/chat/completions"

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
USAGE = {"stream_options": {"include_usage": True}}

# name -> (variant, request body without model/stream, key in script.json "expected" or a special)
CASES: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "thinking_on": ("scripted", {"messages": USER, "max_tokens": 64, **USAGE}, "thinking_on"),
    "thinking_off": (
        "scripted",
        {"messages": USER, "max_tokens": 64, "chat_template_kwargs": {"enable_thinking": False}, **USAGE},
        "thinking_off",
    ),
    "tool_call": (
        "scripted",
        {"messages": USER, "tools": [WEATHER_TOOL], "max_tokens": 64, "temperature": 0.6, "top_p": 0.95,
         **USAGE},
        "thinking_on_tools",
    ),
    "tool_call_thinking_off": (
        "scripted",
        {"messages": USER, "tools": [WEATHER_TOOL], "max_tokens": 64,
         "chat_template_kwargs": {"enable_thinking": False}, **USAGE},
        "thinking_off_tools",
    ),
    "length": ("scripted", {"messages": USER, "max_tokens": 3, **USAGE}, "length"),
    "token_ids": (
        "scripted",
        {"messages": USER, "tools": [WEATHER_TOOL], "max_tokens": 64, "return_token_ids": True, **USAGE},
        "thinking_on_tools",
    ),
    "no_usage": ("scripted", {"messages": USER, "max_tokens": 64}, "thinking_on"),
    "tool_result_turn": (
        "scripted",
        {
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                }]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"},
            ],
            "tools": [WEATHER_TOOL],
            "max_tokens": 64,
            "return_token_ids": True,
            **USAGE,
        },
        "thinking_on_tools",
    ),
    "random_model": (
        "random",
        {"messages": USER, "max_tokens": 24, "seed": 7, "return_token_ids": True, **USAGE},
        None,
    ),
}


def expected_for(key: str | None, script: dict[str, Any]) -> dict[str, Any] | None:
    if key is None:
        return None
    if key == "length":  # max_tokens 3: both reasoning tokens, then </think>
        base = script["expected"]["thinking_on"]
        return {**base, "content": "", "tool_calls": [], "finish_reason": "length",
                "completion_token_ids": base["completion_token_ids"][:3]}
    exp: dict[str, Any] = script["expected"][key]
    return exp


def check(name: str, got: dict[str, Any], exp: dict[str, Any] | None, body: dict[str, Any]) -> list[str]:
    """Differences between the parsed stream and what the script says vLLM must return."""
    errs: list[str] = []
    if not got["done"]:
        errs.append("stream did not end with [DONE]")
    if got["error"] is not None:
        errs.append(f"error event: {got['error']}")
    usage = got["usage"]
    if "stream_options" in body and usage is None:
        errs.append("no usage chunk")
    ids = got["completion_token_ids"]
    if body.get("return_token_ids"):
        if not got["prompt_token_ids"] or ids is None:
            errs.append("token ids missing")
        elif usage is not None:
            if usage["completion_tokens"] != len(ids):
                errs.append(f"usage.completion_tokens {usage['completion_tokens']} != {len(ids)} ids")
            if usage["prompt_tokens"] != len(got["prompt_token_ids"]):
                errs.append("usage.prompt_tokens != len(prompt_token_ids)")
    if exp is None:
        return errs
    for key in ("reasoning", "content", "finish_reason"):
        if got[key] != exp[key]:
            errs.append(f"{key}: got {got[key]!r}, expected {exp[key]!r}")
    calls = [{"name": c["name"], "arguments": c["arguments"]} for c in got["tool_calls"]]
    if calls != exp["tool_calls"]:
        errs.append(f"tool_calls: got {calls!r}, expected {exp['tool_calls']!r}")
    if ids is not None and ids != exp["completion_token_ids"]:
        errs.append(f"completion_token_ids: got {ids}, expected {exp['completion_token_ids']}")
    if usage is not None:
        if usage["completion_tokens"] != len(exp["completion_token_ids"]):
            errs.append(f"usage.completion_tokens: {usage['completion_tokens']}")
        details = usage.get("completion_tokens_details") or {}
        if details.get("reasoning_tokens") != min(exp["reasoning_tokens"], usage["completion_tokens"]):
            errs.append(f"usage reasoning_tokens: {details.get('reasoning_tokens')}")
    return errs


def record(server: VLLMServer, name: str, body: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    request = {"model": server.model_name, **body, "stream": True}
    raw = bytearray()
    with httpx.Client(timeout=60.0) as client, client.stream(
        "POST", server.url + PATH, json=request, headers={"Accept-Encoding": "identity"}
    ) as resp:
        for piece in resp.iter_raw():
            raw.extend(piece)
        meta = {"status": resp.status_code, "content_type": resp.headers.get("content-type")}
    if meta["status"] != 200:
        raise RuntimeError(f"{name}: HTTP {meta['status']}: {bytes(raw)[:500]!r}")
    return bytes(raw), {"request": request, **meta}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Record vLLM SSE fixtures from the tiny Qwen3.")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), default=None)
    args = parser.parse_args(argv)
    names = args.only or list(CASES)

    python = vllm_python()
    dirs = build_tiny_models(python)
    script = load_script(dirs["scripted"])
    args.out.mkdir(parents=True, exist_ok=True)
    failures = 0
    for variant in ("scripted", "random"):
        todo = [n for n in names if CASES[n][0] == variant]
        if not todo:
            continue
        log = REPO_ROOT / ".cache" / "vllm-logs" / f"record-{variant}.log"
        log.unlink(missing_ok=True)
        with VLLMServer(dirs[variant], MODEL_NAMES[variant], python=python, log_path=log) as server:
            version = httpx.get(server.url + "/version", timeout=10).json().get("version")
            for name in todo:
                _, body, key = CASES[name]
                raw, meta = record(server, name, body)
                got = fold(raw)
                errs = check(name, got, expected_for(key, script), body)
                if errs:
                    failures += 1
                    print(f"FAIL {name}:\n  " + "\n  ".join(errs), file=sys.stderr)
                    continue
                sidecar = {
                    "engine": f"vllm {version} (CPU)",
                    "server_args": ["--served-model-name", server.model_name, *BASE_ARGS],
                    "model_variant": variant,
                    "path": PATH,
                    **meta,
                    "expected": {k: v for k, v in got.items() if k not in ("error", "done")},
                }
                (args.out / f"{name}.sse").write_bytes(raw)
                (args.out / f"{name}.json").write_text(json.dumps(sidecar, indent=2, ensure_ascii=False) + "\n")
                print(f"ok   {name}: {len(raw)} bytes")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
