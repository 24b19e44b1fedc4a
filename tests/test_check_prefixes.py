"""The template check's tokens read off one encoding: `ChatTokenizer.encode_prefixes` gives, for every
position of a text, the length of that prefix's own encoding (what SpecForge computes by encoding each
prefix), and `trainer_row` gives the same row with it as with SpecForge's literal way, with the real Qwen
templates on hard conversations (tool loops, reasoning kept and dropped, unicode, empty think blocks, a
cut window, only the last turn trained)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from client.export import fidelity
from client.export.render import assistant_turn, sglang_tool
from client.export.rows import Sample, Turn
from client.export.specforge_parse import trainer_row
from client.local.chat_template import ChatTokenizer, _first_piece_apart, template_messages
from tests.real_templates import QWEN3, QWEN35, QWEN36, tokenizer_dir
from tests.results_fixture import result, tool_call
from tests.tokenizer_fixture import tiny_tokenizer_dir

TEXTS = [
    "<|im_start|>assistant\n<think>\n\nThe user asks.\n</think>\n\nThe answer is two.<|im_end|>\n",
    "<|im_start|>user\nWetter in Köln? e\u0301 \u00e9  \n\n\t<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n\n",
    "no added token at all, only words  and   spaces\n\n\n",
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    "<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n",
    "<think><think>\n\n<|im_end|><|im_end|>\n\n",
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_prefix_length_is_the_prefix_encoded_alone(text: str) -> None:
    tok = ChatTokenizer.load(tiny_tokenizer_dir())
    positions = list(range(len(text) + 1))
    ids, lengths = tok.encode_prefixes(text, positions)
    assert ids == tok.encode(text)
    assert lengths == [len(tok.encode(text[:k])) for k in positions]


def test_a_pre_tokenizer_that_treats_the_first_piece_apart_is_seen() -> None:
    first = {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "prepend_scheme": "first"}]}
    assert _first_piece_apart(first)
    assert not _first_piece_apart({"type": "Metaspace", "prepend_scheme": "always"})
    assert not _first_piece_apart({"type": "ByteLevel", "add_prefix_space": False})


def _conversations() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    weather = {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": {"type": "object",
                                                               "properties": {"city": {"type": "string"}}}}}
    call = {**tool_call("get_weather", '{"city": "Paris"}'), "id": "call_1"}
    loop = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and in Köln?"},
            {"role": "assistant", "content": "Let me check.", "reasoning_content": "Two cities.\n\nFirst Paris.",
             "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 \u00b0C"},
            {"role": "assistant", "content": "", "reasoning_content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"rain\": true}"},
            {"role": "assistant", "content": "Sunny in Paris; rain in Köln.", "reasoning_content": "Both known."}]
    chat = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!", "reasoning_content": "A greeting."},
            {"role": "user", "content": "e\u0301t\u00e9?\n\n"},
            {"role": "assistant", "content": "\u00e9t\u00e9: summer.", "reasoning_content": ""}]
    return [(loop, [weather]), (chat, None), (loop[:3], [weather])]


@pytest.mark.parametrize("name", [QWEN3, QWEN35, QWEN36])
def test_the_row_is_the_trainers_literal_row(tmp_path: Path, name: str) -> None:
    tok = ChatTokenizer.load(tokenizer_dir(name, tmp_path / name))
    for conversation, tools in _conversations():
        for max_length in (None, 7, 400):
            for last in (False, True):
                fast = trainer_row(tok, conversation, tools, max_length=max_length, train_only_last_turn=last)
                literal = trainer_row(tok, conversation, tools, max_length=max_length, train_only_last_turn=last,
                                      literal=True)
                assert fast == literal
                assert any(fast.loss_mask) or max_length is not None  # spans were found and mapped


def _served(tok: ChatTokenizer, record: dict[str, Any], tools: list[dict[str, Any]] | None) -> Sample:
    """The record as a server that rendered `tools` made it: its prompt and reply ids."""
    history = template_messages(record["messages"], tok.content_format)
    prompt = tok.render(history, tools, add_generation_prompt=True)
    full = tok.render([*history, *template_messages([assistant_turn(record)])], tools, add_generation_prompt=False)
    assert full.startswith(prompt) and tok.eos
    reply = full[len(prompt):]
    reply = reply[:reply.index(tok.eos) + len(tok.eos)]
    turn = Turn(record, tok.encode(prompt), tok.encode(reply), record.get("tools"), record["id"])
    return Sample(record["id"], (turn,), tok.content_format)


@pytest.mark.parametrize("name", [QWEN36, QWEN3])
def test_a_check_that_leaves_the_recorded_tools_early_gives_the_literal_verdict(tmp_path: Path, name: str) -> None:
    """The recorded tools' form is judged on the ids up to where its text parts from SGLang's (rows of a run
    on SGLang): the verdict is the one of the check that renders and encodes every form whole, whichever form
    the server rendered, with the trainer's template or another, cut by a window or not."""
    serving = ChatTokenizer.load(tokenizer_dir(name, tmp_path / name))
    trainer_dir = tokenizer_dir(name, tmp_path / f"{name}-trainer")
    template = (trainer_dir / "chat_template.jinja").read_text()
    (trainer_dir / "chat_template.jinja").write_text(template.replace("</think>\\n\\n", "</think>\\n"))
    other = ChatTokenizer.load(trainer_dir)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    call = {**tool_call("get_weather", '{"city": "Paris"}'), "id": "call_1"}
    record = result("tools", reasoning="I should call it.", content="Let me check.", tool_calls=[call],
                    tools=[weather], finish_reason="tool_calls")
    verdicts = []
    for tools in ([weather], [sglang_tool(weather)]):
        sample = _served(serving, record, tools)
        for tok in (serving, other):
            for max_length in (None, 12, 400):
                fast = fidelity.check(sample, tok, max_length=max_length)
                assert fast == fidelity.check(sample, tok, max_length=max_length, literal=True)
                verdicts.append(fast.matched)
    assert True in verdicts and False in verdicts
