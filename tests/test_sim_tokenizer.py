"""The simulated server's `--tokenizer DIR`: where it finds the chat template, what the template is given,
and the ids a reply carries (simulator/tokens.py, prompts/sglang_input.py).

The tiny Qwen3-style tokenizer of tests/tokenizer_fixture.py is copied into each layout a tokenizer
directory comes in: the template inside tokenizer_config.json (older transformers) or beside it in
chat_template.jinja (current transformers, whose tokenizer_config.json then has no `chat_template`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from prompts.sglang_input import content_format
from simulator.__main__ import config_from_args
from simulator.config import SimConfig
from simulator.script import build_script
from simulator.server import SimServer
from simulator.tokens import SimTokenizer
from tests.tokenizer_fixture import TEMPLATE_PATH, TEMPLATES, tiny_tokenizer_dir

# A template that adds content to strings, as many do: it fails on a content-part list.
STRING_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _layout(root: Path, *, template: str | None, in_config: bool) -> Path:
    """A copy of the tiny tokenizer with `template` in tokenizer_config.json or in chat_template.jinja."""
    folder = root / "tokenizer"
    folder.mkdir()
    shutil.copy(tiny_tokenizer_dir() / "tokenizer.json", folder / "tokenizer.json")
    config = json.loads((tiny_tokenizer_dir() / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    if template is not None and in_config:
        config["chat_template"] = template
    elif template is not None:
        (folder / "chat_template.jinja").write_text(template)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@asynccontextmanager
async def serving(folder: Path, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    config = SimConfig(**{"port": 0, "speed": 500.0, "mean_tokens": 20, "max_gen_tokens": 200,
                          "tokenizer": str(folder), **settings})
    async with SimServer(config) as srv, httpx.AsyncClient(base_url=srv.url, timeout=10.0) as client:
        yield client


async def _ids(client: httpx.AsyncClient, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    resp = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages, "max_tokens": 4,
                                                           "return_token_ids": True, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("in_config", [True, False], ids=["tokenizer_config", "chat_template_jinja"])
async def test_the_template_is_found_in_either_file(tmp_path: Path, in_config: bool) -> None:
    folder = _layout(tmp_path, template=TEMPLATE_PATH.read_text(), in_config=in_config)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    async with serving(folder) as client:
        answer = await _ids(client, messages)
    tok = SimTokenizer(folder)
    expected = tok.encode("<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
                          "<think>\n")
    choice = answer["choices"][0]
    assert choice["prompt_token_ids"] == expected
    assert len(choice["response_token_ids"]) == answer["usage"]["completion_tokens"] > 0
    assert "token_ids" not in choice


def test_a_directory_without_a_template_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _layout(tmp_path, template=None, in_config=False)
    with pytest.raises(SystemExit):
        config_from_args(["--tokenizer", str(folder)])
    assert "chat_template.jinja" in capsys.readouterr().err


async def test_content_parts_reach_a_string_template_as_one_string(tmp_path: Path) -> None:
    """SGLang flattens text parts (joined by a space) for a template that does not loop over content."""
    folder = _layout(tmp_path, template=STRING_TEMPLATE, in_config=False)
    assert content_format(STRING_TEMPLATE) == "string"
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]
    async with serving(folder) as client:
        answer = await _ids(client, parts)
        stream = await client.post("/v1/chat/completions", json={
            "model": "m", "messages": parts, "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}, "return_input_ids_in_sglext": True})
    expected = SimTokenizer(folder).encode("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    assert answer["choices"][0]["prompt_token_ids"] == expected
    assert stream.status_code == 200
    chunks = [orjson.loads(line[6:]) for line in stream.text.splitlines() if line.startswith("data: {")]
    (ext,) = [c["sglext"] for c in chunks if "sglext" in c]
    assert ext["input_ids"] == expected and chunks[-1]["usage"]["prompt_tokens"] == len(expected)


def test_templates_that_loop_over_content_keep_the_parts() -> None:
    assert content_format("{% for m in messages %}{% for part in m.content %}{{ part.text }}{% endfor %}"
                          "{% endfor %}") == "openai"
    assert content_format("{% for message in messages %}{% for p in message['content'] %}{% endfor %}"
                          "{% endfor %}") == "openai"
    assert content_format("{{ messages[0].content }} <|vision_start|>") == "openai"  # a multimodal template
    # The Qwen3 style's loop is over a macro's argument; Qwen3.6's render_content loops over the parts.
    assert content_format(TEMPLATES["qwen3"].read_text()) == "string"
    assert content_format(TEMPLATES["qwen3.6"].read_text()) == "openai"


async def test_tools_are_rendered_as_sglang_dumps_them(tmp_path: Path) -> None:
    """`Tool.model_dump()`: the function as sent (unknown keys dropped, `description: null` added when left
    out), then `"defer_loading": null` beside it."""
    folder = _layout(tmp_path, template=TEMPLATE_PATH.read_text(), in_config=True)
    tool = {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}, "x": 1}}
    async with serving(folder) as client:
        answer = await _ids(client, [{"role": "user", "content": "Find it."}], tools=[tool])
    prompt = SimTokenizer(folder).tokenizer.decode(answer["choices"][0]["prompt_token_ids"],
                                                   skip_special_tokens=False)
    assert ('{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}, '
            '"description": null}, "defer_loading": null}') in prompt


async def test_history_arguments_that_are_not_json_are_a_400(tmp_path: Path) -> None:
    folder = _layout(tmp_path, template=TEMPLATE_PATH.read_text(), in_config=True)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "user", "content": "b"}]
    async with serving(folder) as client:
        resp = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    assert resp.status_code == 400
    assert resp.json()["message"] == "Assistant tool call function.arguments must be valid JSON."


def _events(text: str) -> list[dict[str, Any]]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no_thinking"])
@pytest.mark.parametrize("max_tokens", [60, 7, 1, None], ids=["max_60", "max_7", "max_1", "context_end"])
async def test_the_reply_stops_at_max_tokens_as_its_tokenizer_counts(tmp_path: Path, max_tokens: int | None,
                                                                      thinking: bool) -> None:
    """The script counts word pieces; the tiny tokenizer splits most of them into several tokens. An engine
    never generates past max_tokens (or the context's end), so the sim cuts where the tokenizer's count
    reaches the cap, streaming or not, and says "length"."""
    folder = _layout(tmp_path, template=TEMPLATE_PATH.read_text(), in_config=True)
    messages = [{"role": "user", "content": "Tell me about the weather in Paris."}]
    body: dict[str, Any] = {"model": "m", "messages": messages,
                            "chat_template_kwargs": {"enable_thinking": thinking}}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    async with serving(folder, mean_tokens=2000, max_gen_tokens=4000, context_length=600) as client:
        whole = (await client.post("/v1/chat/completions", json={**body, "return_token_ids": True})).json()
        stream = await client.post("/v1/chat/completions", json={
            **body, "stream": True, "return_output_ids_in_sglext": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    prompt = len(whole["choices"][0]["prompt_token_ids"])
    cap = max_tokens if max_tokens is not None else 600 - prompt
    choice, usage = whole["choices"][0], whole["usage"]
    assert choice["finish_reason"] == "length"
    assert len(choice["response_token_ids"]) == usage["completion_tokens"]
    # The cap, or one short where a character is more than one byte token and the cap fell inside it.
    assert cap - 1 <= usage["completion_tokens"] <= cap
    events = _events(stream.text)
    (finish,) = [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0].get(
        "finish_reason")]
    (ext,) = [e["sglext"] for e in events if "sglext" in e]
    running = [e["usage"]["completion_tokens"] for e in events if e.get("usage")]
    assert finish == "length"
    assert ext["output_ids"] == [choice["response_token_ids"]]
    assert running[-1] == usage["completion_tokens"] and max(running) <= cap
    field = "reasoning_content" if thinking else "content"
    streamed = "".join(e["choices"][0]["delta"].get(field) or "" for e in events if e["choices"])
    assert streamed == choice["message"][field]


async def test_a_reply_that_ends_by_itself_in_pieces_but_not_in_tokens_is_cut(tmp_path: Path) -> None:
    """Under max_tokens by the script's count, over it by the tokenizer's: the tokenizer decides."""
    folder = _layout(tmp_path, template=TEMPLATE_PATH.read_text(), in_config=True)
    config = SimConfig(mean_tokens=20, max_gen_tokens=200)
    cap = 30
    bodies = [{"model": "m", "messages": [{"role": "user", "content": f"Question {i}?"}], "max_tokens": cap}
              for i in range(40)]
    by_pieces = [b for b in bodies if build_script(b, True, config).cut(cap)[1] == "stop"]
    assert by_pieces, "some replies end by themselves within max_tokens word pieces"
    async with serving(folder) as client:
        answers = [(await client.post("/v1/chat/completions", json={**b, "return_token_ids": True})).json()
                   for b in by_pieces]
    counted = [len(a["choices"][0]["response_token_ids"]) for a in answers]
    assert all(n <= cap for n in counted)
    cut = [a for a in answers if a["choices"][0]["finish_reason"] == "length"]
    assert cut, "the tokenizer counts some of them past max_tokens"
    # The cap, or one short where the cap fell inside a piece; or, where the next piece is the first of the
    # content, short by the `\n</think>\n\n` that opens it, which the script emits whole.
    assert all(a["usage"]["completion_tokens"] >= cap - 1
               or (not a["choices"][0]["message"]["content"] and a["usage"]["completion_tokens"] >= cap - 4)
               for a in cut), [a["usage"]["completion_tokens"] for a in cut]
