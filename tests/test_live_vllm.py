"""Live token counts against a real vLLM on the CPU (the session's `vllm_scripted` tiny Qwen3).

The run asks vLLM for `stream_options.continuous_usage_stats`; then the running count the client keeps
while a reply streams is already exact before the final usage chunk arrives, for every request. And a
whole run's streamed count equals the sum of its records' `usage.completion_tokens`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client.core.payload import SamplingSettings, build_payload
from client.core.records import Prompt
from client.fleet.preflight import field_policy
from client.wire.sse import StreamParser
from tests.conftest import REPO, client_command, read_results, wait_until
from tests.engines.vllm_server import VLLMServer
from tests.test_live_metrics import scrape, value

pytestmark = pytest.mark.vllm

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
PROMPTS = [
    Prompt(id=f"p{i}", messages=[{"role": "user", "content": f"Question {i}: what is the weather?"}],
           tools=[WEATHER] if i % 2 else None, meta=None, source="test", line=i + 1)
    for i in range(6)
]


def _events(raw: bytes) -> list[bytes]:
    return [event for event in raw.replace(b"\r\n", b"\n").split(b"\n\n") if event.strip()]


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p.id for p in PROMPTS])
def test_running_count_is_exact_before_the_final_usage(vllm_scripted: VLLMServer, prompt: Prompt) -> None:
    policy = field_policy("auto", ["vllm"])
    assert policy.allows("continuous_usage_stats")
    payload = build_payload(prompt, prompt.messages, SamplingSettings(max_tokens=200, seed=3),
                            model=vllm_scripted.model_name, policy=policy)
    with httpx.stream("POST", f"{vllm_scripted.url}/v1/chat/completions", json=payload, timeout=120) as response:
        assert response.status_code == 200
        raw = response.read()
    events = _events(raw)
    chunks = [orjson.loads(e[6:]) for e in events if e.startswith(b"data: {")]
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] > 0
    with_choices = [c for c in chunks if c.get("choices")]
    assert all(c.get("usage") for c in with_choices[1:]), "a chunk without its running usage"

    parser = StreamParser()
    cut = raw.rfind(b"data: " + orjson.dumps(final)[:20])  # everything before the usage-only chunk
    parser.feed(raw[:cut])
    assert parser.exact_count
    assert parser.live_tokens == final["usage"]["completion_tokens"]


@pytest.mark.timeout(240)
def test_whole_run_streams_exactly_the_recorded_tokens(vllm_scripted: VLLMServer, tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(b"".join(orjson.dumps({"id": p.id, "messages": p.messages, **({"tools": p.tools}
                                                                                     if p.tools else {})}) + b"\n"
                                 for p in PROMPTS))
    stderr = tmp_path / "err"
    out = tmp_path / "out"
    with stderr.open("w") as sink:
        proc = subprocess.Popen(client_command(["--endpoints", vllm_scripted.url, "--prompts", str(prompts),
                                                "--out", str(out), "--max-tokens", "200", "--seed", "3",
                                                "--max-in-flight", "3", "--metrics-port", "0",
                                                "--metrics-linger", "60"]),
                                cwd=REPO, stdout=subprocess.DEVNULL, stderr=sink)
    try:
        wait_until(lambda: "ended after" in stderr.read_text(), "the end of the run", timeout=180, proc=proc)
        url = re.findall(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", stderr.read_text())[0]
        final: dict[str, Any] = {}

        def final_scrape() -> bool:
            final.update(scrape(url))
            return True

        final_scrape()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    records = read_results(out)
    assert len(records) == len(PROMPTS) and proc.returncode == 0, stderr.read_text()[-1500:]
    recorded = sum(r["usage"]["completion_tokens"] for r in records)
    assert value(final, "regen_requests_retried_total") == 0
    assert value(final, "regen_streamed_tokens_total") == recorded == value(final, "regen_completion_tokens_total")
